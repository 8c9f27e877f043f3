// The completions API as a client meets it: every malformed request is a
// 400 (404 for an unknown model) with an OpenAI-style error naming the
// field; text needs a tokenizer; token ids are checked against the vocab.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

import slicesched.core.status;
import slicesched.core.tokenizer;
import slicesched.serving.api;
import slicesched.serving.server;
import slicesched.core.sampling;

using namespace slicesched;
using namespace slicesched::serving;
using json = nlohmann::ordered_json;

namespace {

// A tokenizer of the test's own: one id per letter a..j, and id 10 for
// anything else (its unknown piece); no BOS.
class Letters final : public Tokenizer {
 public:
  std::vector<std::int64_t> encode(std::string_view s) const override {
    std::vector<std::int64_t> ids;
    for (char c : s) ids.push_back(c >= 'a' && c <= 'j' ? c - 'a' : 10);
    return ids;
  }
  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string s;
    for (auto id : ids) s += static_cast<char>('a' + id);
    return s;
  }
  std::int64_t vocab_size() const override { return 11; }
  std::int64_t bos_id() const override { return -1; }
  std::int64_t eos_id() const override { return -1; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_ = "letters";
};

// A decode-only tokenizer of 11 ids (no BOS, no EOS, encodes nothing) whose
// text is `decode`'s: for the cases that need one odd piece.
class DecodeOnly final : public Tokenizer {
 public:
  DecodeOnly(std::string name, std::function<std::string(std::span<const std::int64_t>)> decode)
      : path_(std::move(name)), decode_(std::move(decode)) {}
  std::vector<std::int64_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const std::int64_t> ids) const override { return decode_(ids); }
  std::int64_t vocab_size() const override { return 11; }
  std::int64_t bos_id() const override { return -1; }
  std::int64_t eos_id() const override { return -1; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::function<std::string(std::span<const std::int64_t>)> decode_;
};

std::vector<ServedModel> models() {
  ServedModel tiny{.name = "llama-tiny", .vocab = 512, .context_window = 64, .online = {0}, .offline = {1}};
  ServedModel texty{.name = "texty", .vocab = 10, .context_window = 100, .request_tokens_max = 6, .online = {2}};
  texty.tokenizer.tokenizer = std::make_shared<Letters>();
  return {tiny, texty};
}

ApiError error_of(const std::string& body) {
  const auto ms = models();
  auto r = parse_completion(std::string_view(body), ms);
  REQUIRE(std::holds_alternative<ApiError>(r));
  return std::get<ApiError>(r);
}

CompletionRequest ok(const std::string& body) {
  const auto ms = models();
  auto r = parse_completion(std::string_view(body), ms);
  if (auto* e = std::get_if<ApiError>(&r)) FAIL(e->message);
  return std::get<CompletionRequest>(r);
}

}  // namespace

TEST_CASE("api: a well-formed request", "[serving][api]") {
  const auto r = ok(R"({"model": "llama-tiny", "prompt": [1, 2, 511], "max_tokens": 5, "stream": true,
                        "temperature": 0.7, "stream_options": {"include_usage": true}})");
  CHECK(r.model == 0);
  CHECK(r.prompt == std::vector<std::int64_t>{1, 2, 511});
  CHECK(r.max_tokens == 5);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(ok(R"({"model": "llama-tiny", "prompt": [7]})").max_tokens == 16);  // OpenAI's default
}

