module;
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

module slicesched.serving.api;

namespace slicesched::serving {

namespace {

using json = nlohmann::ordered_json;

ApiError bad(std::string param, std::string message) {
  return ApiError{.status = 400, .message = std::move(message), .param = std::move(param)};
}

// Token ids from a JSON array, each checked against the vocabulary.
std::variant<std::vector<std::int64_t>, ApiError> token_ids(const json& a, const ServedModel& m) {
  std::vector<std::int64_t> ids;
  ids.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const json& v = a[i];
    if (v.is_array())
      return bad("prompt",
                 "prompt: one prompt per request (a list of prompts is not supported; send one request each)");
    if (!v.is_number_integer())
      return bad("prompt", "prompt[" + std::to_string(i) + "]: expected an integer token id, got " + brief(v));
    // (an id past int64 is unsigned in JSON: named as sent, never wrapped)
    const bool huge = v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(INT64_MAX);
    const std::int64_t id = huge ? -1 : v.get<std::int64_t>();
    if (huge || id < 0 || id >= m.vocab)
      return bad("prompt", "prompt[" + std::to_string(i) + "]: token id " + brief(v) + " is outside model '" + m.name +
                               "''s vocabulary [0, " + std::to_string(m.vocab) + ")");
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

std::optional<ApiError> refuse_overlong_text(std::string_view text, const ServedModel& m, const char* param) {
  std::int64_t limit = 0;
  for (const std::int64_t l : {m.context_window, m.request_tokens_max, m.max_prompt_tokens})
    if (l > 0 && (limit == 0 || l < limit)) limit = l;
  constexpr std::size_t kBytesPerToken = 16, kSpare = 16;
  if (limit == 0 || !m.tokenizer.has_text() || text.size() <= static_cast<std::size_t>(limit) * kBytesPerToken + 4096)
    return std::nullopt;
  std::size_t cut = static_cast<std::size_t>(limit) * kBytesPerToken;
  // At whitespace in its second half when there is some (no word is cut),
  // else at a character's first byte.
  if (const std::size_t ws = text.find_last_of(" \t\r\n", cut); ws != std::string_view::npos && ws >= cut / 2)
    cut = ws;
  else
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  auto ids = m.tokenizer.encode(text.substr(0, cut));
  if (!ids.ok() || static_cast<std::int64_t>(ids.value().size()) <= limit + static_cast<std::int64_t>(kSpare))
    return std::nullopt;
  return bad(param, std::string(param) + ": " + std::to_string(text.size()) + " bytes of text, whose first " +
                        std::to_string(cut) + " alone are " + std::to_string(ids.value().size()) +
                        " tokens: more than the " + std::to_string(limit) + " model '" + m.name +
                        "' takes in one request");
}

std::string dump_text(const json& body) { return body.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string brief(const json& value) {
  std::string s = dump_text(value);  // (bodies deeper than kMaxJsonDepth never parse)
  constexpr std::size_t kMax = 60;
  if (s.size() <= kMax) return s;
  std::size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // (whole characters)
  return s.substr(0, cut) + "... (" + std::to_string(s.size()) + " characters)";
}

std::optional<std::string> too_deep(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return "the JSON nests arrays and objects more than " + std::to_string(kMaxJsonDepth) + " levels deep";
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

std::variant<std::size_t, ApiError> find_model(const json& body, std::span<const ServedModel> models) {
  const auto model = body.find("model");
  if (model == body.end() || !model->is_string()) return bad("model", "model: required (a string)");
  const std::string name = model->get<std::string>();
  for (std::size_t i = 0; i < models.size(); ++i)
    if (models[i].name == name) return i;
  std::string known;
  for (const ServedModel& m : models) known += (known.empty() ? "" : ", ") + m.name;
  return ApiError{.status = 404,
                  .message = "model '" + name + "' does not exist (served: " + known + ")",
                  .param = "model",
                  .code = "model_not_found"};
}

std::int64_t default_max_tokens(bool chat, std::int64_t prompt, std::int64_t tokens_max) {
  constexpr std::int64_t kOpenAiDefault = 16;
  if (tokens_max <= 0) return kOpenAiDefault;
  const std::int64_t room = std::max<std::int64_t>(1, tokens_max - prompt);
  return chat ? room : std::min(kOpenAiDefault, room);
}

bool refit_default_max_tokens(CompletionRequest& r, bool chat, std::int64_t budget) {
  const auto prompt = static_cast<std::int64_t>(r.prompt.size());
  if (r.max_tokens_given || budget <= prompt) return false;
  r.max_tokens = default_max_tokens(chat, prompt, budget);
  return true;
}

std::optional<ApiError> parse_common(const json& body, const ServedModel& m, bool chat, CompletionRequest& r) {
  if (r.prompt.empty()) return bad("prompt", "prompt: empty (at least one token)");
  if (m.max_prompt_tokens > 0 && static_cast<std::int64_t>(r.prompt.size()) > m.max_prompt_tokens)
    return bad(chat ? "messages" : "prompt", (chat ? "messages: " : "prompt: ") + std::to_string(r.prompt.size()) +
                                                 " tokens, more than the " + std::to_string(m.max_prompt_tokens) +
                                                 " one request may send ([serve] max_prompt_tokens)");
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (const auto mt = body.find(key); mt != body.end() && !mt->is_null()) {
      if (!mt->is_number_integer() || mt->get<std::int64_t>() < 1)
        return bad(key, std::string(key) + ": expected an integer >= 1, got " + brief(*mt));
      r.max_tokens = mt->get<std::int64_t>();
      r.max_tokens_given = true;
    }
  const auto prompt = static_cast<std::int64_t>(r.prompt.size());
  if (!r.max_tokens_given) {
    // What one request may hold here: the context window, within the
    // largest KV budget of the model's tenants (the server shrinks it to
    // the budgets of those that take the request's priority).
    std::int64_t tokens_max = m.context_window;
    if (m.request_tokens_max > 0 && (tokens_max <= 0 || m.request_tokens_max < tokens_max))
      tokens_max = m.request_tokens_max;
    r.max_tokens = default_max_tokens(chat, prompt, tokens_max);
  }
  // (saturating: max_tokens near 2^63 wrapped the sum negative, past both
  // checks below, and the request ran on past the context window)
  const std::int64_t total = r.max_tokens > std::numeric_limits<std::int64_t>::max() - prompt
                                 ? std::numeric_limits<std::int64_t>::max()
                                 : prompt + r.max_tokens;
  // Named for what must change: the prompt where it leaves no room for one
  // token, else max_tokens; a max_tokens the client did not send is not
  // named at all.
  const std::string where = chat ? "messages" : "prompt";
  auto over = [&](std::int64_t bound, const std::string& what) {
    const bool prompt_alone = prompt >= bound;
    return bad(prompt_alone ? where : "max_tokens",
               !r.max_tokens_given
                   ? "prompt (" + std::to_string(prompt) + " tokens) leaves no room for output in " + what
                   : "prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" + std::to_string(r.max_tokens) +
                         ") exceeds " + what);
  };
  if (m.context_window > 0 && total > m.context_window) {
    ApiError e = over(m.context_window,
                      "model '" + m.name + "''s context window of " + std::to_string(m.context_window) + " tokens");
    e.code = "context_length_exceeded";  // (OpenAI's code either way)
    return e;
  }
  if (m.request_tokens_max > 0 && total > m.request_tokens_max)
    return over(m.request_tokens_max, "the " + std::to_string(m.request_tokens_max) +
                                          " tokens one request may hold on this server (its tenants' "
                                          "kv_budget_tokens)");
  if (const auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return bad("stream", "stream: expected true or false, got " + brief(*s));
    r.stream = s->get<bool>();
  }
  if (const auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return bad("stream_options", "stream_options: expected an object");
    // (as vLLM and OpenAI: the options of a stream that is not one do nothing)
    if (!r.stream) return bad("stream_options", "stream_options: only allowed with \"stream\": true");
    for (const auto& [k, v] : so->items())
      if (k != "include_usage" && k != "continuous_usage_stats")
        return bad("stream_options", "stream_options." + k + ": not supported (include_usage is)");
    if (const auto u = so->find("include_usage"); u != so->end()) {
      if (!u->is_boolean()) return bad("stream_options", "stream_options.include_usage: expected true or false");
      r.include_usage = u->get<bool>();
    }
    if (const auto u = so->find("continuous_usage_stats"); u != so->end()) {
      if (!u->is_boolean())
        return bad("stream_options", "stream_options.continuous_usage_stats: expected true or false");
      r.continuous_usage = u->get<bool>();
    }
  }
  return parse_generation(body, m, chat, r.gen);
}

std::variant<CompletionRequest, ApiError> parse_completion(const json& body, std::span<const ServedModel> models) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  CompletionRequest r;
  auto found = find_model(body, models);
  if (auto* e = std::get_if<ApiError>(&found)) return *e;
  r.model = std::get<std::size_t>(found);
  const ServedModel& m = models[r.model];

  const auto prompt = body.find("prompt");
  if (prompt == body.end()) return bad("prompt", "prompt: required (token ids, or text for a model with a tokenizer)");
  if (prompt->is_string()) {
    if (!m.tokenizer.has_text())
      return bad("prompt", "prompt: " + (m.tokenizer.absent.empty()
                                             ? "model '" + m.name +
                                                   "' has no tokenizer, so it takes no text; send the prompt as a "
                                                   "list of token ids"
                                             : m.tokenizer.absent));
    if (auto e = refuse_overlong_text(prompt->get_ref<const std::string&>(), m, "prompt")) return *e;
    auto ids = m.tokenizer.encode_prompt(prompt->get<std::string>());
    if (!ids.ok()) return bad("prompt", "prompt: " + ids.status().message());
    auto checked = token_ids(json(ids.value()), m);
    if (auto* e = std::get_if<ApiError>(&checked)) return *e;
    r.prompt = std::get<std::vector<std::int64_t>>(std::move(checked));
  } else if (prompt->is_array()) {
    auto checked = token_ids(*prompt, m);
    if (auto* e = std::get_if<ApiError>(&checked)) return *e;
    r.prompt = std::get<std::vector<std::int64_t>>(std::move(checked));
  } else {
    return bad("prompt", "prompt: expected a list of token ids or a string, got " + brief(*prompt));
  }
  // What would change the reply's shape must be the default.
  auto is_default = [&](const char* key, const json& def) {
    const auto v = body.find(key);
    return v == body.end() || v->is_null() || *v == def;
  };
  if (!is_default("best_of", 1)) return bad("best_of", "best_of: only 1 is supported");
  if (!is_default("echo", false)) return bad("echo", "echo: not supported");
  if (!is_default("suffix", "")) return bad("suffix", "suffix: not supported");
  if (auto e = parse_common(body, m, false, r)) return *e;
  return r;
}

std::variant<json, ApiError> json_object_body(std::string_view text) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return bad("", "the request body is empty: expected a JSON object, sent with its Content-Length");
  if (auto deep = too_deep(text)) return bad("", "the request body: " + *deep);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("", "the request body is not valid JSON");
  if (!j.is_object()) return bad("", "the request body must be a JSON object");
  return j;
}

std::variant<CompletionRequest, ApiError> parse_completion(std::string_view body, std::span<const ServedModel> models) {
  auto j = json_object_body(body);
  if (auto* e = std::get_if<ApiError>(&j)) return *e;
  return parse_completion(std::get<json>(j), models);
}

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json() : json(e.param)},
            {"code", e.code.empty() ? json() : json(e.code)}}}};
}

