// The one tokenizer interface: text <-> token ids. tokenizer/ implements it
// for real checkpoints (SentencePiece, Hugging Face tokenizer.json); the
// HTTP front end (serving/) reads text through a model's ModelTokenizer,
// so it needs neither those libraries nor Python.
module;
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.core.tokenizer;
import slicesched.core.status;

export namespace slicesched {

// Immutable once made; encode and decode are const and safe from any
// thread at once (HTTP threads call them concurrently). Shared as
// std::shared_ptr<const Tokenizer>.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text` (UTF-8), without BOS or EOS: the caller adds them
  // where its model wants them (bos_id()). Never fails: bytes the model
  // cannot spell become its unknown piece.
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;
  // The text of `ids`. An id outside [0, vocab_size()) throws
  // std::out_of_range naming it (a model's vocabulary can be larger than its
  // tokenizer's: padding rows).
  virtual std::string decode(std::span<const std::int64_t> ids) const = 0;
  // The bytes token `id` stands for, as OpenAI's logprobs `bytes` give
  // them: one byte of a multi-byte character is that byte, not U+FFFD's
  // three. By default the token's decoded text; tokenizers that know their
  // pieces' bytes say so. Same range rule and threading as decode.
  virtual std::string token_bytes(std::int64_t id) const {
    const std::int64_t one[] = {id};
    return decode(one);
  }
  // A text prompt's ids as the model's own tokenizer makes them by default
  // (Hugging Face's add_special_tokens=True, which vLLM's completions use):
  // BOS first only where the tokenizer adds one. Same threading and
  // failure as encode. Default: bos_id() (if any), then encode().
  virtual std::vector<std::int64_t> encode_prompt(std::string_view text) const;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t bos_id() const = 0;  // -1: none
  virtual std::int64_t eos_id() const = 0;  // -1: none
  // The file it was loaded from, for messages.
  virtual const std::string& path() const = 0;
};

// The bytes a sentencepiece-style piece spells: its word mark "▁" (U+2581)
// is the space it stands for, a byte piece ("<0xE2>") that byte; the rest
// as is. For Tokenizer::token_bytes.
std::string piece_bytes(std::string_view piece);

// A served model's tokenizer, or why it has none: what the front end
// needs of text. Without a tokenizer, text is refused with `absent` (what
// to do) and token ids need none. Copyable; immutable.
struct ModelTokenizer {
  std::shared_ptr<const Tokenizer> tokenizer;  // null: none
  std::string absent;                          // when null: one line saying why and what to do
  bool has_text() const { return tokenizer != nullptr; }
  // A text prompt's ids as its tokenizer makes them by default
  // (Tokenizer::encode_prompt: BOS first where it adds one, as Hugging
  // Face's and vLLM's), so text and the same ids sent as a list give the
  // same tokens. FailedPrecondition(absent) without a tokenizer.
  Result<std::vector<std::int64_t>> encode_prompt(std::string_view text) const;
  // The ids of `text` alone (a chat template's text names its special
  // tokens itself). FailedPrecondition(absent) without a tokenizer.
  Result<std::vector<std::int64_t>> encode(std::string_view text) const;
  // The text of the ids the tokenizer knows (an id past its vocabulary is
  // one of the model's padding rows and has no text); "" without one.
  std::string decode(std::span<const std::int64_t> ids) const;
};

}  // namespace slicesched
