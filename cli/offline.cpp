module;
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

module slicesched.cli.offline;
import slicesched.engine;
import slicesched.simulator.emulated;

namespace slicesched::cli {

Truths load_truths(const ExperimentConfig& cfg) {
  Truths truths;
  if (!cfg.ground_truth.present)
    fail(cfg.path + ": this command needs a [ground_truth] section (measured profiles or a calibration profile)");
  if (!cfg.ground_truth.calibrated.empty()) {
    truths.calibrated = read_profile(cfg, "ground_truth.calibrated", cfg.ground_truth.calibrated);
  } else {
    LayerProfileOptions lopt;
    lopt.hbm_bytes_per_s = cfg.ground_truth.hbm_bytes_per_s;
    lopt.groups = cfg.model.groups;
    lopt.layers_per_group = cfg.model.layers / cfg.model.groups;
    auto layers = LayerProfile::load(cfg.ground_truth.layers_csv, 1, lopt);
    if (!layers.ok()) fail(cfg.path + ": ground_truth.layers: " + layers.status().message());
    auto transfers = TransferProfile::load(cfg.ground_truth.transfers_csv);
    if (!transfers.ok()) fail(cfg.path + ": ground_truth.transfers: " + transfers.status().message());
    truths.layers = std::move(layers).value();
    truths.transfers = std::move(transfers).value();
  }
  truths.prior = read_prior(cfg);
  return truths;
}

void check_policies(const ExperimentConfig& cfg, const PluginRegistries& plugins,
                    const std::optional<std::string>& filter) {
  check_weights_fit(cfg);
  const auto cluster = make_cluster(cfg);
  for (const auto& p : cfg.policies) {
    if (filter && *filter != p.name) continue;
    for (const auto& choice : p.partition_sets) {
      auto set = plugins.partition.create(choice.name, tenant_ids(cfg, p, choice.args));
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
}

PolicyRun run_offline(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                      const Truths& truths, const OfflineRunOptions& opt) {
  auto parts = build_policy(cfg, policy, plugins, truths.prior ? &*truths.prior : nullptr, 1.0, opt.parallel);
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
  eopt.stop = opt.stop;
  for (const FaultConfig& f : cfg.faults) {  // (names were checked when the config was read)
    const auto a = static_cast<AccelId>(parts->accels->find(f.accelerator));
    eopt.faults.push_back({static_cast<Nanos>(f.at_s * 1e9), a, true});
    if (f.duration_s > 0) eopt.faults.push_back({static_cast<Nanos>((f.at_s + f.duration_s) * 1e9), a, false});
  }
  std::stable_sort(eopt.faults.begin(), eopt.faults.end(),
                   [](const FaultEvent& x, const FaultEvent& y) { return x.at < y.at; });
  Engine engine(*parts->gmg, parts->tenants, *parts->scheduler, *parts->estimator, cluster, eopt);

  const auto t0 = std::chrono::steady_clock::now();
  const bool own_line = opt.progress && !opt.on_progress;
  // A failure names the policy and its placement plugin, whether the
  // engine reports it or a plugin throws through it.
  const std::string who = "policy '" + policy.name + "' (placement '" + policy.placement.name + "')";
  auto run = [&]() -> Result<EngineResult> {
    try {
      return engine.run(opt.on_progress ? opt.on_progress : own_line ? progress_printer(policy.name) : ProgressFn{});
    } catch (const std::exception& e) {
      fail(who + ": " + e.what());
    }
  };
  auto result = run();
  if (own_line && stderr_is_tty()) std::fprintf(stderr, "\n");
  if (!result.ok()) fail(who + ": " + result.status().message());
  if (result->interrupted) throw Interrupted();
  PolicyRun done = collect_run(cfg, policy, *parts, result.value(), cluster.log(),
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                               "simulate " + cfg.path + ", policy " + policy.name);
  if (!opt.keep_log) {
    done.log = {};
    done.requests = {};
  }
  return done;
}

}  // namespace slicesched::cli
