// Tokenizers: a real sentencepiece model, trained here on a small text with
// sentencepiece's own trainer, loads from its file or its folder, encodes and
// decodes; a model without a tokenizer refuses text and says why; a
// tokenizer.json that Hugging Face tokenizers cannot read is refused in one
// line. A real tokenizer.json (trained by Python's tokenizers in the ctest
// fixture hf_tokenizer_json, tests/tokenizer/make_tokenizer_json.py) gives
// the ids Python gives, from any number of threads ([.hf_tokenizer]).
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

import slicesched.config;
import slicesched.tokenizer;
import slicesched.core.status;
import slicesched.core.tokenizer;

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
  // "<s>" and "</s>" written in the text (a chat template's) are BOS and
  // EOS, the text around them encoded a stretch at a time (transformers'
  // LlamaTokenizer; they were spelled out as pieces: an outside probe).
  std::vector<std::int64_t> split = {t.bos_id()};
  split.insert(split.end(), ids.begin(), ids.end());
  split.push_back(t.eos_id());
  split.insert(split.end(), ids.begin(), ids.end());
  CHECK(t.encode("<s>" + text + "</s>" + text) == split);
  CHECK(t.encode("</s>") == std::vector<std::int64_t>{t.eos_id()});
  const std::vector<std::int64_t> bad = {ids[0], t.vocab_size()};
  CHECK_THROWS_WITH(t.decode(bad), Catch::Contains("token id " + std::to_string(t.vocab_size()) + " is outside"));

  // Each piece's bytes, end to end, spell the text (after the space
  // sentencepiece puts before it).
  std::string spelled;
  for (auto id : ids) spelled += t.token_bytes(id);
  CHECK(spelled == " " + text);
  CHECK_THROWS_AS(t.token_bytes(t.vocab_size()), std::out_of_range);
  // How a piece spells its bytes: the word mark is a space, a byte piece its byte.
  CHECK(piece_bytes("\xE2\x96\x81the") == " the");
  CHECK(piece_bytes("<0xE2>") == "\xE2");
  CHECK(piece_bytes("<0xZZ>") == "<0xZZ>");
  CHECK(piece_bytes("plain") == "plain");

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
  CHECK(json_dir.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(json_dir.status().message(),
             Catch::StartsWith((d / "tokenizer.json").string() + ": Hugging Face tokenizers cannot load it (") &&
                 Catch::EndsWith("); give a tokenizer.json from the model's checkpoint"));
  CHECK(json_dir.status().message().find('\n') == std::string::npos);
  std::ofstream(d / "tokenizer_config.json") << "{\"bos_token\": ";
  auto bad_config = load_tokenizer((d / "tokenizer.json").string());
  REQUIRE(!bad_config.ok());
  CHECK_THAT(bad_config.status().message(), Catch::StartsWith((d / "tokenizer_config.json").string() + ": not JSON ("));
  CHECK(bad_config.status().message().find('\n') == std::string::npos);
  std::ofstream(d / "tokenizer_config.json") << "{\"bos_token\": 3}";
  auto odd_config = load_tokenizer((d / "tokenizer.json").string());
  REQUIRE(!odd_config.ok());
  CHECK_THAT(odd_config.status().message(), Catch::Contains("bos_token is neither a string nor"));
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
        "= a tokenizer.model or tokenizer.json)");

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

  // A checkpoint with only tokenizer.json is read as one: an unreadable one
  // fails, naming the key.
  const fs::path d = fs::temp_directory_path() / ("slicesched_tok_json_" + std::to_string(getpid()));
  fs::create_directories(d);
  std::ofstream(d / "tokenizer.json") << "{}";
  ModelConfig js = tiny_model("js");
  js.checkpoint = d.string();
  auto j = model_tokenizer(js);
  REQUIRE(!j.ok());
  CHECK_THAT(j.status().message(),
             Catch::StartsWith("x.toml:3: models[0].checkpoint: " + (d / "tokenizer.json").string() +
                               ": Hugging Face tokenizers cannot load it"));
  fs::remove(d / "tokenizer.json");
  auto empty = model_tokenizer(js);
  REQUIRE(empty.ok());
  CHECK(!empty->tokenizer);
  CHECK_THAT(empty->absent, Catch::EndsWith("(its checkpoint has no tokenizer.model or tokenizer.json)"));
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