TEST_CASE("api: malformed requests are 400s naming the field", "[serving][api]") {
  struct Case {
    const char* body;
    int status;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {"{not json", 400, "", "the request body is not valid JSON"},
      {"[1, 2]", 400, "", "the request body must be a JSON object"},
      {R"({"prompt": [1]})", 400, "model", "model: required (a string)"},
      {R"({"model": "gpt-4", "prompt": [1]})", 404, "model",
       "model 'gpt-4' does not exist (served: llama-tiny, texty)"},
      {R"({"model": "llama-tiny"})", 400, "prompt",
       "prompt: required (token ids, or text for a model with a tokenizer)"},
      {R"({"model": "llama-tiny", "prompt": []})", 400, "prompt", "prompt: empty (at least one token)"},
      {R"({"model": "llama-tiny", "prompt": [1, 512]})", 400, "prompt",
       "prompt[1]: token id 512 is outside model 'llama-tiny''s vocabulary [0, 512)"},
      {R"({"model": "llama-tiny", "prompt": [18446744073709551615]})", 400, "prompt",
       "prompt[0]: token id 18446744073709551615 is outside model 'llama-tiny''s vocabulary [0, 512)"},
      {R"({"model": "llama-tiny", "prompt": [9223372036854775808]})", 400, "prompt",
       "prompt[0]: token id 9223372036854775808 is outside model 'llama-tiny''s vocabulary [0, 512)"},
      {"", 400, "", "the request body is empty: expected a JSON object, sent with its Content-Length"},
      {R"({"model": "llama-tiny", "prompt": [1], "stream_options": {"include_usage": true}})", 400, "stream_options",
       "stream_options: only allowed with \"stream\": true"},
      {" \r\n", 400, "", "the request body is empty: expected a JSON object, sent with its Content-Length"},
      {R"({"model": "llama-tiny", "prompt": [-3]})", 400, "prompt",
       "prompt[0]: token id -3 is outside model 'llama-tiny''s vocabulary [0, 512)"},
      {R"({"model": "llama-tiny", "prompt": [1, "x"]})", 400, "prompt",
       "prompt[1]: expected an integer token id, got \"x\""},
      {R"({"model": "llama-tiny", "prompt": [[1], [2]]})", 400, "prompt",
       "prompt: one prompt per request (a list of prompts is not supported; send one request each)"},
      {R"({"model": "llama-tiny", "prompt": 5})", 400, "prompt",
       "prompt: expected a list of token ids or a string, got 5"},
      {R"({"model": "llama-tiny", "prompt": "hello"})", 400, "prompt",
       "prompt: model 'llama-tiny' has no tokenizer, so it takes no text; send the prompt as a list of token ids"},
      {R"({"model": "llama-tiny", "prompt": [1], "max_tokens": 0})", 400, "max_tokens",
       "max_tokens: expected an integer >= 1, got 0"},
      {R"({"model": "llama-tiny", "prompt": [1], "max_tokens": 2.5})", 400, "max_tokens",
       "max_tokens: expected an integer >= 1, got 2.5"},
      {R"({"model": "llama-tiny", "prompt": [1, 2], "max_tokens": 63})", 400, "max_tokens",
       "prompt (2 tokens) + max_tokens (63) exceeds model 'llama-tiny''s context window of 64 tokens"},
      {R"({"model": "llama-tiny", "prompt": [1], "stream": "yes"})", 400, "stream",
       "stream: expected true or false, got \"yes\""},
      {R"({"model": "llama-tiny", "prompt": [1], "n": 2})", 400, "n", "n: only 1 completion per request is supported"},
      {R"({"model": "llama-tiny", "prompt": [1], "echo": true})", 400, "echo", "echo: not supported"},
      {R"({"model": "llama-tiny", "prompt": [1], "logprobs": 21})", 400, "logprobs",
       "logprobs: expected an integer in [0, 20], got 21"},
      {R"({"model": "llama-tiny", "prompt": [1], "temperature": -1})", 400, "temperature",
       "temperature: expected a number in [0, 2] (0: greedy), got -1"},
      {R"({"model": "llama-tiny", "prompt": [1], "temperature": "hot"})", 400, "temperature",
       "temperature: expected a number in [0, 2] (0: greedy), got \"hot\""},
      {R"({"model": "llama-tiny", "prompt": [1], "top_p": 5})", 400, "top_p",
       "top_p: expected a number in (0, 1], got 5"},
      {R"({"model": "llama-tiny", "prompt": [1], "top_p": 0})", 400, "top_p",
       "top_p: expected a number in (0, 1], got 0"},
      {R"({"model": "llama-tiny", "prompt": [1], "top_k": 1.5})", 400, "top_k",
       "top_k: expected an integer >= 1, or 0 or -1 for all, got 1.5"},
      {R"({"model": "llama-tiny", "prompt": [1], "seed": "x"})", 400, "seed",
       "seed: expected an integer in [-2^63, 2^63 - 1], got \"x\""},
      {R"({"model": "llama-tiny", "prompt": [1], "seed": 9223372036854775808})", 400, "seed",
       "seed: expected an integer in [-2^63, 2^63 - 1], got 9223372036854775808"},
      {R"({"model": "llama-tiny", "prompt": [1], "stop": ["ok", ""]})", 400, "stop",
       "stop: expected a non-empty string or a list of them, got \"\""},
      {R"({"model": "llama-tiny", "prompt": [1], "stop": "x"})", 400, "stop",
       "stop: model 'llama-tiny' has no tokenizer, so its output has no text to stop in; use stop_token_ids"},
      {R"({"model": "llama-tiny", "prompt": [1], "stop_token_ids": [512]})", 400, "stop_token_ids",
       "stop_token_ids: expected token ids in [0, 512), got 512"},
      {R"({"model": "llama-tiny", "prompt": [1], "ignore_eos": 1})", 400, "ignore_eos",
       "ignore_eos: expected true or false, got 1"},
      {R"({"model": "llama-tiny", "prompt": [1], "logit_bias": {"5": 1}})", 400, "logit_bias",
       "logit_bias: not supported"},
      {R"({"model": "llama-tiny", "prompt": [1], "best_of": 3})", 400, "best_of", "best_of: only 1 is supported"},
      {R"({"model": "texty", "prompt": "abz"})", 400, "prompt",
       "prompt[2]: token id 10 is outside model 'texty''s vocabulary [0, 10)"},
      {R"({"model": "texty", "prompt": "abc", "max_tokens": 4})", 400, "max_tokens",
       "prompt (3 tokens) + max_tokens (4) exceeds the 6 tokens one request may hold on this server (its tenants' "
       "kv_budget_tokens)"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    const ApiError e = error_of(c.body);
    CHECK(e.status == c.status);
    CHECK(e.param == c.param);
    CHECK(e.message == c.message);
    const json body = error_body(e);
    CHECK(body["error"]["message"] == c.message);
    CHECK(body["error"]["type"] == "invalid_request_error");
  }
  // Past the context window: the prompt is named where it alone leaves no
  // room for a token, else max_tokens; OpenAI's code either way.
  CHECK(error_of(R"({"model": "llama-tiny", "prompt": [1, 2], "max_tokens": 63})").code == "context_length_exceeded");
  std::string full = R"({"model": "llama-tiny", "max_tokens": 1, "prompt": [1)";
  for (int i = 1; i < 64; ++i) full += ", 1";
  const ApiError e = error_of(full + "]}");
  CHECK(e.param == "prompt");
  CHECK(e.code == "context_length_exceeded");
  CHECK(e.message == "prompt (64 tokens) + max_tokens (1) exceeds model 'llama-tiny''s context window of 64 tokens");
}

// Found by an outside probe: 150,000 nested arrays in max_tokens (a 300-KB
// body) overflowed the stack printing the value into the 400 and stopped
// the server; a 1.5-MB string came back whole in the message.
TEST_CASE("api: a body nested too deep is a 400, and a value quoted in a message is cut short", "[serving][api]") {
  const std::string deep = std::string(150000, '[') + std::string(150000, ']');
  ApiError e = error_of(R"({"model": "llama-tiny", "prompt": [1], "max_tokens": )" + deep + "}");
  CHECK(e.status == 400);
  CHECK(e.message == "the request body: the JSON nests arrays and objects more than 64 levels deep");
  // 64 levels still parse (and are refused for what they are).
  const std::string ok64 = std::string(63, '[') + std::string(63, ']');
  CHECK(error_of(R"({"model": "llama-tiny", "prompt": [1], "max_tokens": )" + ok64 + "}")
            .message.starts_with("max_tokens: expected an integer >= 1, got [[[["));
  // Brackets inside strings do not count.
  CHECK(!too_deep(R"({"a": ")" + std::string(100, '[') + R"(\""})").has_value());
  e = error_of(R"({"model": "llama-tiny", "prompt": [1], "max_tokens": ")" + std::string(1500000, 'x') + "\"}");
  CHECK(e.message ==
        "max_tokens: expected an integer >= 1, got \"" + std::string(59, 'x') + "... (1500002 characters)");
}

