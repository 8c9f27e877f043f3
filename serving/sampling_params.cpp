// parse_generation: a request's sampling, stop and priority fields, each
// checked for its type and range (a 400 naming the field and what it takes),
// and a refusal for every field we would otherwise ignore.
module;
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.serving.api;

namespace slicesched::serving {

namespace {

using json = nlohmann::ordered_json;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError{.status = 400, .message = param + ": " + message, .param = param};
}

// The fields each endpoint takes (anything else is refused, not ignored).
const std::set<std::string, std::less<>>& known(bool chat) {
  static const std::set<std::string, std::less<>> common = {"model",
                                                            "stream",
                                                            "stream_options",
                                                            "max_tokens",
                                                            "temperature",
                                                            "top_p",
                                                            "top_k",
                                                            "min_p",
                                                            "seed",
                                                            "stop",
                                                            "stop_token_ids",
                                                            "ignore_eos",
                                                            "presence_penalty",
                                                            "frequency_penalty",
                                                            "repetition_penalty",
                                                            "logprobs",
                                                            "priority",
                                                            "n",
                                                            "user",
                                                            "logit_bias"};
  static const auto completions = [] {
    auto s = common;
    s.insert({"prompt", "best_of", "echo", "suffix"});
    return s;
  }();
  static const auto chats = [] {
    auto s = common;
    s.insert({"messages", "top_logprobs", "max_completion_tokens"});
    return s;
  }();
  return chat ? chats : completions;
}

// A number in [lo, hi] (open ends when the flags say so) into `out`.
std::optional<ApiError> number(const json& body, const char* key, double lo, double hi, bool lo_open, bool hi_open,
                               const std::string& range, double& out) {
  const auto v = body.find(key);
  if (v == body.end() || v->is_null()) return std::nullopt;
  if (!v->is_number()) return bad(key, "expected a number " + range + ", got " + brief(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x) || (lo_open ? x <= lo : x < lo) || (hi_open ? x >= hi : x > hi))
    return bad(key, "expected a number " + range + ", got " + brief(*v));
  out = x;
  return std::nullopt;
}

std::optional<ApiError> integer(const json& body, const char* key, std::int64_t lo, std::int64_t hi,
                                const std::string& range, std::int64_t& out) {
  const auto v = body.find(key);
  if (v == body.end() || v->is_null()) return std::nullopt;
  if (!v->is_number_integer()) return bad(key, "expected an integer " + range + ", got " + brief(*v));
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    return bad(key, "expected an integer " + range + ", got " + brief(*v));
  const std::int64_t x = v->get<std::int64_t>();
  if (x < lo || x > hi) return bad(key, "expected an integer " + range + ", got " + brief(*v));
  out = x;
  return std::nullopt;
}

std::optional<ApiError> boolean(const json& body, const char* key, bool& out) {
  const auto v = body.find(key);
  if (v == body.end() || v->is_null()) return std::nullopt;
  if (!v->is_boolean()) return bad(key, "expected true or false, got " + brief(*v));
  out = v->get<bool>();
  return std::nullopt;
}

constexpr std::int64_t kMaxLogprobs = 20;  // OpenAI's bound on top_logprobs
constexpr std::size_t kMaxStops = 16;

}  // namespace