namespace {

// The fixture's folder (ctest sets SLICESCHED_TOKENIZER_JSON_DIR) and what
// Python's tokenizers said for it.
std::string json_dir() {
  const char* d = std::getenv("SLICESCHED_TOKENIZER_JSON_DIR");
  REQUIRE(d);  // run through ctest: test tokenizer_json, fixture hf_tokenizer_json
  return d;
}

nlohmann::json expected() {
  std::ifstream in(json_dir() + "/expected.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("a tokenizer.json encodes and decodes as Python's tokenizers does", "[.hf_tokenizer]") {
  const nlohmann::json want = expected();
  const std::string file = json_dir() + "/tokenizer.json";
  auto tok = load_tokenizer(file);
  REQUIRE(tok.ok());
  const Tokenizer& t = *tok.value();
  CHECK(t.path() == file);
  CHECK(t.vocab_size() == want["vocab_size"].get<std::int64_t>());
  CHECK(t.bos_id() == want["bos_id"].get<std::int64_t>());  // tokenizer_config.json: {"content": "<s>"}
  CHECK(t.eos_id() == want["eos_id"].get<std::int64_t>());  // tokenizer_config.json: "</s>"
  int encoded = 0;
  for (const auto& c : want["cases"]) {
    const std::string text = c["text"].get<std::string>();
    if (c.contains("ids")) {
      const auto ids = c["ids"].get<std::vector<std::int64_t>>();
      INFO(text);
      CHECK(t.encode(text) == ids);  // no BOS or EOS added
      CHECK(t.decode(ids) == text);  // byte-level BPE round-trips, non-ASCII too
      ++encoded;
    } else {
      // Special tokens are not in the text (skip_special_tokens=True, vLLM's
      // default; they were kept: an outside probe found "<s>" in a reply).
      CHECK(t.decode(c["decode_ids"].get<std::vector<std::int64_t>>()) == text);
    }
  }
  CHECK(encoded == 4);
  const std::vector<std::int64_t> specials = {t.bos_id(), t.eos_id()};
  CHECK(t.decode(specials).empty());
  // A text prompt gets BOS only where the tokenizer adds one: its
  // post-processor, or add_bos_token in its config (found by an outside
  // probe: BOS was always added, so a checkpoint that names a bos_token but
  // does not add it served another prompt than transformers and vLLM).
  const std::string prompt = want["prompt_text"].get<std::string>();
  for (const auto& [variant, ids] : want["prompts"].items()) {
    INFO(variant);
    auto v = load_tokenizer(json_dir() + (variant.empty() ? "" : "/" + variant) + "/tokenizer.json");
    REQUIRE(v.ok());
    CHECK(v.value()->encode_prompt(prompt) == ids.get<std::vector<std::int64_t>>());
  }
  CHECK(want["prompts"][""].get<std::vector<std::int64_t>>().front() != t.bos_id());
  CHECK(want["prompts"]["bos_config"].get<std::vector<std::int64_t>>().front() == t.bos_id());
  CHECK(want["prompts"]["bos_post"].get<std::vector<std::int64_t>>().front() == t.bos_id());
  CHECK(want["prompts"]["bos_off"].get<std::vector<std::int64_t>>().front() != t.bos_id());
  CHECK(want["prompts"]["bos_eos_config"].get<std::vector<std::int64_t>>().back() == t.eos_id());
  const std::vector<std::int64_t> bad = {1, t.vocab_size()};
  CHECK_THROWS_AS(t.decode(bad), std::out_of_range);
  CHECK_THROWS_WITH(t.decode(bad), Catch::Contains("token id " + std::to_string(t.vocab_size()) + " is outside"));
  const std::vector<std::int64_t> negative = {-1};
  CHECK_THROWS_AS(t.decode(negative), std::out_of_range);
  // Bytes that are not UTF-8 are encoded (as U+FFFD), not refused.
  CHECK(!t.encode("bad \xff byte").empty());
  // A piece's bytes are its own: those of a character split over pieces
  // (é, €, an emoji: bytes the 512-id vocabulary never merged) are the
  // halves, and all of them, end to end, are the text's bytes.
  for (const std::string text : {std::string("caf\xc3\xa9 \xe2\x82\xac"
                                             "5 \xf0\x9f\x99\x82 the scheduler"),
                                 std::string("accelerators tokens flow")}) {
    std::string spelled;
    for (const auto id : t.encode(text)) spelled += t.token_bytes(id);
    CHECK(spelled == text);
  }
  const auto euro = t.encode("\xe2\x82\xac");
  REQUIRE(euro.size() >= 2);  // split: a piece holding part of the character
  CHECK(t.token_bytes(euro[0]).size() < 3);
  CHECK_THROWS_AS(t.token_bytes(-1), std::out_of_range);

  // The folder works too, and a checkpoint with only tokenizer.json has it.
  auto from_dir = load_tokenizer(json_dir());
  REQUIRE(from_dir.ok());
  CHECK(from_dir.value()->path() == file);
  ModelConfig ck = tiny_model("ck");
  ck.checkpoint = json_dir();
  auto c = model_tokenizer(ck);
  REQUIRE(c.ok());
  REQUIRE(c->tokenizer);
  auto ids = c->encode("tokens flow between devices");
  REQUIRE(ids.ok());
  CHECK(ids.value() == want["cases"][2]["ids"].get<std::vector<std::int64_t>>());
  // Its vocabulary against the model's.
  ModelConfig small = tiny_model("small");
  small.vocab = 100;
  small.checkpoint = json_dir();
  auto s = model_tokenizer(small);
  REQUIRE(!s.ok());
  CHECK_THAT(s.status().message(), Catch::Contains("more than model 'small''s vocabulary of 100"));
}

TEST_CASE("a tokenizer.json encodes from many threads at once", "[.hf_tokenizer]") {
  const nlohmann::json want = expected();
  auto tok = load_tokenizer(json_dir() + "/tokenizer.json");
  REQUIRE(tok.ok());
  const auto& cases = want["cases"];
  // HTTP threads call encode and decode at once; every result must still be
  // Python's.
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) {
        const auto& c = cases[static_cast<std::size_t>((k + i) % 4)];
        const auto ids = c["ids"].get<std::vector<std::int64_t>>();
        if (tok.value()->encode(c["text"].get<std::string>()) != ids) ++wrong[static_cast<std::size_t>(k)];
        if (tok.value()->decode(ids) != c["text"].get<std::string>()) ++wrong[static_cast<std::size_t>(k)];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

TEST_CASE("without the tokenizers package a tokenizer.json is refused with what to do", "[.hf_no_package]") {
  // ctest runs this with SLICESCHED_PYTHONPATH naming a folder without it.
  const std::string file = json_dir() + "/tokenizer.json";
  auto tok = load_tokenizer(file);
  REQUIRE(!tok.ok());
  CHECK(tok.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(tok.status().message(),
             Catch::StartsWith(file + ": cannot read a tokenizer.json: the Python package `tokenizers` cannot be "
                                      "imported") &&
                 Catch::Contains("ModuleNotFoundError: No module named 'tokenizers'") &&
                 Catch::Contains("run scripts/setup.sh"));
  CHECK(tok.status().message().find('\n') == std::string::npos);
  // Asking again gives the same answer (the interpreter starts once).
  auto again = load_tokenizer(file);
  REQUIRE(!again.ok());
  CHECK(again.status().message() == tok.status().message());
}

// Not a test: the encode throughput quoted in docs/live.md ("Checkpoints and
// tokenizers"), for 1 and 4 threads. It prints and asserts nothing timed.
//   SLICESCHED_TOKENIZER_JSON_DIR=build/tests/tokenizer_json \
//     build/bin/slicesched_tests "[.hf_tokenizer_bench]" -s
TEST_CASE("tokenizer.json encode throughput", "[.hf_tokenizer_bench]") {
  auto tok = load_tokenizer(json_dir() + "/tokenizer.json");
  REQUIRE(tok.ok());
  const std::string text = expected()["cases"][0]["text"].get<std::string>();  // 51 bytes, 8 ids
  for (int threads : {1, 4}) {
    constexpr int kEach = 20000;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k)
      pool.emplace_back([&] {
        for (int i = 0; i < kEach; ++i) (void)tok.value()->encode(text);
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WARN(threads << " thread(s): " << threads * kEach << " encodes of " << text.size() << " bytes in " << s
                 << " s = " << threads * kEach / s << " encodes/s");
  }
}
