// The OpenAI completions API as the front end speaks it: what a request may
// say (parse_completion, with OpenAI-style errors) and what a reply looks
// like (completion_body, chunk_body, error_body). Pure functions over JSON:
// no HTTP, no engine, so they are tested alone.
module;
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

export module slicesched.serving.api;
import slicesched.core.tokenizer;
import slicesched.core.sampling;
import slicesched.core.status;

export namespace slicesched::serving {

// A model the server offers, and the tenants (engine indices) that serve
// it: completions go to its online tenants, batch requests to its offline
// ones. Immutable once the server runs (read from every HTTP thread).
struct ServedModel {
  std::string name;
  std::int64_t vocab = 0;           // valid token ids are [0, vocab)
  std::int64_t context_window = 0;  // prompt + output tokens one request may hold
  // The most prompt + output tokens one request may hold here: the largest
  // KV budget of the tenants that serve it (0: no bound beyond the context
  // window). A request past it fits none of them, refused at parsing; one
  // that fits only some goes to those (online_tokens_max, offline_tokens_max).
  std::int64_t request_tokens_max = 0;
  // The longest prompt one request may send ([serve] max_prompt_tokens;
  // 0: no bound but the above), refused at admission.
  std::int64_t max_prompt_tokens = 0;
  ModelTokenizer tokenizer;  // text in and out (none: token ids only)
  std::vector<std::uint32_t> online, offline;
  // Per online / offline tenant (parallel to `online` / `offline`): the most
  // prompt + output tokens one request may hold there (its kv_budget_tokens).
  // Shorter than its list: the tenants past its end take any request.
  std::vector<std::int64_t> online_tokens_max, offline_tokens_max;
  // Whether tenant list `tokens_max`'s k-th takes a request of `total` tokens.
  static bool holds(const std::vector<std::int64_t>& tokens_max, std::size_t k, std::int64_t total) {
    return k >= tokens_max.size() || tokens_max[k] <= 0 || total <= tokens_max[k];
  }
  // Per online tenant (parallel to `online`): the request priorities it
  // takes, inclusive ([[tenants]] request_priorities). Empty: all take all.
  std::vector<std::pair<std::int64_t, std::int64_t>> online_priorities;
  // The ids that end generation (generation_config.json's eos_token_id,
  // else the tokenizer's EOS) unless a request sets ignore_eos.
  std::vector<std::int64_t> eos_ids;
  // Renders chat messages (a JSON array) into the prompt text with the
  // model's chat template (tokenizer_config.json's chat_template, or
  // --chat-template), a generation prompt appended. Null: the model has no
  // template, and chat completions are refused saying so. Thread-safe.
  std::function<Result<std::string>(const nlohmann::ordered_json& messages)> chat_template;
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

// What a request asks of generation beyond its prompt and length: how
// tokens are chosen (the head honours it on its device) and when the
// output is complete (the front end watches it: StopWatch).
struct GenerationOptions {
  std::shared_ptr<const SamplingParams> sampling = std::make_shared<SamplingParams>();
  std::vector<std::string> stop;             // stop strings: the text ends before the first
  std::vector<std::int64_t> stop_token_ids;  // these ids end it (kept in token_ids, not in the text)
  bool ignore_eos = false;
  std::int64_t priority = 0;  // lower runs earlier (vLLM's); picks the tenant
};

// The output tokens a request that names none gets: a chat completion
// may fill what is left of `tokens_max` (the context window, or a KV
// budget) after its prompt, as OpenAI's and vLLM's (max_model_len -
// prompt) do; a completion takes 16 (OpenAI's default), or less where
// less is left (vLLM's min of the two). At least 1 (the prompt alone too
// long is refused by what checks the sum); `tokens_max` <= 0: no bound (a
// chat then takes 16 too).
std::int64_t default_max_tokens(bool chat, std::int64_t prompt, std::int64_t tokens_max);

struct CompletionRequest;
// A request whose max_tokens is the default, sized to the model's largest
// KV budget, that no tenant which may take it holds: its default again
// within `budget`, the largest budget of those tenants (<= 0: none known).
// Whether it changed (then route it again).
bool refit_default_max_tokens(CompletionRequest& r, bool chat, std::int64_t budget);

struct CompletionRequest {
  std::size_t model = 0;  // index into the served models
  std::vector<std::int64_t> prompt;
  // Output tokens. Not given (max_tokens_given false): parse_common's
  // default, which the server may shrink to a tenant's KV budget.
  std::int64_t max_tokens = 16;
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM's): usage in every event
  GenerationOptions gen;
};

// The sampling and stop fields of a completion or chat body into `gen`, or
// the first bad one (a 400 naming the field and its range). `chat`: the
// chat endpoint's names (logprobs is a boolean, top_logprobs the count).
// Fields that would be silently ignored are refused.
std::optional<ApiError> parse_generation(const nlohmann::ordered_json& body, const ServedModel& model, bool chat,
                                         GenerationOptions& gen);

// A chat completion request (messages rendered with the model's chat
// template, then tokenized with its BOS, as a text prompt), or why not.
std::variant<CompletionRequest, ApiError> parse_chat(std::string_view body, std::span<const ServedModel> models);

// The request `body` (a JSON object) for one of `models`, or why not.
// Sampling and stop fields go through parse_generation; what we do not
// support (n > 1, best_of > 1, echo, suffix, logit_bias, ...) is refused
// unless it is the default.
std::variant<CompletionRequest, ApiError> parse_completion(const nlohmann::ordered_json& body,
                                                           std::span<const ServedModel> models);
// The same from the body's text (malformed JSON is a 400).
std::variant<CompletionRequest, ApiError> parse_completion(std::string_view body, std::span<const ServedModel> models);

nlohmann::ordered_json error_body(const ApiError& e);

// `body` as JSON text, bytes that are not UTF-8 (a path or header from the
// client, generated text ending inside a character) replaced by U+FFFD
// rather than thrown: what every response and stored line is written with.
std::string dump_text(const nlohmann::ordered_json& body);
// A value as an error message quotes it: at most about 60 characters of it
// (a 1.5-MB string came back whole in a one-line message).
std::string brief(const nlohmann::ordered_json& value);
// JSON text nested deeper than kMaxJsonDepth arrays and objects: a message
// saying so, before it is parsed (a 300-KB body of 150,000 nested arrays
// overflowed the stack printing or walking it, and stopped the server).
inline constexpr int kMaxJsonDepth = 64;
std::optional<std::string> too_deep(std::string_view text);

// A whole completion: `tokens` generated for a prompt of `prompt_tokens`.
// `text` is the decoded output ("" without a decode hook); the ids are in
// choices[0].token_ids either way.
nlohmann::ordered_json completion_body(const std::string& id, std::int64_t created, const std::string& model,
                                       std::int64_t prompt_tokens, std::span<const std::int64_t> tokens,
                                       const std::string& text, const char* finish_reason = "length",
                                       const nlohmann::ordered_json& logprobs = nullptr);

// Log-probabilities in the completions shape ({tokens, token_logprobs,
// top_logprobs, text_offset}) and the chat shape ({content: [{token,
// logprob, bytes, top_logprobs}]}); each token's text decoded alone.
// text_offset counts characters (Unicode code points, as vLLM's Python
// string lengths do), from `text_offset` on: where the tokens before ended.
// `end` (when given) receives where these tokens end: where the next
// stream event's offsets start.
nlohmann::ordered_json completion_logprobs(const ServedModel& model, std::span<const std::int64_t> tokens,
                                           std::span<const TokenLogprob> lp, std::size_t text_offset = 0,
                                           std::size_t* end = nullptr);
nlohmann::ordered_json chat_logprobs(const ServedModel& model, std::span<const std::int64_t> tokens,
                                     std::span<const TokenLogprob> lp);

// The chat shapes: a whole chat.completion, and one chat.completion.chunk
// (a delta with `content`, the first with the role; the last with
// finish_reason; usage when given).
nlohmann::ordered_json chat_body(const std::string& id, std::int64_t created, const std::string& model,
                                 std::int64_t prompt_tokens, std::span<const std::int64_t> tokens,
                                 const std::string& text, const char* finish_reason,
                                 const nlohmann::ordered_json& logprobs = nullptr);
nlohmann::ordered_json chat_chunk_body(const std::string& id, std::int64_t created, const std::string& model,
                                       const nlohmann::ordered_json& delta,
                                       const nlohmann::ordered_json& finish_reason = nullptr,
                                       const nlohmann::ordered_json& logprobs = nullptr);

// One server-sent event's JSON of a stream: one token (finish_reason null),
// or the last event (no token, finish_reason "length", with usage).
nlohmann::ordered_json chunk_body(const std::string& id, std::int64_t created, const std::string& model,
                                  std::span<const std::int64_t> tokens, const std::string& text,
                                  const nlohmann::ordered_json& logprobs = nullptr);
nlohmann::ordered_json final_chunk_body(const std::string& id, std::int64_t created, const std::string& model,
                                        std::int64_t prompt_tokens, std::int64_t completion_tokens,
                                        const char* finish_reason = "length");

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

// One request's output against its stop conditions, token by token (the
// engine thread: RequestSink::on_token). EOS and stop_token_ids end it with
// the id kept out of the text; a stop string ends it with the text cut
// before it. Not thread-safe: its owner locks.
class StopWatch {
 public:
  StopWatch(const ServedModel& model, const GenerationOptions& gen);
  // Adds the next token; true once the output is complete.
  bool add(std::int64_t token);
  bool stopped() const { return stopped_; }
  // "stop" when a stop condition ended the output, else "length".
  const char* finish_reason() const { return stopped_ ? "stop" : "length"; }
  // The tokens whose text is output (a stop token's is not).
  std::size_t text_tokens() const { return text_tokens_; }
  // With stop strings: the output text so far (cut at a stop string), and
  // how much of it is final (a stop string may still begin in the rest).
  bool watches_text() const { return !stop_.empty(); }
  const std::string& text() const { return text_; }
  std::size_t settled() const;
  // The output ended (its length, or the server's end): the text the
  // decoder held back, a character still incomplete and what came with it,
  // joins it, cut at a stop string found there. (Held back for good, a
  // stop string that never matched cost a reply its last characters.)
  void end();

