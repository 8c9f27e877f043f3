// `slicesched bench scheduler`: the latency of one scheduling round (batch
// collection, candidates, parallel what-if, choice, issue) on a cluster of N
// accelerators whose queues already hold about `horizon` operators each.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.engine;
import slicesched.plugins.builtin;
import slicesched.simulator.bench_cluster;
import slicesched.cli.fail;
import slicesched.core.estimator;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.core.priors;
import slicesched.core.status;
import slicesched.engine.scheduler;

namespace slicesched::cli {

int bench_scheduler(const BenchSchedulerOptions& opt) {
  // (each queued operator is a few hundred bytes: 100,000 x 1,000 took 23 GB)
  if (static_cast<std::int64_t>(opt.horizon) * opt.accelerators > 10'000'000)
    check(InvalidArgument("--horizon x --accelerators: at most 10,000,000 queued operators, got " +
                          std::to_string(static_cast<std::int64_t>(opt.horizon) * opt.accelerators)));
  auto toy = bench::h100_cluster(opt.accelerators);
  check(toy.status());
  const auto& templates = toy->templates;
  const auto& accels = toy->accels;
  const TemplateId tmpl = toy->tmpl;
  Gmg& base = *toy->gmg;
  // Queues already hold `horizon` operators per accelerator (decode steps).
  check(
      bench::issue_pipelines(base, tmpl, static_cast<std::int64_t>(opt.horizon) * opt.accelerators, 512, 15).status());
  // The default plugins of a policy: online-linear estimators (seeded with
  // the priors) and the default transfer rule.
  PluginRegistries plugins;
  check(plugins::register_builtins(plugins));
  auto estimator = plugins.estimator.create("online-linear", nullptr);
  check(estimator.status());
  Estimator& est = *estimator.value();
  check(est.seed_linear([&](EstimatorSet& set) { return seed_priors(set, *templates, *accels); }));

  // `candidates` groups of accelerators, spread over the cluster; or,
  // cluster-wide, every pair then every quad in id order.
  nlohmann::json groups = nlohmann::json::array();
  if (opt.cluster_wide) {
    for (int size : {2, 4})
      for (int a = 0; a + size <= opt.accelerators; a += size) {
        nlohmann::json g = nlohmann::json::array();
        for (int k = 0; k < size; ++k) g.push_back(a + k);
        groups.push_back(g);
      }
  } else {
    const int per = std::max(1, opt.accelerators / opt.candidates);
    for (int c = 0; c < opt.candidates; ++c) {
      nlohmann::json g = nlohmann::json::array();
      for (int k = 0; k < std::min(per, 4); ++k) g.push_back((c * per + k) % opt.accelerators);
      groups.push_back(g);
    }
  }
  const int candidates = static_cast<int>(groups.size());
  auto partitions = plugins.partition.create("explicit", {{"groups", groups}});
  if (!partitions.ok()) fail(partitions.status().message());
  check(partitions.value()->bind(*accels));
  auto policy = plugins.placement.create("simulation-guided", nullptr);
  if (!policy.ok()) fail(policy.status().message());

  std::vector<double> ms;
  std::size_t simulated_ops = 0;
  for (int round = 0; round < opt.rounds + 10; ++round) {
    Gmg gmg = base.clone();
    auto inst = gmg.instantiate({tmpl, {{"tokens", 1}, {"sequences", 1}, {"context", 0}, {"kv_prev", 0}}, {}, 5, 0});
    check(inst.status());
    Scheduler scheduler(*policy.value(), *partitions.value(), est,
                        {.issued_budget = 1u << 30, .batch_cap = inst->ops.size(), .horizon = -1});
    const auto t0 = std::chrono::steady_clock::now();
    auto issued = scheduler.schedule(gmg, 0);
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    check(issued.status());
    if (issued->size() != inst->ops.size()) throw std::runtime_error("bench scheduler: the batch was not placed");
    if (round >= 10) ms.push_back(t);  // the first rounds warm the thread pool and simulators
    simulated_ops = base.issued_count() + inst->ops.size();
  }
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<std::size_t>(p / 100 * ms.size()))]; };
  if (opt.json) {
    nlohmann::json j{{"accelerators", opt.accelerators},
                     {"candidates", candidates},
                     {"horizon", opt.horizon},
                     {"ops_per_simulation", simulated_ops},
                     {"rounds", ms.size()},
                     {"p50_ms", pct(50)},
                     {"p99_ms", pct(99)},
                     {"max_ms", ms.back()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "Scheduling round: %d accelerators, %d candidates, horizon %d ops per accelerator (%zu ops per what-if)\n",
        opt.accelerators, candidates, opt.horizon, simulated_ops);
    std::printf("%zu rounds: p50 %.3f ms, p99 %.3f ms, max %.3f ms (target p99 <= 1 ms)\n", ms.size(), pct(50), pct(99),
                ms.back());
  }
  return 0;
}

}  // namespace slicesched::cli