TEST_CASE("api: sampling fields are parsed, absent ones greedy", "[serving][api]") {
  const auto r = ok(R"({"model": "texty", "prompt": [1], "max_tokens": 3, "temperature": 0.7, "top_p": 0.9,
                        "top_k": -1, "min_p": 0.05, "seed": 11, "presence_penalty": 0.5, "frequency_penalty": -0.5,
                        "repetition_penalty": 1.2, "logprobs": 4, "stop": "cd", "stop_token_ids": [9],
                        "ignore_eos": true, "priority": -3, "user": "u1"})");
  const SamplingParams& p = *r.gen.sampling;
  CHECK(p.temperature == 0.7);
  CHECK(p.top_p == 0.9);
  CHECK(p.top_k == 0);  // -1: every token
  CHECK(p.min_p == 0.05);
  CHECK(p.seed == 11);
  CHECK(p.presence_penalty == 0.5);
  CHECK(p.frequency_penalty == -0.5);
  CHECK(p.repetition_penalty == 1.2);
  CHECK(p.logprobs == 4);
  CHECK(r.gen.stop == std::vector<std::string>{"cd"});
  CHECK(r.gen.stop_token_ids == std::vector<std::int64_t>{9});
  CHECK(r.gen.ignore_eos);
  CHECK(r.gen.priority == -3);
  const auto g = ok(R"({"model": "llama-tiny", "prompt": [1]})");
  CHECK(g.gen.sampling->greedy());
  CHECK(g.gen.sampling->logprobs == -1);
  CHECK(!g.gen.sampling->penalized());
  // A misspelt field is refused, not ignored.
  const ApiError e = error_of(R"({"model": "llama-tiny", "prompt": [1], "temprature": 0.5})");
  CHECK(e.param == "temprature");
  CHECK(e.message.rfind("temprature: not supported by this server", 0) == 0);
}

