// model_tokenizer: which tokenizer a configured model has, if any.
module;
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

module slicesched.tokenizer;

namespace slicesched {

Result<ModelTokenizer> model_tokenizer(const ModelConfig& m) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ModelTokenizer out;
  std::string key;
  std::string from;
  if (!m.tokenizer.empty()) {
    key = ".tokenizer: ", from = m.tokenizer;
  } else if (!m.checkpoint.empty() && (fs::exists(fs::path(m.checkpoint) / "tokenizer.model", ec) ||
                                       fs::exists(fs::path(m.checkpoint) / "tokenizer.json", ec))) {
    key = ".checkpoint: ", from = m.checkpoint;
  } else {
    const std::string text = "model '" + m.name + "' has no tokenizer, so text prompts are refused; send token ids";
    if (m.checkpoint.empty())
      out.absent = text + " (or give [[models]] tokenizer = a tokenizer.model or tokenizer.json)";
    else
      out.absent = text + " (its checkpoint has no tokenizer.model or tokenizer.json)";
    return out;
  }
  auto tok = load_tokenizer(from);
  if (!tok.ok()) return Status(tok.status().code(), m.where + key + tok.status().message());
  auto model = make_model(m);
  if (!model.ok()) return model.status();
  const std::int64_t vocab = model.value()->config().vocab;
  if (tok.value()->vocab_size() > vocab)
    return InvalidArgument(m.where + key + tok.value()->path() + ": the tokenizer has " +
                           std::to_string(tok.value()->vocab_size()) + " pieces, more than model '" + m.name +
                           "''s vocabulary of " + std::to_string(vocab));
  out.tokenizer = std::move(tok).value();
  return out;
}

}  // namespace slicesched
