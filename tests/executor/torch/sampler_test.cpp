// Sampling in the head (executor/torch/sampler.cpp) on dev(), with the tiny
// model: temperature 0 and top_k 1 are the argmax, a seed gives the same
// tokens again (whatever else is in the batch) and another seed others,
// top_p and min_p keep only likely tokens, penalties move probability off
// seen tokens, and the log-probabilities are log_softmax of the very
// logits the head computed (a reference in double on the host).
// Deliberately includes no LibTorch header, as runtime_test.cpp. On "cpu", or the
// device $SLICESCHED_SAMPLER_DEVICE names (scripts/gpu-check.sh: cuda:0).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"

using namespace slicesched::rt;

namespace {

// The device sampled on: "cpu", or $SLICESCHED_SAMPLER_DEVICE (scripts/gpu-check.sh runs these on "cuda:0").
const std::string& dev() {
  static const std::string d = [] {
    const char* e = std::getenv("SLICESCHED_SAMPLER_DEVICE");
    return std::string(e && *e ? e : "cpu");
  }();
  return d;
}

LlamaConfig tiny() {
  LlamaConfig c;
  c.name = "llama-tiny";
  c.vocab = 512;
  c.hidden = 64;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp = 128;
  c.groups = 1;
  c.dtype = "float32";
  c.seed = 7;
  return c;
}

struct Fixture {
  LlamaModel m{tiny()};
  Fixture() {
    m.load("embed", dev());
    m.load("layers0", dev());
    m.load("head", dev());
  }
  // The hidden state after the prompts' prefill (one plan, no cache).
  Value hidden(const StepPlan& plan) {
    Value kv;
    return m.layers(0, m.embed(plan, dev()), Value(), plan, dev(), kv);
  }
};

StepPlan plan_of(std::vector<std::shared_ptr<const Sampling>> s) {
  StepPlan p;
  const std::vector<std::vector<std::int64_t>> prompts = {{1, 2, 3, 4, 5}, {100, 7, 300, 42}, {9, 9, 9}};
  for (std::size_t i = 0; i < s.size(); ++i) p.seqs.push_back({i + 1, 0, prompts[i % prompts.size()], s[i]});
  return p;
}

std::shared_ptr<const Sampling> sampling(double temperature, std::uint64_t seed, std::int32_t logprobs = -1) {
  auto s = std::make_shared<Sampling>();
  s->temperature = temperature;
  s->seed = seed;
  s->logprobs = logprobs;
  return s;
}

// Row i's log_softmax in double, from the head's own logits.
std::vector<double> log_softmax_row(const std::vector<float>& logits, std::size_t i, std::size_t vocab) {
  const float* r = logits.data() + i * vocab;
  const double mx = *std::max_element(r, r + vocab);
  double sum = 0;
  for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(r[v] - mx);
  std::vector<double> out(vocab);
  for (std::size_t v = 0; v < vocab; ++v) out[v] = r[v] - mx - std::log(sum);
  return out;
}

}  // namespace

TEST_CASE("temperature 0, no sampling, top_k 1 and a vanishing temperature all give the argmax", "[torch][sampler]") {
  Fixture f;
  const StepPlan greedy = plan_of({nullptr, nullptr, nullptr});
  const Value h = f.hidden(greedy);
  const auto argmax = f.m.head(h, greedy, dev());
  CHECK(f.m.head_sampled(h, plan_of({sampling(0, 1), sampling(0, 2), nullptr}), dev()).tokens == argmax);
  auto k1 = std::make_shared<Sampling>(*sampling(1.5, 99));
  k1->top_k = 1;
  CHECK(f.m.head_sampled(h, plan_of({k1, k1, k1}), dev()).tokens == argmax);
  // A positive temperature too small for a float (logits / 1e-39 overflow
  // it) is greedy in the limit, not a NaN softmax that picks token 0.
  for (const double t : {1e-39, 1e-300, 5e-324})
    CHECK(f.m.head_sampled(h, plan_of({sampling(t, 1), sampling(t, 2), sampling(t, 3)}), dev()).tokens == argmax);
  // The logits are the argmax's.
  const auto logits = f.m.head_logits(h, greedy, dev());
  for (std::size_t i = 0; i < 3; ++i) {
    const float* r = logits.data() + i * 512;
    CHECK(std::max_element(r, r + 512) - r == argmax[i]);
  }
}

TEST_CASE("a seed gives the same tokens again, whatever the batch, other seeds others", "[torch][sampler]") {
  Fixture f;
  // Position varies the draw: sample each seed at several positions by
  // sampling a long run of hot draws over the same logits.
  const StepPlan p = plan_of({sampling(2.0, 7), sampling(2.0, 7), sampling(2.0, 7)});
  const Value h = f.hidden(p);
  const auto a = f.m.head_sampled(h, p, dev()).tokens;
  CHECK(f.m.head_sampled(h, p, dev()).tokens == a);
  // Alone, the first sequence draws what it drew in the batch.
  StepPlan alone;
  alone.seqs.push_back(p.seqs[0]);
  CHECK(f.m.head_sampled(f.hidden(alone), alone, dev()).tokens[0] == a[0]);
  // Over many seeds the draws are not all the argmax, and not all equal.
  const auto argmax = f.m.head(h, plan_of({nullptr, nullptr, nullptr}), dev());
  std::set<std::int64_t> seen;
  int differ = 0;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    const StepPlan q = plan_of({sampling(2.0, seed), sampling(2.0, seed), sampling(2.0, seed)});
    const auto t = f.m.head_sampled(h, q, dev()).tokens;
    seen.insert(t[0]);
    differ += t[0] != argmax[0];
  }
  CHECK(seen.size() > 3);
  CHECK(differ > 5);
}