namespace {

// A text_completion object with one choice: `tokens` and their `text`,
// finished or not ("length": the runtime always runs to max_tokens), with
// usage when `usage` holds prompt and completion token counts.
json completion_object(const std::string& id, std::int64_t created, const std::string& model,
                       std::span<const std::int64_t> tokens, const std::string& text, const char* finished,
                       const std::pair<std::int64_t, std::int64_t>* usage, const json& logprobs) {
  json body = {
      {"id", id},
      {"object", "text_completion"},
      {"created", created},
      {"model", model},
      {"choices", json::array({{{"text", text},
                                {"index", 0},
                                {"logprobs", logprobs},
                                {"finish_reason", finished ? json(finished) : json()},
                                {"token_ids", json(std::vector<std::int64_t>(tokens.begin(), tokens.end()))}}})}};
  if (usage)
    body["usage"] = {{"prompt_tokens", usage->first},
                     {"completion_tokens", usage->second},
                     {"total_tokens", usage->first + usage->second}};
  return body;
}

}  // namespace

json completion_body(const std::string& id, std::int64_t created, const std::string& model, std::int64_t prompt_tokens,
                     std::span<const std::int64_t> tokens, const std::string& text, const char* finish_reason,
                     const json& logprobs) {
  const std::pair<std::int64_t, std::int64_t> usage{prompt_tokens, static_cast<std::int64_t>(tokens.size())};
  return completion_object(id, created, model, tokens, text, finish_reason, &usage, logprobs);
}

