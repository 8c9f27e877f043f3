// How a live request's next tokens are chosen, and what the head reports
// about each: the parameters travel with the request from the front end
// through the engine's iteration plans (and the executors' wire) to the
// head operator, which samples on its device (executor/torch/sampler.cpp).
module;
#include <cstdint>
#include <utility>
#include <vector>

export module slicesched.core.sampling;

export namespace slicesched {

// One request's sampling. Validated by the front end (serving/
// sampling_params.cpp); the head trusts the ranges. Immutable once the
// request is submitted (shared between threads read-only).
struct SamplingParams {
  double temperature = 0;  // 0: greedy (argmax); else logits / temperature
  double top_p = 1;        // (0, 1]: the smallest set of tokens whose probability reaches it
  std::int64_t top_k = 0;  // 0: every token; else the k most likely
  double min_p = 0;        // [0, 1]: tokens below min_p * the top token's probability are dropped
  // The draw for the token at position p is a pure function of (seed, p),
  // so the same seed gives the same tokens whatever the batch or device.
  std::uint64_t seed = 0;
  double presence_penalty = 0, frequency_penalty = 0;  // OpenAI's, over the output tokens
  double repetition_penalty = 1;                       // vLLM's / HF's, over prompt and output
  // -1: no log-probabilities; 0: the chosen token's; k > 0: and the k most likely.
  std::int32_t logprobs = -1;

  bool greedy() const { return temperature == 0; }
  bool penalized() const { return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1; }
};

// The head's log-probabilities for one chosen token, from the model's raw
// logits (log_softmax before penalties, temperature or truncation, as
// vLLM reports them by default): the chosen token's and the `top` most
// likely, most likely first.
struct TokenLogprob {
  double logprob = 0;
  std::vector<std::pair<std::int64_t, double>> top;
};

}  // namespace slicesched
