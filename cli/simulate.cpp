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
import slicesched.engine;
import slicesched.engine.metrics;
import slicesched.engine.union_partition_set;
import slicesched.plugins.builtin;
import slicesched.plugins.loader;
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
  auto accels = make_cluster(cfg);
  auto templates = std::make_shared<TemplateRegistry>();
  const TemplateId tmpl = templates->add(llama::make_template(cfg.model.name, model_shape(cfg.model))).value();
  Gmg gmg(templates, accels);
  for (AccelId a = 0; a < accels->size(); ++a) check(gmg.place_weights(tmpl, a));

  // The estimator predicts for the what-if and learns from the cluster's
  // feedback; the linear built-in starts from the template and link-class
  // priors (and [estimators] prior), a model without a linear form from
  // whatever it knows itself.
  auto estimator = plugins.estimator.create(policy.estimator.name, policy.estimator.args);
  if (!estimator.ok()) fail("policy '" + policy.name + "': " + estimator.status().message());
  Estimator& est = *estimator.value();
  EstimatorSet* linear = est.linear();
  if (linear) {
    check(seed_priors(*linear, *templates, *accels));
    if (truths.prior) check(apply_as_prior(*truths.prior, *linear, *templates, *accels));
  } else {
    std::fprintf(stderr,
                 "slicesched: policy '%s': estimator '%s' has no linear form: it starts without the priors from "
                 "the model, the link classes and [estimators] prior\n",
                 policy.name.c_str(), policy.estimator.name.c_str());
  }

  std::vector<Tenant> tenants;
  std::vector<bool> online;
  for (const std::string& name : policy.tenants) {
    const auto& tc = *std::find_if(cfg.tenants.begin(), cfg.tenants.end(), [&](auto& t) { return t.name == name; });
    TenantSpec spec;
    spec.name = tc.name;
    spec.priority = tc.priority;
    spec.online = tc.online;
    spec.requests = make_stream(tc, cfg.seed + tenants.size());
    spec.token_budget = tc.token_budget;
    spec.max_seqs = tc.max_seqs;
    spec.kv_budget_tokens = tc.kv_budget_tokens;
    spec.lanes = tc.lanes;
    tenants.emplace_back(static_cast<std::uint32_t>(tenants.size()), std::move(spec), tmpl);
    online.push_back(tc.online);
  }

  std::vector<PluginPtr<PartitionSet>> sets;
  for (const auto& choice : policy.partition_sets) {
    auto set = plugins.partition.create(choice.name, tenant_ids(policy, choice.args));
    if (!set.ok()) fail("policy '" + policy.name + "': " + set.status().message());
    sets.push_back(std::move(set).value());
  }
  UnionPartitionSet partitions(std::move(sets));
  if (Status s = partitions.bind(*accels); !s.ok()) fail("policy '" + policy.name + "': " + s.message());
  auto placement = plugins.placement.create(policy.placement.name, policy.placement.args);
  if (!placement.ok()) fail("policy '" + policy.name + "': " + placement.status().message());

  // One arbiter for the emulated cluster; the what-if workers make their
  // own from the same name and arguments.
  auto arbiter = plugins.arbiter.create(policy.arbiter.name, policy.arbiter.args);
  if (!arbiter.ok()) fail("policy '" + policy.name + "': " + arbiter.status().message());

  SchedulerOptions sopt;
  sopt.issued_budget = policy.issued_budget;
  sopt.batch_cap = policy.batch_cap;
  sopt.horizon = policy.horizon_s < 0 ? -1 : static_cast<Nanos>(policy.horizon_s * 1e9);
  sopt.arbiter = [&plugins, &choice = policy.arbiter] { return plugins.arbiter.create(choice.name, choice.args); };
  Scheduler scheduler(*placement.value(), partitions, est, sopt);
  std::unique_ptr<GroundTruth> truth;
  if (truths.calibrated) {
    auto cal = std::make_unique<CalibratedGroundTruth>(
        *truths.calibrated, *accels, cfg.seed, cfg.ground_truth.op_noise_cv, cfg.ground_truth.transfer_noise_cv);
    if (Status s = cal->check_transfers(); !s.ok()) fail(cfg.ground_truth.calibrated + ": " + s.message());
    truth = std::move(cal);
  } else {
    truth = std::make_unique<ProfileGroundTruth>(*truths.layers, *truths.transfers, cfg.seed,
                                                 cfg.ground_truth.op_noise_cv, cfg.ground_truth.transfer_noise_cv);
  }
  EmulatedCluster cluster(accels->size(), *truth, *arbiter.value());
  EngineOptions eopt;
  eopt.stop_at = cfg.duration_s > 0 ? static_cast<Nanos>(cfg.duration_s * 1e9) : -1;
  Engine engine(gmg, tenants, scheduler, est, cluster, eopt);

  const bool tty = stderr_is_tty();
  auto t0 = std::chrono::steady_clock::now();
  auto progress = [&](Nanos now, std::size_t done, std::size_t total) {
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    if (tty)
      std::fprintf(stderr, "\r  %-16s [%-40s] %3d%%  %zu/%zu requests  t=%.0f s ", policy.name.c_str(),
                   std::string(static_cast<std::size_t>(pct * 40 / 100), '#').c_str(), pct, done, total,
                   static_cast<double>(now) / 1e9);
    else if (pct % 25 == 0)
      std::fprintf(stderr, "  %s: %d%% (%zu/%zu requests, t=%.0f s)\n", policy.name.c_str(), pct, done, total,
                   static_cast<double>(now) / 1e9);
  };
  auto result = engine.run(progress);
  if (tty) std::fprintf(stderr, "\n");
  if (!result.ok()) fail("policy '" + policy.name + "': " + result.status().message());

  PolicyRun run;
  run.name = policy.name;
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.metrics = compute_metrics(policy.name, result.value(), cluster.log(), accels->size(), online, cfg.duration_s);
  run.requests = result->requests;
  run.log = cluster.log();
  for (const auto& t : tenants) run.tenant_names.push_back(t.spec().name);
  for (AccelId a = 0; a < accels->size(); ++a) run.accel_names.push_back((*accels)[a].name);
  run.scheduling = result->scheduling;
  run.estimator = policy.estimator.name;
  if (linear) {
    for (const auto& row : linear->report()) run.estimators.push_back(row);
    run.calibration = snapshot(*linear, *templates, *accels, "simulate " + cfg.path + ", policy " + policy.name);
  }
  return run;
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
    check(plugins::register_builtins(plugins));
    for (const auto& path : cfg->plugin_paths) check(load_plugin_library(path, plugins));
    Truths truths;
    if (!cfg->ground_truth.present)
      fail(cfg->path + ": simulate needs a [ground_truth] section (measured profiles or a calibration profile)");
    if (!cfg->ground_truth.calibrated.empty()) {
      auto cal = read_calibration(cfg->ground_truth.calibrated);
      if (!cal.ok()) fail(cal.status().message());
      truths.calibrated = std::move(cal).value();
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
    if (!cfg->estimator_prior.empty()) {
      auto prior = read_calibration(cfg->estimator_prior);
      if (!prior.ok()) fail(prior.status().message());
      truths.prior = std::move(prior).value();
    }

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