json chunk_body(const std::string& id, std::int64_t created, const std::string& model,
                std::span<const std::int64_t> tokens, const std::string& text, const json& logprobs) {
  return completion_object(id, created, model, tokens, text, nullptr, nullptr, logprobs);
}

json final_chunk_body(const std::string& id, std::int64_t created, const std::string& model, std::int64_t prompt_tokens,
                      std::int64_t completion_tokens, const char* finish_reason) {
  const std::pair<std::int64_t, std::int64_t> usage{prompt_tokens, completion_tokens};
  return completion_object(id, created, model, {}, "", finish_reason, &usage, nullptr);
}

std::string decode(const ServedModel& model, std::span<const std::int64_t> tokens) {
  return model.tokenizer.decode(tokens);
}

std::string StreamDecoder::next(std::span<const std::int64_t> tokens) {
  if (!model_.tokenizer.has_text()) return "";
  const std::string before = decode(model_, tokens.subspan(prefix_, read_ - prefix_));
  const std::string now = decode(model_, tokens.subspan(prefix_));
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD: half a character so far
  const bool partial = now.size() >= 3 && std::string_view(now).substr(now.size() - 3) == kReplacement;
  if (partial && tokens.size() - read_ < 8) return "";  // held: the next token may complete it
  std::string added;
  if (now.size() >= before.size() && now.compare(0, before.size(), before) == 0) added = now.substr(before.size());
  prefix_ = read_;
  read_ = tokens.size();
  return added;
}

std::string StreamDecoder::flush(std::span<const std::int64_t> tokens) {
  if (!model_.tokenizer.has_text() || read_ == tokens.size()) return "";
  const std::string before = decode(model_, tokens.subspan(prefix_, read_ - prefix_));
  const std::string now = decode(model_, tokens.subspan(prefix_));
  read_ = tokens.size();
  return now.size() >= before.size() && now.compare(0, before.size(), before) == 0 ? now.substr(before.size())
                                                                                   : std::string();
}

}  // namespace slicesched::serving