TEST_CASE("api: a stop watch ends output at EOS, stop ids and stop strings", "[serving][api]") {
  const auto ms = models();
  ServedModel texty = ms[1];
  texty.eos_ids = {9};  // 'j'
  GenerationOptions plain;
  StopWatch eos(texty, plain);
  CHECK(!eos.add(0));
  CHECK(!eos.add(1));
  CHECK(eos.add(9));
  CHECK(eos.finish_reason() == std::string("stop"));
  CHECK(eos.text_tokens() == 2);  // the EOS id is not text
  GenerationOptions ignoring;
  ignoring.ignore_eos = true;
  StopWatch past(texty, ignoring);
  CHECK(!past.add(9));
  CHECK(past.finish_reason() == std::string("length"));
  GenerationOptions ids;
  ids.stop_token_ids = {4};
  StopWatch by_id(texty, ids);
  CHECK(!by_id.add(3));
  CHECK(by_id.add(4));
  // Stop strings: "cd" spans two tokens; the text ends before it.
  GenerationOptions strings;
  strings.stop = {"cd", "gh"};
  StopWatch by_text(texty, strings);
  CHECK(!by_text.add(0));  // a
  CHECK(!by_text.add(1));  // ab
  CHECK(!by_text.add(2));  // abc: "c" might begin "cd", so only "ab" is settled
  CHECK(by_text.settled() == 2);
  CHECK(by_text.add(3));  // abcd: stop
  CHECK(by_text.text() == "ab");
  CHECK(by_text.settled() == 2);
  CHECK(by_text.finish_reason() == std::string("stop"));
}

