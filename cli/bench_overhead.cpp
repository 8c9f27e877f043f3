// `slicesched bench overhead CONFIG`: the executor's overhead (the paper's
// Table 1). N prefills of one prompt token each (one output token) of the
// config's model on one accelerator, two ways:
//   direct     a plain loop calling the LibTorch model: per request embed ->
//              layers0 .. layers{G-1} -> head on the device (each layer group
//              takes the previous request's KV cache over, as the graph does);
//   scheduled  the same requests, all arriving at t = 0, through SliceScheduler:
//              a tenant (token_budget 1, max_seqs 1: one prefill per
//              iteration, so the same operators run), the config's policy's
//              placement, estimator and arbiter on a one-accelerator cluster,
//              the engine, LiveCluster and LlamaRunner.
// A warm-up of each first, then `rounds` alternating runs; the best of each
// counts. overhead_pct = (scheduled - direct) / direct * 100. The breakdown
// says where the time goes: operator time measured inside the executor's
// worker vs the gaps between operators (engine, scheduler, queues).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "executor/torch/runtime.h"

import slicesched.core.shape;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.estimator;
import slicesched.core.backend;
import slicesched.core.calibration;
import slicesched.core.plugin;
import slicesched.config;
import slicesched.compose.setup;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.compose.live;
import slicesched.executor.live_cluster;
import slicesched.executor.llama_runner;
import slicesched.cli.fail;
import slicesched.core.graph;
import slicesched.engine.metrics;
import slicesched.engine.observer;
import slicesched.engine.tenant;
import slicesched.workload.trace;

namespace slicesched::cli {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
// CPU seconds of the whole process (every thread) so far.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Prompts {
  std::vector<std::vector<std::int64_t>> ids;  // one token each
};

struct DirectRun {
  double wall_s = 0, cpu_s = 0;
  std::vector<std::int64_t> tokens;
};

DirectRun run_direct(rt::LlamaModel& model, const std::string& device, const Prompts& p, int n) {
  const int groups = model.config().groups;
  std::vector<rt::Value> kv(static_cast<std::size_t>(groups));
  DirectRun r;
  r.tokens.reserve(static_cast<std::size_t>(n));
  rt::LlamaModel::synchronize(device);
  const auto t0 = Clock::now();
  const double c0 = cpu_now();
  for (int i = 0; i < n; ++i) {
    rt::StepPlan plan;
    plan.seqs.push_back({static_cast<std::uint64_t>(i), 0, p.ids[static_cast<std::size_t>(i)]});
    rt::Value h = model.embed(plan, device);
    for (int g = 0; g < groups; ++g)
      h = model.layers(g, h, kv[static_cast<std::size_t>(g)], plan, device, kv[static_cast<std::size_t>(g)]);
    r.tokens.push_back(model.head(h, plan, device)[0]);
  }
  rt::LlamaModel::synchronize(device);
  r.wall_s = since(t0);
  r.cpu_s = cpu_now() - c0;
  return r;
}

struct ScheduledRun {
  double wall_s = 0, cpu_s = 0, busy_s = 0;
  std::size_t ops = 0, rounds = 0;
  std::vector<std::int64_t> tokens;
};

