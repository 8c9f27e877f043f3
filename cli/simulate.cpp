// `slicesched simulate CONFIG`: offline capacity planning. Every policy of
// the config runs on the same engine against the emulated cluster; the
// result is a comparison table, summary.json, CSVs, Chrome traces and plots.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.core;
import slicesched.config;
import slicesched.cli.report;
import slicesched.cli.setup;
import slicesched.cli.policy;
import slicesched.engine;
import slicesched.engine.metrics;
import slicesched.engine.union_partition_set;
import slicesched.simulator.emulated;
import slicesched.simulator.llama;
import slicesched.workload.trace;

namespace slicesched::cli {

// The ground truth a run plays: measured profiles, or a calibration profile.
struct Truths {
  std::optional<LayerProfile> layers;
  std::optional<TransferProfile> transfers;
  std::optional<CalibrationProfile> calibrated;
  std::optional<CalibrationProfile> prior;
};

PolicyRun run_policy(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                     const Truths& truths) {
  auto parts = build_policy(cfg, policy, plugins, truths.prior ? &*truths.prior : nullptr);
  std::unique_ptr<GroundTruth> truth;
  if (truths.calibrated) {
    auto cal = std::make_unique<CalibratedGroundTruth>(
        *truths.calibrated, *parts->accels, cfg.seed, cfg.ground_truth.op_noise_cv, cfg.ground_truth.transfer_noise_cv);
    if (Status s = cal->check_transfers(); !s.ok()) fail(cfg.ground_truth.calibrated + ": " + s.message());
    truth = std::move(cal);
  } else {
    truth = std::make_unique<ProfileGroundTruth>(*truths.layers, *truths.transfers, cfg.seed,
                                                 cfg.ground_truth.op_noise_cv, cfg.ground_truth.transfer_noise_cv);
  }
  EmulatedCluster cluster(parts->accels->size(), *truth, *parts->arbiter);
  EngineOptions eopt;
  eopt.stop_at = cfg.duration_s > 0 ? static_cast<Nanos>(cfg.duration_s * 1e9) : -1;
  Engine engine(*parts->gmg, parts->tenants, *parts->scheduler, *parts->estimator, cluster, eopt);

  auto t0 = std::chrono::steady_clock::now();
  auto result = engine.run(progress_printer(policy.name));
  if (stderr_is_tty()) std::fprintf(stderr, "\n");
  if (!result.ok()) fail("policy '" + policy.name + "': " + result.status().message());
  return collect_run(cfg, policy, *parts, result.value(), cluster.log(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     "simulate " + cfg.path + ", policy " + policy.name);
}

int simulate(const SimulateOptions& opt) {
  auto cfg = load_config(opt.config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "slicesched: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (opt.seed) cfg->seed = *opt.seed;
  if (opt.skip_bad_lines)
    for (auto& t : cfg->tenants) t.stream.trace.skip_bad_lines = true;
  try {
    PluginRegistries plugins;
    load_plugins(cfg.value(), plugins);
    Truths truths;
    if (!cfg->ground_truth.present)
      fail(cfg->path + ": simulate needs a [ground_truth] section (measured profiles or a calibration profile)");
    if (!cfg->ground_truth.calibrated.empty()) {
      truths.calibrated = read_profile(cfg.value(), "ground_truth.calibrated", cfg->ground_truth.calibrated);
    } else {
      LayerProfileOptions lopt;
      lopt.hbm_bytes_per_s = cfg->ground_truth.hbm_bytes_per_s;
      lopt.groups = cfg->model.groups;
      lopt.layers_per_group = cfg->model.layers / cfg->model.groups;
      auto layers = LayerProfile::load(cfg->ground_truth.layers_csv, 1, lopt);
      if (!layers.ok()) fail(layers.status().message());
      auto transfers = TransferProfile::load(cfg->ground_truth.transfers_csv);
      if (!transfers.ok()) fail(transfers.status().message());
      truths.layers = std::move(layers).value();
      truths.transfers = std::move(transfers).value();
    }
    truths.prior = read_prior(cfg.value());

    check_weights_fit(cfg.value());
    // Every policy's plugins are created once up front, so a bad name or
    // argument stops the run before anything is simulated.
    const auto cluster = make_cluster(cfg.value());
    for (const auto& p : cfg->policies) {
      if (opt.policy && *opt.policy != p.name) continue;
      for (const auto& choice : p.partition_sets) {
        auto set = plugins.partition.create(choice.name, tenant_ids(p, choice.args));
        if (!set.ok()) fail("policy '" + p.name + "': " + set.status().message());
        if (Status s = set.value()->bind(*cluster); !s.ok()) fail("policy '" + p.name + "': " + s.message());
      }
      auto placement = plugins.placement.create(p.placement.name, p.placement.args);
      if (!placement.ok()) fail("policy '" + p.name + "': " + placement.status().message());
      auto arbiter = plugins.arbiter.create(p.arbiter.name, p.arbiter.args);
      if (!arbiter.ok()) fail("policy '" + p.name + "': " + arbiter.status().message());
      auto estimator = plugins.estimator.create(p.estimator.name, p.estimator.args);
      if (!estimator.ok()) fail("policy '" + p.name + "': " + estimator.status().message());
    }

    std::vector<PolicyRun> runs;
    const auto t0 = std::chrono::steady_clock::now();
    bool matched = false;
    for (const auto& p : cfg->policies) {
      if (opt.policy && *opt.policy != p.name) continue;
      matched = true;
      runs.push_back(run_policy(cfg.value(), p, plugins, truths));
    }
    if (!matched) {
      std::string names;
      for (const auto& p : cfg->policies) names += (names.empty() ? "" : ", ") + p.name;
      fail("no policy named '" + *opt.policy + "' in " + opt.config + " (policies: " + names + ")");
    }
    report(cfg.value(), runs, opt);
    std::printf("%zu polic%s simulated in %.1f s wall\n", runs.size(), runs.size() == 1 ? "y" : "ies",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slicesched: %s\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace slicesched::cli