// Found by an outside probe: with any stop string, even one never found, a
// reply that ended by its length lost the characters the stream decoder
// still held (an incomplete one, and what was decoded with it).
TEST_CASE("api: a stop watch's text at the end is all the tokens' text", "[serving][api]") {
  // Letters, but id 1 is the first half of a character (id 2 its second):
  // decoded last, U+FFFD.
  ServedModel m{.name = "halves", .vocab = 11, .context_window = 100, .online = {0}};
  m.tokenizer.tokenizer = std::make_shared<DecodeOnly>("halves", [](std::span<const std::int64_t> ids) {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i)
      s += ids[i] == 1   ? (i + 1 < ids.size() && ids[i + 1] == 2 ? "\xE6\x97\xA5" : "\xEF\xBF\xBD")
           : ids[i] == 2 ? (i > 0 && ids[i - 1] == 1 ? "" : "\xEF\xBF\xBD")
                         : std::string(1, static_cast<char>('a' + ids[i]));
    return s;
  });
  GenerationOptions never;
  never.stop = {"QQ"};
  StopWatch w(m, never);
  for (std::int64_t t : {3, 1, 2, 4, 1}) CHECK(!w.add(t));  // "d日e" and half a character
  CHECK(w.text() ==
        "d\xE6\x97\xA5"
        "e");  // (held: the next token may complete it)
  w.end();
  CHECK(w.text() ==
        "d\xE6\x97\xA5"
        "e\xEF\xBF\xBD");  // what the reply says without a stop string
  CHECK(w.finish_reason() == std::string("length"));
  // A stop string that only the released text completes still ends it.
  GenerationOptions replacement;
  replacement.stop = {"\xEF\xBF\xBD"};
  StopWatch r(m, replacement);
  for (std::int64_t t : {3, 4, 1}) CHECK(!r.add(t));
  r.end();
  CHECK(r.text() == "de");
  CHECK(r.finish_reason() == std::string("stop"));
}

TEST_CASE("api: chat requests render the model's template, none is a 400 saying so", "[serving][api]") {
  auto ms = models();
  const std::string body = R"({"model": "texty", "messages": [{"role": "user", "content": "bad"}], "max_tokens": 2})";
  auto none = parse_chat(body, ms);
  REQUIRE(std::holds_alternative<ApiError>(none));
  CHECK(std::get<ApiError>(none).message.find("has no chat template") != std::string::npos);
  // A template of the test's own: the last message's content.
  ms[1].chat_template = [](const json& messages) -> Result<std::string> {
    return messages.back()["content"].get<std::string>();
  };
  auto r = parse_chat(body, ms);
  REQUIRE(std::holds_alternative<CompletionRequest>(r));
  CHECK(std::get<CompletionRequest>(r).prompt == std::vector<std::int64_t>{1, 0, 3});
  auto bad = parse_chat(R"({"model": "texty", "messages": [{"content": "x"}]})", ms);
  REQUIRE(std::holds_alternative<ApiError>(bad));
  CHECK(std::get<ApiError>(bad).message == "messages[0].role: required (system, user, assistant, ...)");
  // `user` is OpenAI's end-user id, a string (an integer was taken; found by
  // an outside probe).
  auto user = parse_chat(
      R"({"model": "texty", "messages": [{"role": "user", "content": "bad"}], "max_tokens": 2, "user": 5})", ms);
  REQUIRE(std::holds_alternative<ApiError>(user));
  CHECK(std::get<ApiError>(user).message == "user: expected a string, got 5");
  auto top = parse_chat(
      R"({"model": "texty", "messages": [{"role": "user", "content": "a"}], "max_tokens": 1, "top_logprobs": 2})", ms);
  REQUIRE(std::holds_alternative<ApiError>(top));
  CHECK(std::get<ApiError>(top).message == "top_logprobs: needs \"logprobs\": true");
}