TEST_CASE("top_p and min_p keep only the likely tokens", "[torch][sampler]") {
  Fixture f;
  const StepPlan p = plan_of({nullptr});
  const Value h = f.hidden(p);
  const auto lp = log_softmax_row(f.m.head_logits(h, p, dev()), 0, 512);
  std::vector<std::pair<double, std::int64_t>> ranked;
  for (std::size_t v = 0; v < lp.size(); ++v) ranked.push_back({lp[v], static_cast<std::int64_t>(v)});
  std::sort(ranked.rbegin(), ranked.rend());
  // top_p 0.5: the smallest set of most likely tokens reaching half the mass.
  std::set<std::int64_t> nucleus;
  double mass = 0;
  for (const auto& [l, v] : ranked) {
    if (mass >= 0.5) break;
    nucleus.insert(v);
    mass += std::exp(l);
  }
  // min_p 0.5: tokens at least half as likely as the top one.
  std::set<std::int64_t> above;
  for (const auto& [l, v] : ranked)
    if (std::exp(l) >= 0.5 * std::exp(ranked[0].first)) above.insert(v);
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    auto s = std::make_shared<Sampling>(*sampling(1.0, seed));
    s->top_p = 0.5;
    CHECK(nucleus.count(f.m.head_sampled(h, plan_of({s}), dev()).tokens[0]) == 1);
    auto m = std::make_shared<Sampling>(*sampling(1.0, seed));
    m->min_p = 0.5;
    CHECK(above.count(f.m.head_sampled(h, plan_of({m}), dev()).tokens[0]) == 1);
  }
}

TEST_CASE("penalties move the choice off tokens already seen, as a host reference does", "[torch][sampler]") {
  Fixture f;
  const StepPlan p = plan_of({nullptr});
  const Value h = f.hidden(p);
  const std::int64_t top = f.m.head(h, p, dev())[0];
  const auto logits = f.m.head_logits(h, p, dev());
  const std::vector<std::int64_t> history = {1, 2, 3, 4, 5, top, top};
  int moved = 0;
  for (int which = 0; which < 3; ++which)
    for (double strength : {0.5, 2.0}) {
      auto s = std::make_shared<Sampling>();
      s->history = history;
      s->prompt_tokens = 5;
      if (which == 0) s->presence_penalty = strength;
      if (which == 1) s->frequency_penalty = strength;
      if (which == 2) s->repetition_penalty = 1 + strength;
      // The reference: vLLM's rules on a host copy, then the argmax.
      std::vector<double> r(logits.begin(), logits.begin() + 512);
      if (which == 2)
        for (std::int64_t v : std::set<std::int64_t>(history.begin(), history.end()))
          r[v] = r[v] > 0 ? r[v] / s->repetition_penalty : r[v] * s->repetition_penalty;
      else
        r[top] -= which == 0 ? strength : 2 * strength;  // top was output twice; 1..5 are the prompt
      const auto want = std::max_element(r.begin(), r.end()) - r.begin();
      INFO("penalty " << which << " strength " << strength);
      const std::int64_t got = f.m.head_sampled(h, plan_of({s}), dev()).tokens[0];
      CHECK(got == want);
      moved += got != top;
    }
  CHECK(moved > 0);  // (some penalty was strong enough to matter)
}

TEST_CASE("log-probabilities are log_softmax of the head's logits", "[torch][sampler]") {
  Fixture f;
  const StepPlan p = plan_of({sampling(0, 0, 5), nullptr, sampling(1.0, 3, 0)});
  const Value h = f.hidden(p);
  const auto out = f.m.head_sampled(h, p, dev());
  const auto logits = f.m.head_logits(h, p, dev());
  REQUIRE(out.logprobs.size() == 3);
  for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
    const auto ref = log_softmax_row(logits, i, 512);
    CHECK(std::abs(out.logprobs[i].chosen - ref[static_cast<std::size_t>(out.tokens[i])]) < 1e-4);
    double total = 0;
    for (double l : ref) total += std::exp(l);
    CHECK(std::abs(total - 1) < 1e-9);
  }
  // The top 5, most likely first, each the reference's.
  const auto ref = log_softmax_row(logits, 0, 512);
  REQUIRE(out.logprobs[0].top.size() == 5);
  std::vector<double> sorted = ref;
  std::sort(sorted.rbegin(), sorted.rend());
  for (std::size_t j = 0; j < 5; ++j) {
    const auto [id, l] = out.logprobs[0].top[j];
    CHECK(std::abs(l - ref[static_cast<std::size_t>(id)]) < 1e-4);
    CHECK(std::abs(l - sorted[j]) < 1e-4);
  }
  // Greedy: the chosen token is the most likely one.
  CHECK(out.logprobs[0].top[0].first == out.tokens[0]);
  CHECK(out.logprobs[1].top.empty());
  CHECK(out.logprobs[2].top.empty());
}
