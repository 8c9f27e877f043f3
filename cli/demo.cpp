// `slicesched demo`: a small simulation with a readable timeline summary.
// (The offline capacity-planning mode will replace it as the main job.)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.core;
import slicesched.simulator.global;
import slicesched.simulator.llama;

namespace slicesched::cli {

namespace {

void check(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.message());
}

double to_ms(Nanos t) { return static_cast<double>(t) / 1e6; }

}  // namespace

int demo() {
  constexpr int kAccels = 8, kSteps = 15;
  constexpr std::int64_t kPrompt = 2048;
  auto toy = llama::h100_cluster(kAccels);
  check(toy.status());
  const auto& reg = toy->templates;
  const auto& accels = toy->accels;
  const TemplateId tmpl = toy->tmpl;
  Gmg& gmg = *toy->gmg;
  // Three requests, each pipelined over four GPUs: 2,048-token prefill and
  // 15 decode steps chained through per-group KV caches.
  const std::int64_t ops = 3 * (kSteps + 1) * 6;
  auto requests = llama::issue_pipelines(gmg, tmpl, ops, kPrompt, kSteps);
  check(requests.status());
  EstimatorSet est;
  check(seed_priors(est, *reg, *accels));
  SimulationResult r = simulate(gmg, est, {.record_transfers = true});

  std::printf("SliceScheduler demo: Llama-3-8B (4 groups of 8 layers) on %d simulated H100s\n", kAccels);
  std::printf("%lld requests x (prefill %lld tokens + %d decode steps) = %zu operators, %zu transfers\n\n",
              static_cast<long long>(requests.value()), static_cast<long long>(kPrompt), kSteps, r.ops.size(),
              r.transfers.size());
  std::printf("%-6s %5s %10s %8s %10s\n", "accel", "ops", "busy ms", "util", "peak GiB");
  std::vector<int> count(kAccels, 0);
  for (OpId op : r.ops) ++count[gmg.op(op).accel];
  for (AccelId a = 0; a < kAccels; ++a)
    std::printf("%-6s %5d %10.3f %7.1f%% %10.2f\n", accels->operator[](a).name.c_str(), count[a], to_ms(r.busy[a]),
                r.end > r.begin ? 100.0 * static_cast<double>(r.busy[a]) / static_cast<double>(r.end - r.begin) : 0.0,
                static_cast<double>(r.hbm_peak[a]) / (1ll << 30));

  // Per request: first token = the prefill's head, last = the last head.
  std::map<std::uint32_t, std::vector<Nanos>> heads;
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const OpRecord& op = gmg.op(r.ops[i]);
    if (op.tmpl_op == reg->get(tmpl).ops().size() - 1) heads[op.tenant].push_back(r.finish[i]);
  }
  std::printf("\n%-8s %12s %14s %12s\n", "request", "TTFT ms", "TPOT ms", "done ms");
  for (auto& [req, t] : heads) {
    std::sort(t.begin(), t.end());
    double tpot = t.size() > 1 ? to_ms(t.back() - t.front()) / static_cast<double>(t.size() - 1) : 0.0;
    std::printf("%-8u %12.3f %14.3f %12.3f\n", req, to_ms(t.front()), tpot, to_ms(t.back()));
  }
  std::printf("\nsimulated span %.3f ms; every timestamp above is predicted from the estimators' priors\n",
              to_ms(r.end - r.begin));
  return 0;
}

}  // namespace slicesched::cli