ScheduledRun run_scheduled(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                           const CalibrationProfile* prior, rt::LlamaModel& model, const Prompts& p, int n) {
  // Exactly n one-token prefills, all at t = 0 (the bench tenant's
  // token_budget and max_seqs of 1 make it one per iteration).
  BuildOptions bopt{.prior = prior};
  bopt.stream = [n](const TenantConfig&) {
    Trace t;
    t.requests.assign(static_cast<std::size_t>(n), Request{0.0, 1, 1});
    return t;
  };
  auto parts = value_or_fail_in(cfg.path, build_policy(cfg, policy, plugins, bopt));
  parts->tenants[0].set_prompts(
      [&p](std::uint64_t request, std::int64_t) { return p.ids[static_cast<std::size_t>(request)]; });

  const auto& accel = cfg.accelerators[0];
  LlamaRunner runner(model, {accel.device}, transport(cfg.live));
  (void)value_or_fail_in(cfg.path, runner.start_devices());
  LiveCluster cluster({accel.hbm_bytes}, runner, *parts->plugins.arbiter);
  auto weights = runner.load_weights();
  if (!weights.ok()) fail_in(cfg.path, weights.status().message());
  check_in(cfg.path, cluster.reserve_resident(0, weights.value()[0]));
  IntervalRecorder ran(1);  // the operators the executor ran, and when
  EngineObserver* observers[] = {&ran};
  const auto t0 = Clock::now();
  const double c0 = cpu_now();
  auto result = run(*parts, cluster, observers);
  ScheduledRun r;
  r.wall_s = since(t0);
  r.cpu_s = cpu_now() - c0;
  if (!result.ok()) fail_in(cfg.path, result.status().message());
  if (!result->complete) fail_in(cfg.path, "policy '" + policy.name + "': the run did not finish every request");
  for (const RequestRecord& q : result->requests) {
    if (!q.error.empty()) fail_in(cfg.path, "policy '" + policy.name + "': a request failed: " + q.error);
    r.tokens.push_back(q.tokens.empty() ? -1 : q.tokens[0]);
  }
  r.ops = ran.intervals()[0].size();
  for (const auto& [start, finish] : ran.intervals()[0]) r.busy_s += static_cast<double>(finish - start) / 1e9;
  r.rounds = result->scheduling.rounds;
  return r;
}

}  // namespace

