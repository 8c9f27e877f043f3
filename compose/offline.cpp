module;
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

module slicesched.compose.offline;
import slicesched.config.accelerators;

namespace slicesched {

Result<Truths> load_truths(const ExperimentConfig& cfg) {
  Truths truths;
  if (!cfg.ground_truth.present)
    return InvalidArgument(
        cfg.path + ": this command needs a [ground_truth] section (measured profiles or a calibration profile)");
  if (!cfg.ground_truth.calibrated.empty()) {
    auto cal = read_profile(cfg, "ground_truth.calibrated", cfg.ground_truth.calibrated);
    if (!cal.ok()) return cal.status();
    truths.calibrated = std::move(cal).value();
  } else if (cfg.ground_truth.needs_roofline() || cfg.ground_truth.transfers_csv.empty()) {
    TypedTruthOptions t;
    LayerProfileOptions lopt;
    lopt.hbm_bytes_per_s = cfg.ground_truth.hbm_bytes_per_s;
    lopt.groups = cfg.models.front().groups;
    lopt.layers_per_group = cfg.models.front().layers / cfg.models.front().groups;
    if (!cfg.ground_truth.layers_csv.empty()) {
      auto layers = LayerProfile::load(cfg.ground_truth.layers_csv, 1, lopt);
      if (!layers.ok())
        return Status(layers.status().code(), cfg.path + ": ground_truth.layers: " + layers.status().message());
      t.layers = std::move(layers).value();
      t.layers_type = cfg.ground_truth.layers_type;
    }
    if (!cfg.ground_truth.transfers_csv.empty()) {
      auto transfers = TransferProfile::load(cfg.ground_truth.transfers_csv);
      if (!transfers.ok())
        return Status(transfers.status().code(),
                      cfg.path + ": ground_truth.transfers: " + transfers.status().message());
      t.transfers = std::move(transfers).value();
    }
    if (cfg.ground_truth.needs_roofline()) {
      auto fit = load_roofline_fit(cfg.ground_truth.roofline_fit);
      if (!fit.ok())
        return Status(fit.status().code(), cfg.path + ": ground_truth.roofline: " + fit.status().message());
      t.fit = std::move(fit).value();
    }
    t.types = cfg.accelerator_types;
    truths.typed = std::move(t);
  } else {
    LayerProfileOptions lopt;
    lopt.hbm_bytes_per_s = cfg.ground_truth.hbm_bytes_per_s;
    // The profile's own shape costs templates no model registered; those
    // of the config are costed through their models (ProfileGroundTruth).
    lopt.groups = cfg.models.front().groups;
    lopt.layers_per_group = cfg.models.front().layers / cfg.models.front().groups;
    auto layers = LayerProfile::load(cfg.ground_truth.layers_csv, 1, lopt);
    if (!layers.ok())
      return Status(layers.status().code(), cfg.path + ": ground_truth.layers: " + layers.status().message());
    auto transfers = TransferProfile::load(cfg.ground_truth.transfers_csv);
    if (!transfers.ok())
      return Status(transfers.status().code(), cfg.path + ": ground_truth.transfers: " + transfers.status().message());
    truths.layers = std::move(layers).value();
    truths.transfers = std::move(transfers).value();
  }
  auto prior = read_prior(cfg);
  if (!prior.ok()) return prior.status();
  truths.prior = std::move(prior).value();
  return truths;
}

Result<std::unique_ptr<GroundTruth>> make_ground_truth(const ExperimentConfig& cfg, const Truths& truths,
                                                       const AcceleratorSet& accels, const ModelSet& models) {
  const GroundTruthConfig& g = cfg.ground_truth;
  if (truths.calibrated) {
    auto cal = std::make_unique<CalibratedGroundTruth>(*truths.calibrated, accels, cfg.seed, g.op_noise_cv,
                                                       g.transfer_noise_cv);
    if (Status s = cal->check_transfers(); !s.ok()) return Status(s.code(), g.calibrated + ": " + s.message());
    return std::unique_ptr<GroundTruth>(std::move(cal));
  }
  if (truths.typed) {
    auto typed =
        std::make_unique<TypedGroundTruth>(*truths.typed, accels, cfg.seed, g.op_noise_cv, g.transfer_noise_cv);
    if (Status s = typed->check(); !s.ok()) return Status(s.code(), cfg.path + ": " + s.message());
    typed->set_models(models);
    return std::unique_ptr<GroundTruth>(std::move(typed));
  }
  auto profile = std::make_unique<ProfileGroundTruth>(*truths.layers, *truths.transfers, cfg.seed, g.op_noise_cv,
                                                      g.transfer_noise_cv);
  profile->set_models(models);
  return std::unique_ptr<GroundTruth>(std::move(profile));
}

Status check_policies(const ExperimentConfig& cfg, const PluginRegistries& plugins,
                      const std::optional<std::string>& filter) {
  try {
    check_weights_fit(cfg);
    const auto cluster = make_cluster(cfg);
    for (const auto& p : cfg.policies) {
      if (filter && *filter != p.name) continue;
      if (auto made = build_plugins(cfg, p, plugins, *cluster); !made.ok()) return made.status();
    }
  } catch (const std::exception& e) {
    return InvalidArgument(e.what());
  }
  return Status::Ok();
}

Result<PolicyRun> run_offline(const ExperimentConfig& cfg, PolicyParts& parts, const Truths& truths,
                              const RecordOptions& opt) {
  auto truth = make_ground_truth(cfg, truths, *parts.accels, parts.models);
  if (!truth.ok()) return truth.status();
  EmulatedCluster cluster(parts.accels->size(), *truth.value(), *parts.plugins.arbiter);
  // The ground truth holds what each accelerator's HBM holds, no more.
  std::vector<std::int64_t> budgets, weights;
  for (AccelId a = 0; a < parts.accels->size(); ++a) {
    budgets.push_back(parts.accels->hbm_bytes(a));
    weights.push_back(parts.gmg->hbm(a).weights);
  }
  cluster.set_arbiter_name("transfer arbiter '" + parts.policy.arbiter.name + "'");
  if (Status s = cluster.set_memory(std::move(budgets), weights); !s.ok())
    return Status(s.code(), "policy '" + parts.policy.name + "': " + s.message());
  return run_recorded(cfg, parts, cluster, opt);
}

}  // namespace slicesched
