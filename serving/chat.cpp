// Chat completions: the request (messages rendered by the model's own chat
// template, ServedModel::chat_template) and the OpenAI chat shapes, and
// the log-probabilities of both endpoints.
module;
#include <algorithm>
#include <cstdint>
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

// The messages as the template reads them: each {role, content} with
// content a string (a list of text parts is joined, a newline between;
// other parts refused).
std::variant<json, ApiError> messages_of(const json& body) {
  const auto ms = body.find("messages");
  if (ms == body.end() || !ms->is_array() || ms->empty())
    return bad("messages", "messages: required (a non-empty list of {role, content})");
  json out = json::array();
  for (std::size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad("messages", at + ": expected an object {role, content}");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return bad("messages", at + ".role: required (system, user, assistant, ...)");
    json msg = m;
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      msg["content"] = "";
    } else if (content->is_array()) {
      // One part after another, a newline between (as vLLM joins them for
      // a template that reads a string).
      std::string text;
      for (const json& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          return bad("messages", at + ".content: only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
        if (&part != &content->front()) text += '\n';
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else if (!content->is_string()) {
      return bad("messages", at + ".content: expected a string or a list of text parts");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::string piece(const ServedModel& m, std::int64_t token) {
  const std::int64_t one[] = {token};
  return decode(m, one);
}

// The bytes token `id` stands for (its tokenizer's spelling: half of a
// character is that byte), or its text where the tokenizer has no such id.
std::string token_bytes(const ServedModel& m, std::int64_t token) {
  const Tokenizer* t = m.tokenizer.tokenizer.get();
  if (t && token >= 0 && token < t->vocab_size()) return t->token_bytes(token);
  return piece(m, token);
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// A token's text as a JSON key or string: half a UTF-8 character becomes
// U+FFFD instead of failing the dump (the bytes are in `bytes`).
std::string safe(const std::string& s) { return dump_text(json(s)); }
std::string unquoted(const std::string& s) {
  const std::string q = safe(s);
  return json::parse(q).get<std::string>();
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_chat(std::string_view text, std::span<const ServedModel> models) {
  auto parsed = json_object_body(text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  CompletionRequest r;
  auto found = find_model(body, models);
  if (auto* e = std::get_if<ApiError>(&found)) return *e;
  r.model = std::get<std::size_t>(found);
  const ServedModel& m = models[r.model];
  auto msgs = messages_of(body);
  if (auto* e = std::get_if<ApiError>(&msgs)) return *e;
  // The fields first (a bad one is named even for a model without a template).
  if (GenerationOptions probe; auto e = parse_generation(body, m, true, probe)) return *e;
  if (!m.chat_template)
    return bad("model", "model '" + m.name +
                            "' has no chat template (no chat_template in its tokenizer_config.json); start serve "
                            "with --chat-template FILE, or use /v1/completions");
  if (!m.tokenizer.has_text())
    return bad("model", "model '" + m.name + "' has no tokenizer, so it cannot take chat messages");
  auto prompt = m.chat_template(std::get<json>(msgs));
  if (!prompt.ok()) return bad("messages", "messages: the chat template refused them: " + prompt.status().message());
  if (auto e = refuse_overlong_text(prompt.value(), m, "messages")) return *e;
  auto ids = m.tokenizer.encode(prompt.value());
  if (!ids.ok()) return bad("messages", "messages: " + ids.status().message());
  for (std::int64_t id : ids.value())
    if (id < 0 || id >= m.vocab)
      return bad("messages", "messages: the rendered prompt has token id " + std::to_string(id) +
                                 " outside the model's vocabulary");
  r.prompt = std::move(ids).value();
  if (auto e = parse_common(body, m, true, r)) return *e;
  return r;
}

json chat_body(const std::string& id, std::int64_t created, const std::string& model, std::int64_t prompt_tokens,
               std::span<const std::int64_t> tokens, const std::string& text, const char* finish_reason,
               const json& logprobs) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", text}}},
                                    {"logprobs", logprobs},
                                    {"finish_reason", finish_reason},
                                    {"token_ids", json(std::vector<std::int64_t>(tokens.begin(), tokens.end()))}}})},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", n}, {"total_tokens", prompt_tokens + n}}}};
}

json chat_chunk_body(const std::string& id, std::int64_t created, const std::string& model, const json& delta,
                     const json& finish_reason, const json& logprobs) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices",
           json::array({{{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish_reason}}})}};
}

namespace {

// Code points: every byte that does not continue a UTF-8 sequence.
std::size_t utf8_chars(std::string_view s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

}  // namespace

json completion_logprobs(const ServedModel& m, std::span<const std::int64_t> tokens, std::span<const TokenLogprob> lp,
                         std::size_t text_offset, std::size_t* end) {
  // A token is named by its text; without a tokenizer (no text), or where
  // two of one position's top tokens spell the same text (two halves of a
  // character both print U+FFFD), by "token_id:N" as vLLM's
  // return_tokens_as_token_ids does: the map keeps every one of them.
  auto by_id = [](std::int64_t id) { return "token_id:" + std::to_string(id); };
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (std::size_t i = 0; i < tokens.size() && i < lp.size(); ++i) {
    const std::string t = unquoted(piece(m, tokens[i]));
    toks.push_back(m.tokenizer.has_text() ? t : by_id(tokens[i]));
    lps.push_back(lp[i].logprob);
    json top = json::object();
    for (const auto& [id, v] : lp[i].top) {
      std::string key = m.tokenizer.has_text() ? unquoted(piece(m, id)) : by_id(id);
      if (top.contains(key)) key = by_id(id);
      top[key] = v;
    }
    tops.push_back(lp[i].top.empty() ? json() : top);
    offsets.push_back(text_offset);
    text_offset += utf8_chars(t);
  }
  if (end) *end = text_offset;
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs(const ServedModel& m, std::span<const std::int64_t> tokens, std::span<const TokenLogprob> lp) {
  json content = json::array();
  for (std::size_t i = 0; i < tokens.size() && i < lp.size(); ++i) {
    const std::string t = piece(m, tokens[i]);
    json top = json::array();
    for (const auto& [id, v] : lp[i].top)
      top.push_back({{"token", unquoted(piece(m, id))}, {"logprob", v}, {"bytes", bytes_of(token_bytes(m, id))}});
    content.push_back({{"token", unquoted(t)},
                       {"logprob", lp[i].logprob},
                       {"bytes", bytes_of(token_bytes(m, tokens[i]))},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

}  // namespace slicesched::serving