int bench_overhead(const BenchOverheadOptions& opt) {
  const ExperimentConfig full = value_or_fail(load_config(opt.config));
  {
    // What fails below is said of the config (check_in, fail_in: one line, printed by main).
    // One accelerator (the first, or --accelerator), one tenant, the policy's plugins.
    ExperimentConfig cfg = full;
    std::size_t ai = 0;
    if (opt.accelerator) {
      ai = full.accelerators.size();
      for (std::size_t i = 0; i < full.accelerators.size(); ++i)
        if (full.accelerators[i].name == *opt.accelerator) ai = i;
      if (ai == full.accelerators.size())
        fail_in(full.path, "cluster: no accelerator named '" + *opt.accelerator + "'");
    }
    if (full.accelerators.empty()) fail_in(full.path, "cluster: no accelerators");
    cfg.accelerators = {full.accelerators[ai]};
    cfg.links.clear();
    check_in(full.path, check_devices(cfg));
    check_in(full.path, check_weights_fit(cfg));
    const PolicyConfig* base = value_or_fail_in(full.path, find_policy(full, opt.policy, /*first_by_default=*/true));
    PolicyConfig policy = *base;
    policy.tenants = {"bench"};
    policy.partition_sets = {PluginChoice{"singles"}};
    TenantConfig tenant;
    tenant.name = "bench";
    tenant.stream.kind = StreamConfig::Kind::kConstant;
    tenant.stream.rate_per_s = 1, tenant.stream.duration_s = 1, tenant.stream.input_tokens = 1,
    tenant.stream.output_tokens = 1;
    tenant.token_budget = 1;  // one one-token prefill per iteration: the direct loop's operators
    tenant.max_seqs = 1;
    tenant.lanes = opt.lanes;
    cfg.tenants = {tenant};
    cfg.duration_s = -1;

    PluginRegistries plugins;
    check_in(full.path, load_plugins(cfg, plugins));
    const std::optional<CalibrationProfile> prior = value_or_fail_in(full.path, read_prior(cfg));

    const rt::LlamaConfig mc = value_or_fail_in(full.path, runtime_model(cfg.models.front()));
    rt::validate(mc);
    rt::set_cpu_threads(cfg.live.threads);
    rt::LlamaModel model(mc);
    const std::string device = cfg.accelerators[0].device;
    const int n = opt.requests;
    Prompts prompts;
    for (int i = 0; i < n; ++i)
      prompts.ids.push_back(rt::synthetic_prompt(mc, cfg.seed, static_cast<std::uint64_t>(i), 1));
    const GraphTemplate tmpl = value_or_fail_in(full.path, build_model(cfg.models.front()))->make_template();
    for (const auto& op : tmpl.ops()) model.load(op.name, device);

    const bool progress = !opt.json;
    if (progress)
      std::fprintf(stderr, "bench overhead: %d one-token prefills of %s on %s (%s), %d round(s) each way\n", n,
                   cfg.models.front().name.c_str(), cfg.accelerators[0].name.c_str(), device.c_str(), opt.rounds);
    const int warm = std::min(n, 50);
    (void)run_direct(model, device, prompts, warm);
    (void)run_scheduled(cfg, policy, plugins, prior ? &*prior : nullptr, model, prompts, warm);

    std::vector<double> direct_s, scheduled_s;
    DirectRun best_direct;
    ScheduledRun best_sched;
    for (int round = 0; round < opt.rounds; ++round) {
      DirectRun d = run_direct(model, device, prompts, n);
      ScheduledRun s = run_scheduled(cfg, policy, plugins, prior ? &*prior : nullptr, model, prompts, n);
      if (progress)
        std::fprintf(stderr, "  round %d: direct %.4f s, scheduled %.4f s\n", round + 1, d.wall_s, s.wall_s);
      direct_s.push_back(d.wall_s);
      scheduled_s.push_back(s.wall_s);
      if (round == 0 || d.wall_s < best_direct.wall_s) best_direct = std::move(d);
      if (round == 0 || s.wall_s < best_sched.wall_s) best_sched = std::move(s);
    }
    const double direct = best_direct.wall_s, scheduled = best_sched.wall_s;
    const double overhead = (scheduled - direct) / direct * 100.0;
    const std::size_t ops = static_cast<std::size_t>(n) * static_cast<std::size_t>(mc.groups + 2);
    const bool match = best_direct.tokens == best_sched.tokens;
    const double direct_op_us = direct / static_cast<double>(ops) * 1e6;
    const double busy_op_us = best_sched.busy_s / static_cast<double>(std::max<std::size_t>(1, best_sched.ops)) * 1e6;
    const double gap_op_us =
        (scheduled - best_sched.busy_s) / static_cast<double>(std::max<std::size_t>(1, best_sched.ops)) * 1e6;
    if (opt.json) {
      nlohmann::json j;
      j["direct_s"] = direct;
      j["scheduled_s"] = scheduled;
      j["overhead_pct"] = overhead;
      j["requests"] = n;
      j["ops"] = ops;
      j["scheduled_ops"] = best_sched.ops;
      j["model"] = cfg.models.front().name;
      j["device"] = device;
      j["lanes"] = opt.lanes;
      j["direct_runs_s"] = direct_s;
      j["scheduled_runs_s"] = scheduled_s;
      j["direct_per_op_us"] = direct_op_us;
      j["scheduled_busy_per_op_us"] = busy_op_us;
      j["scheduled_gap_per_op_us"] = gap_op_us;
      j["scheduling_rounds"] = best_sched.rounds;
      j["direct_cpu_s"] = best_direct.cpu_s;
      j["scheduled_cpu_s"] = best_sched.cpu_s;
      j["tokens_match"] = match;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("requests      %d one-token prefills of %s on %s (%zu operators)\n", n,
                  cfg.models.front().name.c_str(), device.c_str(), ops);
      std::printf("direct_s      %.6f  (best of %d; %.2f us per operator)\n", direct, opt.rounds, direct_op_us);
      std::printf("scheduled_s   %.6f  (best of %d; %zu operators, %zu scheduling rounds, %d lane(s))\n", scheduled,
                  opt.rounds, best_sched.ops, best_sched.rounds, opt.lanes);
      std::printf("overhead_pct  %.2f\n", overhead);
      std::printf(
          "breakdown     per operator: %.2f us computing in the executor's worker, %.2f us between "
          "operators (engine, scheduler, queues); direct %.2f us\n",
          busy_op_us, gap_op_us, direct_op_us);
      std::printf("cpu_s         direct %.6f, scheduled %.6f (process CPU time, every thread)\n", best_direct.cpu_s,
                  best_sched.cpu_s);
      std::printf("tokens        %s\n", match ? "identical to the direct loop" : "DIFFER from the direct loop");
    }
    if (best_sched.ops != ops)
      std::fprintf(stderr, "slicesched: bench overhead: the scheduled run ran %zu operators, the direct loop %zu\n",
                   best_sched.ops, ops);
  }
  return 0;
}

}  // namespace slicesched::cli