TEST_CASE("api: without max_tokens a chat fills the room left, a completion takes 16 or what is left",
          "[serving][api]") {
  // Found by reading what OpenAI and vLLM do: a chat without max_tokens was
  // cut at 16 tokens (finish_reason "length"), and a completion whose prompt
  // left fewer than 16 was refused; both now take the room that is left.
  auto ms = models();
  ms[1].request_tokens_max = 0;  // texty: context window 100 alone
  ms[1].chat_template = [](const json& messages) -> Result<std::string> {
    return messages.back()["content"].get<std::string>();
  };
  auto chat = [&](const std::string& body) {
    auto r = parse_chat(body, ms);
    if (auto* e = std::get_if<ApiError>(&r)) FAIL(e->message);
    return std::get<CompletionRequest>(r);
  };
  const auto room = chat(R"({"model": "texty", "messages": [{"role": "user", "content": "bad"}]})");
  CHECK(room.max_tokens == 97);
  CHECK_FALSE(room.max_tokens_given);
  const auto given = chat(R"({"model": "texty", "messages": [{"role": "user", "content": "bad"}], "max_tokens": 5})");
  CHECK(given.max_tokens == 5);
  CHECK(given.max_tokens_given);
  // null is "not given", as OpenAI's.
  CHECK(
      chat(R"({"model": "texty", "messages": [{"role": "user", "content": "bad"}], "max_tokens": null})").max_tokens ==
      97);
  // Within the largest KV budget too.
  ms[1].request_tokens_max = 40;
  CHECK(chat(R"({"model": "texty", "messages": [{"role": "user", "content": "bad"}]})").max_tokens == 37);
  // A completion: 16, or the 5 its 59-token prompt leaves of llama-tiny's 64.
  std::string ids = "1";
  for (int i = 1; i < 59; ++i) ids += ", 1";
  CHECK(ok(R"({"model": "llama-tiny", "prompt": [1, 2, 3]})").max_tokens == 16);
  CHECK(ok(R"({"model": "llama-tiny", "prompt": [)" + ids + "]}").max_tokens == 5);
  // Named, it is what the client asked, and refused past the window.
  CHECK(error_of(R"({"model": "llama-tiny", "max_tokens": 6, "prompt": [)" + ids + "]}").param == "max_tokens");
  // A prompt that fills the window is refused either way, naming the prompt.
  std::string full = ids;
  for (int i = 59; i < 64; ++i) full += ", 1";
  const ApiError no_room = error_of(R"({"model": "llama-tiny", "prompt": [)" + full + "]}");
  CHECK(no_room.param == "prompt");
  // (naming no max_tokens the client did not send; it said "+ max_tokens (16)")
  CHECK(no_room.message ==
        "prompt (64 tokens) leaves no room for output in model 'llama-tiny''s context window of 64 tokens");
  CHECK(default_max_tokens(true, 10, 0) == 16);
  CHECK(default_max_tokens(false, 10, 12) == 2);
  CHECK(default_max_tokens(true, 12, 12) == 1);
}

TEST_CASE("api: a chat's text parts are joined with a newline between", "[serving][api]") {
  auto ms = models();
  ms[1].request_tokens_max = 0;
  std::string seen;
  ms[1].chat_template = [&seen](const json& messages) -> Result<std::string> {
    seen = messages.back()["content"].get<std::string>();
    return std::string("ab");
  };
  auto r = parse_chat(
      R"({"model": "texty", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]}]})",
      ms);
  REQUIRE(std::holds_alternative<CompletionRequest>(r));
  CHECK(seen == "ab\ncd");
}

TEST_CASE("api: text goes through the model's tokenizer, and back", "[serving][api]") {
  const auto r = ok(R"({"model": "texty", "prompt": "bad", "max_tokens": 3})");
  CHECK(r.model == 1);
  CHECK(r.prompt == std::vector<std::int64_t>{1, 0, 3});
  const auto ms = models();
  const std::int64_t out[] = {2, 0, 1};
  const json body = completion_body("cmpl-1", 7, "texty", 3, out, decode(ms[1], out));
  CHECK(body["choices"][0]["text"] == "cab");
  CHECK(body["choices"][0]["token_ids"] == json::array({2, 0, 1}));
  CHECK(body["usage"] == json({{"prompt_tokens", 3}, {"completion_tokens", 3}, {"total_tokens", 6}}));
  // Without a decode hook the text is empty and the ids carry the output.
  CHECK(decode(ms[0], out).empty());
}