 private:
  void cut_at_stop(std::size_t before);

  const ServedModel& model_;
  std::vector<std::string> stop_;
  std::vector<std::int64_t> stop_ids_;
  std::vector<std::int64_t> tokens_;
  std::string text_;
  std::size_t text_tokens_ = 0, longest_stop_ = 0;
  bool stopped_ = false;
  std::unique_ptr<StreamDecoder> decoder_;
};

}  // namespace slicesched::serving

// Shared by the module's implementation files (api.cpp, chat.cpp), not
// exported: a request body's JSON object (a 400 for an empty body, JSON
// that does not parse, or anything but an object), the model a body names
// (404 naming those served), and the fields completions and chat share,
// checked into `r` once its prompt is set.
namespace slicesched::serving {
std::variant<nlohmann::ordered_json, ApiError> json_object_body(std::string_view text);
std::variant<std::size_t, ApiError> find_model(const nlohmann::ordered_json& body, std::span<const ServedModel> models);
std::optional<ApiError> parse_common(const nlohmann::ordered_json& body, const ServedModel& m, bool chat,
                                     CompletionRequest& r);
// Refuses a text far longer than any prompt `model` takes before the whole
// of it is tokenized (a 16-MB prompt held the tokenizer, and with it every
// other text request, for 11 s): past 16 bytes per token of the model's
// prompt limit (the least of its context window, the tokens a request may
// hold and max_prompt_tokens), a prefix cut at whitespace is tokenized, and
// when that alone is over the limit (with 16 tokens to spare for where the
// cut fell) the text is refused naming `param`. Otherwise nothing: the
// caller tokenizes the whole and checks it as any prompt.
std::optional<ApiError> refuse_overlong_text(std::string_view text, const ServedModel& model, const char* param);
}  // namespace slicesched::serving
