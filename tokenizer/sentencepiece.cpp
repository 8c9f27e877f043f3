// load_tokenizer: sentencepiece's SentencePieceProcessor behind Tokenizer,
// and which file a path names (tokenizer.json: hf_tokenizer.cpp).
module;
#include <sentencepiece_processor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.tokenizer;

namespace slicesched {

namespace {

namespace fs = std::filesystem;

class SentencePiece final : public Tokenizer {
 public:
  SentencePiece(std::string path, std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
      : path_(std::move(path)), sp_(std::move(sp)) {
    for (int i = 0; i < sp_->GetPieceSize(); ++i)
      if (sp_->IsControl(i) || sp_->IsUnknown(i))
        if (const std::string& p = sp_->IdToPiece(i); !p.empty()) specials_.emplace_back(p, i);
  }

  // A special piece written in the text ("<s>", "</s>", "<unk>": a chat
  // template's BOS) is that id, and the text between them is encoded a
  // stretch at a time, as transformers' LlamaTokenizer splits it (and vLLM
  // with it). sentencepiece alone spelled "<s>" as "<", "s", ">" pieces, so a
  // Llama-2 or Mistral chat lost its BOS (an outside probe).
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> out;
    while (!text.empty()) {
      std::size_t at = std::string_view::npos, len = 0;
      int id = -1;
      for (const auto& [piece, i] : specials_)
        if (const std::size_t p = text.find(piece);
            p != std::string_view::npos && (p < at || (p == at && piece.size() > len)))
          at = p, len = piece.size(), id = i;
      encode_plain(text.substr(0, at), out);
      if (at == std::string_view::npos) break;
      out.push_back(id);
      text.remove_prefix(at + len);
    }
    return out;
  }

  std::string decode(std::span<const std::int64_t> ids) const override {
    std::vector<int> narrow;
    narrow.reserve(ids.size());
    for (std::int64_t id : ids) {
      if (id < 0 || id >= vocab_size())
        throw std::out_of_range(path_ + ": token id " + std::to_string(id) + " is outside the tokenizer's [0, " +
                                std::to_string(vocab_size()) + ")");
      narrow.push_back(static_cast<int>(id));
    }
    std::string text;
    if (auto st = sp_->Decode(narrow, &text); !st.ok()) throw std::runtime_error(path_ + ": decode: " + st.ToString());
    return text;
  }

  // Control and unknown pieces are their decoded text; the others as
  // piece_bytes spells them.
  std::string token_bytes(std::int64_t id) const override {
    if (id < 0 || id >= vocab_size())
      throw std::out_of_range(path_ + ": token id " + std::to_string(id) + " is outside the tokenizer's [0, " +
                              std::to_string(vocab_size()) + ")");
    const int i = static_cast<int>(id);
    if (sp_->IsControl(i) || sp_->IsUnknown(i)) return Tokenizer::token_bytes(id);
    return piece_bytes(sp_->IdToPiece(i));
  }

  std::int64_t vocab_size() const override { return sp_->GetPieceSize(); }
  std::int64_t bos_id() const override { return sp_->bos_id(); }
  std::int64_t eos_id() const override { return sp_->eos_id(); }
  const std::string& path() const override { return path_; }

 private:
  void encode_plain(std::string_view text, std::vector<std::int64_t>& out) const {
    if (text.empty()) return;
    std::vector<int> ids;
    // sentencepiece fails only on an unloaded model; this one is loaded.
    if (auto st = sp_->Encode(text, &ids); !st.ok()) throw std::runtime_error(path_ + ": encode: " + st.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<std::pair<std::string, int>> specials_;  // control and unknown pieces, by their text
};

}  // namespace

Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const std::string& path) {
  std::error_code ec;
  fs::path file(path);
  if (fs::is_directory(file, ec)) {
    if (fs::exists(file / "tokenizer.model", ec)) {
      file /= "tokenizer.model";
    } else if (fs::exists(file / "tokenizer.json", ec)) {
      file /= "tokenizer.json";
    } else {
      return NotFound(path + ": no tokenizer.model or tokenizer.json in this folder");
    }
  }
  if (!fs::exists(file, ec))
    return NotFound(file.string() + ": no such file (a sentencepiece tokenizer.model or a tokenizer.json)");
  if (file.extension() == ".json") return load_hf_tokenizer(file.string());
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (auto st = sp->Load(file.string()); !st.ok())
    return InvalidArgument(file.string() + ": not a sentencepiece model (" + st.ToString() + ")");
  return std::shared_ptr<const Tokenizer>(std::make_shared<SentencePiece>(file.string(), std::move(sp)));
}

}  // namespace slicesched