TEST_CASE("api: log-probabilities name every top token, by id where there is no text", "[serving][api]") {
  const auto ms = models();
  const std::int64_t out[] = {7, 3};
  const std::vector<TokenLogprob> lp = {{-0.5, {{7, -0.5}, {9, -1.5}, {4, -2.0}}}, {-0.25, {{3, -0.25}, {8, -3.0}}}};
  // No tokenizer: tokens and keys are "token_id:N", all three kept.
  const json bare = completion_logprobs(ms[0], out, lp);
  CHECK(bare["tokens"] == json::array({"token_id:7", "token_id:3"}));
  CHECK(bare["top_logprobs"][0] == json({{"token_id:7", -0.5}, {"token_id:9", -1.5}, {"token_id:4", -2.0}}));
  CHECK(bare["top_logprobs"][1].size() == 2);
  CHECK(bare["token_logprobs"] == json::array({-0.5, -0.25}));
  // With one: the text, and offsets into the decoded output.
  const json texty = completion_logprobs(ms[1], out, lp);
  CHECK(texty["tokens"] == json::array({"h", "d"}));
  CHECK(texty["top_logprobs"][0] == json({{"h", -0.5}, {"j", -1.5}, {"e", -2.0}}));
  CHECK(texty["text_offset"] == json::array({0, 1}));
}

TEST_CASE("api: text_offset counts characters, not bytes, from where the tokens before ended", "[serving][api]") {
  // Letters, but id 1 spells "é" (2 bytes) and id 2 "€" (3 bytes).
  ServedModel m{.name = "accents", .vocab = 11, .context_window = 100, .online = {0}};
  m.tokenizer.tokenizer = std::make_shared<DecodeOnly>("accents", [](std::span<const std::int64_t> ids) {
    std::string s;
    for (auto id : ids)
      s += id == 1 ? "\xC3\xA9" : id == 2 ? "\xE2\x82\xAC" : std::string(1, static_cast<char>('a' + id));
    return s;
  });
  const std::int64_t out[] = {1, 2, 0, 1};
  const std::vector<TokenLogprob> lp(4, TokenLogprob{-1.0, {}});
  // "é€aé": a client slicing the text by these offsets (Python's str, as
  // vLLM's are) gets each token's text.
  std::size_t end = 0;
  CHECK(completion_logprobs(m, out, lp, 0, &end)["text_offset"] == json::array({0, 1, 2, 3}));
  CHECK(end == 4);
  // A stream's second event starts where the first's tokens ended.
  std::size_t first = 0;
  completion_logprobs(m, std::span(out).first(2), std::span(lp).first(2), 0, &first);
  CHECK(first == 2);
  CHECK(completion_logprobs(m, std::span(out).subspan(2), std::span(lp).subspan(2), first)["text_offset"] ==
        json::array({2, 3}));
}

TEST_CASE("api: a text far past the prompt limit is refused from a prefix's tokens", "[serving][api]") {
  // texty takes 6 tokens a request: past 6 x 16 + 4096 bytes, the first 96
  // bytes are tokenized, and 96 tokens are over 6 + 16.
  const ApiError e = error_of(R"({"model": "texty", "prompt": ")" + std::string(5000, 'a') + R"("})");
  CHECK(e.param == "prompt");
  CHECK(e.message ==
        "prompt: 5000 bytes of text, whose first 96 alone are 96 tokens: more than the 6 model 'texty' takes in one "
        "request");
  // Cut at whitespace in the prefix's second half: 90 letters, a space, the rest.
  const ApiError w =
      error_of(R"({"model": "texty", "prompt": ")" + std::string(90, 'a') + " " + std::string(5000, 'b') + R"("})");
  CHECK(w.message.find("whose first 90 alone are 90 tokens") != std::string::npos);
  // Short of the threshold, the whole text is tokenized and checked as any prompt.
  const ApiError s = error_of(R"({"model": "texty", "prompt": ")" + std::string(4000, 'a') + R"("})");
  CHECK(s.message.find("bytes of text") == std::string::npos);
}

TEST_CASE("api: stream events: one per token, then the end with usage", "[serving][api]") {
  const std::int64_t one[] = {42};
  const json chunk = chunk_body("cmpl-1", 7, "llama-tiny", one, "");
  CHECK(chunk["choices"][0]["token_ids"] == json::array({42}));
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  const json last = final_chunk_body("cmpl-1", 7, "llama-tiny", 4, 9);
  CHECK(last["choices"][0]["finish_reason"] == "length");
  CHECK(last["usage"]["total_tokens"] == 13);
}

