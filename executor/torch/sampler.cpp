// Sampling on the head's device. The order is vLLM's: penalties on the raw
// logits, then temperature, top_k, softmax, min_p, top_p, and a draw; the
// log-probabilities reported are of the raw logits. The draw is an inverse
// CDF over the kept tokens in vocabulary order with one uniform number that
// is a pure function of (seed, position), so a seeded request gets the same
// tokens whatever it is batched with, and wherever it runs.
#include "sampler.h"

#include <c10/core/InferenceMode.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "runtime_internal.h"

namespace slicesched::rt::detail {

namespace {

// A uniform number in [0, 1) for the token at `position` of a request seeded `seed`.
double uniform(std::uint64_t seed, std::int64_t position) {
  const std::uint64_t h = mix(mix(seed) ^ static_cast<std::uint64_t>(position));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// Penalties on one row of raw logits (float, on the device), in place.
void penalize(at::Tensor& row, const Sampling& s) {
  const auto opts = at::TensorOptions().dtype(at::kLong);
  if (s.history.empty()) return;
  const std::int64_t vocab = row.size(0);
  if (s.repetition_penalty != 1) {
    // Every token seen (prompt and output): a positive logit divided by
    // the penalty, a negative one multiplied (HF's and vLLM's rule).
    at::Tensor ids =
        at::from_blob(const_cast<std::int64_t*>(s.history.data()), {static_cast<std::int64_t>(s.history.size())}, opts)
            .to(row.device());
    ids = std::get<0>(at::_unique(ids));
    at::Tensor seen = row.index_select(0, ids);
    seen = at::where(seen > 0, seen / s.repetition_penalty, seen * s.repetition_penalty);
    row.index_copy_(0, ids, seen);
  }
  const auto out = static_cast<std::int64_t>(s.history.size()) - s.prompt_tokens;
  if (out > 0 && (s.presence_penalty != 0 || s.frequency_penalty != 0)) {
    at::Tensor ids =
        at::from_blob(const_cast<std::int64_t*>(s.history.data() + s.prompt_tokens), {out}, opts).to(row.device());
    at::Tensor counts = at::bincount(ids, {}, vocab).to(row.scalar_type());
    row -= counts * s.frequency_penalty + (counts > 0).to(row.scalar_type()) * s.presence_penalty;
  }
}

// One token drawn from one row of (penalized) logits.
std::int64_t draw(at::Tensor row, const Sampling& s, std::int64_t position) {
  const std::int64_t vocab = row.size(0);
  // In double and shifted so the largest logit is 0 before the division: a
  // tiny temperature then sends the others to -inf (greedy in the limit)
  // instead of overflowing every logit to inf, whose softmax is NaN.
  row = row.to(at::kDouble);
  row = (row - row.max()) / s.temperature;
  if (s.top_k > 0 && s.top_k < vocab) {
    const at::Tensor kth = std::get<0>(at::topk(row, s.top_k)).min();
    row = row.masked_fill(row < kth, -std::numeric_limits<double>::infinity());
  }
  at::Tensor probs = at::softmax(row, 0);
  if (s.min_p > 0) probs = probs.masked_fill(probs < probs.max() * s.min_p, 0.0);
  if (s.top_p < 1) {
    // The smallest set of most likely tokens whose mass reaches top_p
    // (the top token always stays).
    auto [sorted, order] = at::sort(probs, 0, /*descending=*/true);
    const at::Tensor before = at::cumsum(sorted, 0) - sorted;  // mass of the tokens above each
    const at::Tensor drop = before >= s.top_p * sorted.sum();
    probs = probs.index_fill(0, order.masked_select(drop), 0.0);
  }
  const at::Tensor cdf = at::cumsum(probs, 0);
  const double target = uniform(s.seed, position) * cdf[vocab - 1].item<double>();
  // The first token whose cumulative mass passes the target: one with mass.
  const std::int64_t tok = (cdf <= target).sum().item<std::int64_t>();
  return tok < vocab ? tok : vocab - 1;
}

}  // namespace

LlamaModel::Sampled sample(const at::Tensor& logits_in, const StepPlan& plan) {
  c10::InferenceMode im;
  const at::Tensor logits = logits_in.to(at::kFloat);
  const auto S = static_cast<std::int64_t>(plan.seqs.size());
  bool any_logprobs = false, any_sampled = false;
  for (const SeqStep& q : plan.seqs)
    if (q.sampling) {
      any_logprobs |= q.sampling->logprobs >= 0;
      any_sampled |= q.sampling->temperature > 0 || !q.sampling->history.empty();
    }
  LlamaModel::Sampled out;
  // Greedy rows in one argmax; the others replaced one by one below.
  const at::Tensor greedy = logits.argmax(-1).to(at::kCPU);
  out.tokens.assign(greedy.data_ptr<std::int64_t>(), greedy.data_ptr<std::int64_t>() + S);
  if (any_sampled)
    for (std::int64_t i = 0; i < S; ++i) {
      const SeqStep& q = plan.seqs[static_cast<std::size_t>(i)];
      if (!q.sampling || (q.sampling->temperature == 0 && q.sampling->history.empty())) continue;
      at::Tensor row = logits[i].clone();
      penalize(row, *q.sampling);
      const std::int64_t position = q.position + static_cast<std::int64_t>(q.tokens.size());
      out.tokens[static_cast<std::size_t>(i)] =
          q.sampling->temperature == 0 ? row.argmax().item<std::int64_t>() : draw(row, *q.sampling, position);
    }
  if (any_logprobs) {
    const at::Tensor lp = at::log_softmax(logits, -1);
    const at::Tensor chosen = lp.gather(1, at::tensor(out.tokens, at::kLong).to(lp.device()).unsqueeze(1))
                                  .squeeze(1)
                                  .to(at::kDouble)
                                  .to(at::kCPU);
    out.logprobs.resize(static_cast<std::size_t>(S));
    for (std::int64_t i = 0; i < S; ++i) {
      const SeqStep& q = plan.seqs[static_cast<std::size_t>(i)];
      if (!q.sampling || q.sampling->logprobs < 0) continue;
      Logprobs& l = out.logprobs[static_cast<std::size_t>(i)];
      l.chosen = chosen[i].item<double>();
      const std::int64_t k = std::min<std::int64_t>(q.sampling->logprobs, lp.size(1));
      if (k <= 0) continue;
      auto [vals, ids] = at::topk(lp[i], k);
      const at::Tensor v = vals.to(at::kDouble).to(at::kCPU), d = ids.to(at::kCPU);
      for (std::int64_t j = 0; j < k; ++j) l.top.emplace_back(d[j].item<std::int64_t>(), v[j].item<double>());
    }
  }
  return out;
}

}  // namespace slicesched::rt::detail
