// The per-model text hook of the HTTP front end. A model with an encode hook
// takes text prompts; one with a decode hook answers with text. Both are
// empty until a model ships a tokenizer (then the front end needs no
// change): without encode a text prompt is refused (400) and the client
// sends token ids; without decode a reply's text is empty and its tokens are
// in `choices[].token_ids` (docs/serving.md).
module;
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.serving.tokenizer;
export import slicesched.core.status;

export namespace slicesched::serving {

// Both functions are called from HTTP threads at once: they must be
// thread-safe. encode fails with a one-line reason (the client's 400).
struct Tokenizer {
  std::function<Result<std::vector<std::int64_t>>(std::string_view)> encode;
  std::function<std::string(std::span<const std::int64_t>)> decode;
  // encode without BOS: a chat template's text names its special tokens itself.
  std::function<Result<std::vector<std::int64_t>>(std::string_view)> encode_plain;
};

}  // namespace slicesched::serving