TEST_CASE("api: completions go to the model's least loaded online tenant", "[serving][api]") {
  CHECK(HttpServer::pick_tenant({}, {}) == -1);
  CHECK(HttpServer::pick_tenant({2}, {0, 0, 5}) == 2);
  CHECK(HttpServer::pick_tenant({0, 2, 3}, {4, 9, 1, 3}) == 2);
  CHECK(HttpServer::pick_tenant({0, 2}, {1, 0, 1}) == 0);  // ties: the first
}

TEST_CASE("api: a stream's text, token by token, is the whole reply's text", "[serving][api]") {
  // SentencePiece's way: pieces with a word-leading "_", decoded as spaces,
  // the first one of a decode dropped; and id 9 is half of a two-byte
  // character that id 8 completes ("é": C3 A9).
  struct Pieces final : Tokenizer {
    std::vector<std::string> pieces{"_the", "_lazy", "_fox", "s", "_ju", "dge", "_qu", "artz", "\xA9", "\xC3"};
    std::string file = "pieces";
    std::vector<std::int64_t> encode(std::string_view) const override { return {}; }
    std::string decode(std::span<const std::int64_t> ids) const override {
      std::string s;
      for (auto id : ids) s += pieces[static_cast<std::size_t>(id)];
      for (std::size_t at = s.find('_'); at != std::string::npos; at = s.find('_', at)) s[at] = ' ';
      if (!s.empty() && s[0] == ' ') s.erase(0, 1);
      // A lone lead byte is not a character: the replacement character.
      if (!s.empty() && static_cast<unsigned char>(s.back()) == 0xC3) s.replace(s.size() - 1, 1, "\xEF\xBF\xBD");
      return s;
    }
    std::int64_t vocab_size() const override { return 10; }
    std::int64_t bos_id() const override { return -1; }
    std::int64_t eos_id() const override { return -1; }
    const std::string& path() const override { return file; }
  };
  ServedModel spm{.name = "spm", .vocab = 10};
  spm.tokenizer.tokenizer = std::make_shared<Pieces>();
  const std::vector<std::int64_t> out{0, 1, 2, 3, 4, 5, 9, 8, 6, 7};
  StreamDecoder d(spm);
  std::string streamed;
  std::vector<std::string> each;
  for (std::size_t n = 1; n <= out.size(); ++n) {
    each.push_back(d.next(std::span(out).first(n)));
    streamed += each.back();
  }
  streamed += d.flush(out);
  CHECK(streamed == decode(spm, out));
  CHECK(streamed == "the lazy foxs judge\xC3\xA9 quartz");
  CHECK(each[1] == " lazy");     // (decoded alone: "lazy", its space lost)
  CHECK(each[6].empty());        // half a character: held ...
  CHECK(each[7] == "\xC3\xA9");  // ... until it is whole
  // Held at the end: flushed.
  StreamDecoder e(spm);
  const std::vector<std::int64_t> cut{0, 9};
  CHECK(e.next(std::span(cut).first(1)) == "the");
  CHECK(e.next(cut).empty());
  CHECK(e.flush(cut) == "\xEF\xBF\xBD");
}

TEST_CASE("api: a prompt past max_prompt_tokens is refused at admission", "[serving][api]") {
  const std::vector<ServedModel> ms{{.name = "m", .vocab = 100, .context_window = 1000, .max_prompt_tokens = 3}};
  auto r = parse_completion(std::string_view(R"({"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": 2})"), ms);
  REQUIRE(std::holds_alternative<ApiError>(r));
  const ApiError& e = std::get<ApiError>(r);
  CHECK(e.status == 400);
  CHECK(e.param == "prompt");
  CHECK(e.message == "prompt: 4 tokens, more than the 3 one request may send ([serve] max_prompt_tokens)");
  CHECK(std::holds_alternative<CompletionRequest>(
      parse_completion(std::string_view(R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 2})"), ms)));
}