std::optional<ApiError> parse_generation(const json& body, const ServedModel& model, bool chat,
                                         GenerationOptions& gen) {
  for (const auto& [key, value] : body.items())
    if (!known(chat).contains(key))
      return bad(key, std::string("not supported by this server (") + (chat ? "chat completions" : "completions") +
                          " take: model, " + (chat ? "messages" : "prompt") +
                          ", max_tokens, stream, temperature, top_p, top_k, min_p, seed, stop, stop_token_ids, "
                          "ignore_eos, presence/frequency/repetition_penalty, logprobs" +
                          (chat ? ", top_logprobs" : "") + ", priority)");
  // What we do not support, refused unless it is the default.
  auto is_default = [&](const char* key, const json& def) {
    const auto v = body.find(key);
    return v == body.end() || v->is_null() || *v == def;
  };
  if (!is_default("n", 1)) return bad("n", "only 1 completion per request is supported");
  // (OpenAI's end-user id: a string, or nothing)
  if (const auto u = body.find("user"); u != body.end() && !u->is_null() && !u->is_string())
    return bad("user", "expected a string, got " + brief(*u));
  if (const auto lb = body.find("logit_bias"); lb != body.end() && !lb->is_null() && !lb->empty())
    return bad("logit_bias", "not supported");

  SamplingParams p;
  if (auto e = number(body, "temperature", 0, 2, false, false, "in [0, 2] (0: greedy)", p.temperature)) return e;
  if (auto e = number(body, "top_p", 0, 1, true, false, "in (0, 1]", p.top_p)) return e;
  std::int64_t top_k = 0;
  if (auto e = integer(body, "top_k", -1, std::numeric_limits<std::int32_t>::max(), ">= 1, or 0 or -1 for all", top_k))
    return e;
  p.top_k = top_k < 0 ? 0 : top_k;
  if (auto e = number(body, "min_p", 0, 1, false, false, "in [0, 1]", p.min_p)) return e;
  if (auto e = number(body, "presence_penalty", -2, 2, false, false, "in [-2, 2]", p.presence_penalty)) return e;
  if (auto e = number(body, "frequency_penalty", -2, 2, false, false, "in [-2, 2]", p.frequency_penalty)) return e;
  if (auto e = number(body, "repetition_penalty", 0, 2, true, false, "in (0, 2]", p.repetition_penalty)) return e;
  if (const auto s = body.find("seed"); s != body.end() && !s->is_null()) {
    // A 64-bit signed integer, as vLLM takes it: 2^64 - 1 would otherwise
    // be another name of seed -1.
    if (!s->is_number_integer() ||
        (s->is_number_unsigned() && s->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)))
      return bad("seed", "expected an integer in [-2^63, 2^63 - 1], got " + brief(*s));
    p.seed = static_cast<std::uint64_t>(s->get<std::int64_t>());
  } else {
    // No seed: a fresh one per request (its draws differ from another's).
    static std::atomic<std::uint64_t> counter{0};
    p.seed = (++counter * 0x9E3779B97F4A7C15ull) ^
             static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  if (chat) {
    bool want = false;
    if (auto e = boolean(body, "logprobs", want)) return e;
    std::int64_t top = 0;
    if (auto e = integer(body, "top_logprobs", 0, kMaxLogprobs, "in [0, 20]", top)) return e;
    if (!want && body.contains("top_logprobs") && !body["top_logprobs"].is_null())
      return bad("top_logprobs", "needs \"logprobs\": true");
    p.logprobs = want ? static_cast<std::int32_t>(top) : -1;
  } else {
    std::int64_t lp = -1;
    if (auto e = integer(body, "logprobs", 0, kMaxLogprobs, "in [0, 20]", lp)) return e;
    p.logprobs = static_cast<std::int32_t>(lp);
  }

  if (const auto s = body.find("stop"); s != body.end() && !s->is_null()) {
    auto add = [&](const json& v) -> std::optional<ApiError> {
      if (!v.is_string() || v.get<std::string>().empty())
        return bad("stop", "expected a non-empty string or a list of them, got " + brief(v));
      gen.stop.push_back(v.get<std::string>());
      return std::nullopt;
    };
    if (s->is_array()) {
      if (s->size() > kMaxStops) return bad("stop", "at most 16 stop strings, got " + std::to_string(s->size()));
      for (const json& v : *s)
        if (auto e = add(v)) return e;
    } else if (auto e = add(*s)) {
      return e;
    }
    if (!gen.stop.empty() && !model.tokenizer.has_text())
      return bad("stop", "model '" + model.name +
                             "' has no tokenizer, so its output has no text to stop in; use "
                             "stop_token_ids");
  }
  if (const auto s = body.find("stop_token_ids"); s != body.end() && !s->is_null()) {
    if (!s->is_array()) return bad("stop_token_ids", "expected a list of token ids, got " + brief(*s));
    for (const json& v : *s) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= model.vocab)
        return bad("stop_token_ids", "expected token ids in [0, " + std::to_string(model.vocab) + "), got " + brief(v));
      gen.stop_token_ids.push_back(v.get<std::int64_t>());
    }
  }
  if (auto e = boolean(body, "ignore_eos", gen.ignore_eos)) return e;
  if (auto e =
          integer(body, "priority", std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max(),
                  "(a 32-bit integer; lower runs earlier)", gen.priority))
    return e;
  gen.sampling = std::make_shared<const SamplingParams>(p);
  return std::nullopt;
}

}  // namespace slicesched::serving
