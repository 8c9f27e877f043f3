module;
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

module slicesched.core.tokenizer;

namespace slicesched {

Result<std::vector<std::int64_t>> ModelTokenizer::encode_prompt(std::string_view text) const {
  if (!tokenizer) return FailedPrecondition(absent);
  std::vector<std::int64_t> ids;
  if (tokenizer->bos_id() >= 0) ids.push_back(tokenizer->bos_id());
  const std::vector<std::int64_t> body = tokenizer->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

Result<std::vector<std::int64_t>> ModelTokenizer::encode(std::string_view text) const {
  if (!tokenizer) return FailedPrecondition(absent);
  return tokenizer->encode(text);
}

std::string ModelTokenizer::decode(std::span<const std::int64_t> ids) const {
  if (!tokenizer) return {};
  std::vector<std::int64_t> known;
  known.reserve(ids.size());
  for (std::int64_t id : ids)
    if (id >= 0 && id < tokenizer->vocab_size()) known.push_back(id);
  return tokenizer->decode(known);
}

}  // namespace slicesched
