// Tokenizers: a real sentencepiece model, trained here on a small text with
// sentencepiece's own trainer, loads from its file or its folder, encodes and
// decodes; a model without a tokenizer refuses text and says why; a
// tokenizer.json is refused with what is supported.
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

import slicesched.config;
import slicesched.tokenizer;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

// A folder with tokenizer.model trained on a few hundred lines (once per
// process).
const std::string& trained() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("slicesched_tok_" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    {
      std::ofstream text(d / "corpus.txt");
      const char* words[] = {"the",          "scheduler", "places", "layer",   "groups",  "on",
                             "accelerators", "tokens",    "flow",   "between", "devices", "and",
                             "caches",       "stay",      "where",  "they",    "were",    "made"};
      for (int i = 0; i < 400; ++i) {
        for (int j = 0; j < 9; ++j) text << words[(i * 7 + j * 5) % 18] << (j == 8 ? "" : " ");
        text << ".\n";
      }
    }
    const auto st = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (d / "corpus.txt").string() + " --model_prefix=" + (d / "tokenizer").string() +
        " --vocab_size=80 --hard_vocab_limit=false --model_type=unigram --minloglevel=2");
    REQUIRE(st.ok());
    return d.string();
  }();
  return dir;
}

ModelConfig tiny_model(const std::string& name) {
  ModelConfig m;  // llama-tiny's shapes: 512 token ids
  m.name = name;
  m.preset = "llama-tiny";
  m.vocab = 512, m.hidden = 64, m.heads = 4, m.kv_heads = 2, m.mlp = 128, m.layers = 4, m.groups = 2;
  m.dtype = "float32";
  m.where = "x.toml:3: models[0]";
  return m;
}

}  // namespace

TEST_CASE("a trained sentencepiece model encodes and decodes", "[tokenizer]") {
  const std::string file = trained() + "/tokenizer.model";
  auto tok = load_tokenizer(file);
  REQUIRE(tok.ok());
  const Tokenizer& t = *tok.value();
  CHECK(t.path() == file);
  CHECK(t.vocab_size() > 20);
  CHECK(t.vocab_size() <= 80);
  const std::string text = "the scheduler places layer groups on accelerators.";
  const std::vector<std::int64_t> ids = t.encode(text);
  REQUIRE(!ids.empty());
  CHECK(ids.size() < text.size());  // pieces, not characters
  for (auto id : ids) CHECK((id >= 0 && id < t.vocab_size()));
  CHECK(t.decode(ids) == text);
  CHECK(t.encode(text) == ids);  // deterministic
  CHECK(t.encode("").empty());
  CHECK(t.bos_id() >= 0);
  CHECK(t.eos_id() >= 0);
  const std::vector<std::int64_t> bad = {ids[0], t.vocab_size()};
  CHECK_THROWS_WITH(t.decode(bad), Catch::Contains("token id " + std::to_string(t.vocab_size()) + " is outside"));

  // From the folder too.
  auto from_dir = load_tokenizer(trained());
  REQUIRE(from_dir.ok());
  CHECK(from_dir.value()->encode(text) == ids);
}

TEST_CASE("tokenizer files that cannot be used are refused in one line", "[tokenizer][bad-input]") {
  const fs::path d = fs::temp_directory_path() / ("slicesched_tok_bad_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "tokenizer.json") << "{}";
  auto json_dir = load_tokenizer(d.string());
  REQUIRE(!json_dir.ok());
  CHECK_THAT(json_dir.status().message(),
             Catch::Contains(d.string() + ": has only tokenizer.json: a Hugging Face tokenizer.json is not supported"));
  auto json_file = load_tokenizer((d / "tokenizer.json").string());
  REQUIRE(!json_file.ok());
  CHECK_THAT(json_file.status().message(), Catch::Contains("give a sentencepiece tokenizer.model"));
  std::ofstream(d / "junk.model") << "not a model";
  auto junk = load_tokenizer((d / "junk.model").string());
  REQUIRE(!junk.ok());
  CHECK_THAT(junk.status().message(), Catch::Contains((d / "junk.model").string() + ": not a sentencepiece model"));
  auto none = load_tokenizer((d / "missing.model").string());
  REQUIRE(!none.ok());
  CHECK(none.status().code() == StatusCode::kNotFound);
  fs::remove_all(d);
}

TEST_CASE("a model's tokenizer: its own key, its checkpoint's, or none and text refused", "[tokenizer]") {
  // No tokenizer: text is refused with the reason, one line.
  ModelConfig plain = tiny_model("plain");
  auto none = model_tokenizer(plain);
  REQUIRE(none.ok());
  CHECK(!none->tokenizer);
  auto refused = none->encode("hello");
  REQUIRE(!refused.ok());
  CHECK(refused.status().message() ==
        "model 'plain' has no tokenizer, so text prompts are refused; send token ids (or give [[models]] tokenizer "
        "= \"tokenizer.model\")");

  // The `tokenizer` key.
  ModelConfig keyed = tiny_model("keyed");
  keyed.tokenizer = trained() + "/tokenizer.model";
  auto k = model_tokenizer(keyed);
  REQUIRE(k.ok());
  REQUIRE(k->tokenizer);
  auto ids = k->encode("tokens flow between devices.");
  REQUIRE(ids.ok());
  CHECK(k->tokenizer->decode(ids.value()) == "tokens flow between devices.");

  // A checkpoint folder's tokenizer.model (the checkpoint's config.json is
  // not read here: the model's shapes are the preset's).
  ModelConfig ck = tiny_model("ck");
  ck.checkpoint = trained();
  auto c = model_tokenizer(ck);
  REQUIRE(c.ok());
  CHECK(c->tokenizer);

  // A checkpoint with only tokenizer.json: none, and the reason says so.
  const fs::path d = fs::temp_directory_path() / ("slicesched_tok_json_" + std::to_string(getpid()));
  fs::create_directories(d);
  std::ofstream(d / "tokenizer.json") << "{}";
  ModelConfig js = tiny_model("js");
  js.checkpoint = d.string();
  auto j = model_tokenizer(js);
  REQUIRE(j.ok());
  CHECK(!j->tokenizer);
  CHECK_THAT(j->absent, Catch::Contains("its checkpoint has only tokenizer.json, which is not supported"));
  fs::remove_all(d);

  // A tokenizer with more pieces than the model has rows.
  ModelConfig small = tiny_model("small");
  small.vocab = 16;
  small.tokenizer = trained() + "/tokenizer.model";
  auto s = model_tokenizer(small);
  REQUIRE(!s.ok());
  CHECK_THAT(s.status().message(),
             Catch::StartsWith("x.toml:3: models[0].tokenizer: " + small.tokenizer + ": the tokenizer has ") &&
                 Catch::Contains("more than model 'small''s vocabulary of 16"));
}
