module;
#include <cctype>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

module slicesched.core.tokenizer;

namespace slicesched {

std::string piece_bytes(std::string_view piece) {
  const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  if (piece.size() == 6 && piece.starts_with("<0x") && piece.ends_with(">") && hex(piece[3]) && hex(piece[4]))
    return std::string(1, static_cast<char>(std::stoi(std::string(piece.substr(3, 2)), nullptr, 16)));
  std::string out;
  for (std::size_t at = 0; at < piece.size();) {
    if (piece.substr(at, 3) == "\xE2\x96\x81") {
      out += ' ';
      at += 3;
    } else {
      out += piece[at++];
    }
  }
  return out;
}

std::vector<std::int64_t> Tokenizer::encode_prompt(std::string_view text) const {
  std::vector<std::int64_t> ids;
  if (bos_id() >= 0) ids.push_back(bos_id());
  const std::vector<std::int64_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

Result<std::vector<std::int64_t>> ModelTokenizer::encode_prompt(std::string_view text) const {
  if (!tokenizer) return FailedPrecondition(absent);
  return tokenizer->encode_prompt(text);
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
