// Tokenizers for real checkpoints: text <-> token ids, from a kept library,
// never hand-written. sentencepiece (Debian's libsentencepiece) reads a
// tokenizer.model (Llama 2, Mistral). A Hugging Face tokenizer.json (Llama
// 3, Qwen2.5 ship only that) goes through Hugging Face's own `tokenizers`
// library (PyPI, installed into .venv) in an embedded CPython: no C++
// library for it is packaged in Debian 12 or on PyPI (docs/live.md,
// "Checkpoints and tokenizers").
//
// A Tokenizer is immutable once loaded; encode and decode are const and
// safe from any thread (a tokenizer.json one serializes them on Python's
// GIL). Shared as std::shared_ptr<const Tokenizer>.
module;
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.tokenizer;
import slicesched.core.tokenizer;
import slicesched.config;
import slicesched.core.status;

export namespace slicesched {

// Loads a tokenizer from `path`: a sentencepiece model file, a Hugging Face
// tokenizer.json (any *.json), or a directory holding tokenizer.model or,
// failing that, tokenizer.json. A tokenizer.json takes BOS and EOS from
// tokenizer_config.json beside it (bos_token, eos_token), else has none.
// Fails with one line naming the path: nothing there (NotFound), a file the
// library cannot read or a bad tokenizer_config.json (InvalidArgument), or
// Python's `tokenizers` package missing (FailedPrecondition, saying to run
// scripts/setup.sh). Thread-safe.
Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const std::string& path);

// The tokenizer of [[models]] entry `m`: its `tokenizer` file when given,
// else its checkpoint directory's tokenizer.model or tokenizer.json when
// there is one, else none (with the reason). Fails (one line starting with m.where and the key) when
// the file cannot be loaded or when the tokenizer's vocabulary is larger
// than the model's (its ids would index past the embedding).
Result<ModelTokenizer> model_tokenizer(const ModelConfig& m);

// A model's chat template (the Jinja text Hugging Face ships) and the
// special tokens it names.
struct ChatTemplate {
  std::string text;
  std::string source;  // where it came from, for messages
  std::string bos, eos;
};

// The chat template of [[models]] entry `m`: `override_file` when given
// (--chat-template: the file's text is the template), else the
// chat_template of the tokenizer_config.json beside its tokenizer (a
// string, or the "default" of a list of {name, template}), else a
// chat_template.jinja there; nothing when none. Fails (one line naming the
// file) on an unreadable file or a malformed chat_template.
Result<std::optional<ChatTemplate>> model_chat_template(const ModelConfig& m, const std::string& override_file);

// Compiles `tmpl` as render_chat_template would (jinja2, its sandbox):
// fails with the template's syntax error (its line), or FailedPrecondition
// when jinja2 is missing. So serve refuses a malformed template when it
// starts, not on every chat request. Thread-safe (on Python's GIL).
Status check_chat_template(const std::string& tmpl);

// `messages_json` (a JSON array of {role, content}) rendered by the
// template with a generation prompt, through Python's jinja2 in a sandbox
// as transformers renders it. Fails with the template's own error (its
// raise_exception), or FailedPrecondition when jinja2 is missing.
// Thread-safe (on Python's GIL).
Result<std::string> render_chat_template(const std::string& tmpl, const std::string& messages_json,
                                         const std::string& bos, const std::string& eos);

// The ids that end generation for `m`: generation_config.json's
// eos_token_id (an id or a list) in its checkpoint, else the tokenizer's
// EOS, else none. Fails on a malformed generation_config.json.
Result<std::vector<std::int64_t>> model_eos_ids(const ModelConfig& m, const Tokenizer* tokenizer);

}  // namespace slicesched

// Not exported: load_tokenizer's tokenizer.json half (hf_tokenizer.cpp, the
// one file that includes Python.h). `file` is a tokenizer.json that exists.
namespace slicesched {
Result<std::shared_ptr<const Tokenizer>> load_hf_tokenizer(const std::string& file);
}  // namespace slicesched
