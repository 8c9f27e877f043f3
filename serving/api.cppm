// The OpenAI completions API as the front end speaks it: what a request may
// say (parse_completion, with OpenAI-style errors) and what a reply looks
// like (completion_body, chunk_body, error_body). Pure functions over JSON:
// no HTTP, no engine, so they are tested alone.
module;
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

export module slicesched.serving.api;
export import slicesched.serving.tokenizer;

export namespace slicesched::serving {

// A model the server offers, and the tenants (engine indices) that serve
// it: completions go to its online tenants, batch requests to its offline
// ones. Immutable once the server runs (read from every HTTP thread).
struct ServedModel {
  std::string name;
  std::int64_t vocab = 0;           // valid token ids are [0, vocab)
  std::int64_t context_window = 0;  // prompt + output tokens one request may hold
  // The most prompt + output tokens one request may hold here (the serving
  // tenants' KV budget; 0: no bound beyond the context window). A request
  // past it could never be placed and would stop the engine.
  std::int64_t request_tokens_max = 0;
  // The longest prompt one request may send ([serve] max_prompt_tokens;
  // 0: no bound but the above), refused at admission.
  std::int64_t max_prompt_tokens = 0;
  Tokenizer tokenizer;
  std::vector<std::uint32_t> online, offline;
};

// An error as the client sees it: the HTTP status and OpenAI's error body
// ({"error": {"message", "type", "param", "code"}}).
struct ApiError {
  int status = 400;
  std::string message = {};
  std::string type = "invalid_request_error";
  std::string param = {};  // the request field at fault, or empty
  std::string code = {};   // e.g. "model_not_found", or empty
};

struct CompletionRequest {
  std::size_t model = 0;  // index into the served models
  std::vector<std::int64_t> prompt;
  std::int64_t max_tokens = 16;  // OpenAI's default
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// The request `body` (a JSON object) for one of `models`, or why not.
// Sampling parameters (temperature, top_p, stop, seed, ...) are accepted and
// do nothing (the runtime samples greedily); what would change the reply's
// shape (n, best_of, echo, logprobs, suffix) is refused unless it is the
// default.
std::variant<CompletionRequest, ApiError> parse_completion(const nlohmann::json& body,
                                                           std::span<const ServedModel> models);
// The same from the body's text (malformed JSON is a 400).
std::variant<CompletionRequest, ApiError> parse_completion(std::string_view body, std::span<const ServedModel> models);

nlohmann::json error_body(const ApiError& e);

// A whole completion: `tokens` generated for a prompt of `prompt_tokens`.
// `text` is the decoded output ("" without a decode hook); the ids are in
// choices[0].token_ids either way.
nlohmann::json completion_body(const std::string& id, std::int64_t created, const std::string& model,
                               std::int64_t prompt_tokens, std::span<const std::int64_t> tokens,
                               const std::string& text);

// One server-sent event's JSON of a stream: one token (finish_reason null),
// or the last event (no token, finish_reason "length", with usage).
nlohmann::json chunk_body(const std::string& id, std::int64_t created, const std::string& model,
                          std::span<const std::int64_t> tokens, const std::string& text);
nlohmann::json final_chunk_body(const std::string& id, std::int64_t created, const std::string& model,
                                std::int64_t prompt_tokens, std::int64_t completion_tokens);

// The text of `tokens` for `model` ("" without a decode hook).
std::string decode(const ServedModel& model, std::span<const std::int64_t> tokens);

// A stream's text, token by token, equal in the end to decode() of all its
// tokens: each token's text is what it adds to a short window of the tokens
// before it (as vLLM's incremental detokenizer), since a token decoded
// alone is not its text in context (SentencePiece drops a word's leading
// space at the start of a decode; a byte-level token may be half a UTF-8
// character). Text ending in an incomplete character (U+FFFD) is held back
// until the next tokens complete it, at most 8 tokens; flush() gives what
// is still held at the end.
class StreamDecoder {
 public:
  explicit StreamDecoder(const ServedModel& model) : model_(model) {}
  // The text `tokens.back()` adds; `tokens`: every token so far.
  std::string next(std::span<const std::int64_t> tokens);
  std::string flush(std::span<const std::int64_t> tokens);

 private:
  const ServedModel& model_;
  std::size_t prefix_ = 0, read_ = 0;  // tokens[prefix_, read_) gave the text sent last
};

}  // namespace slicesched::serving
