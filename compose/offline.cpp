module;
#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

module slicesched.compose.offline;
import slicesched.config.accelerators;
import slicesched.compose.setup;
import slicesched.engine.observer;
import slicesched.engine.tenant;
import slicesched.core.ids;
import slicesched.core.gmg;

namespace slicesched {

Result<Truths> load_truths(const ExperimentConfig& cfg) {
  Truths truths;
  if (!cfg.ground_truth.present)
    return InvalidArgument(
        cfg.path +
        ": this command needs a [ground_truth] section (measured profiles, a calibration profile, or "
        "an empty [ground_truth] for the roofline from each type's datasheet)");
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
      t.off_profile_models = cfg.ground_truth.off_profile_models;
      for (const std::string& path : cfg.ground_truth.layers_tp_csvs) {
        auto ranks = LayerProfile::load(path, 0, lopt);
        const std::string where = cfg.path + ": ground_truth.layers_tp: ";
        if (!ranks.ok()) return Status(ranks.status().code(), where + ranks.status().message());
        const int n = ranks.value().tp_size();
        if (n < 2)
          return InvalidArgument(where + path +
                                 ": its rows have tp_size 1, one GPU's (give that profile as ground_truth.layers)");
        for (const auto& [size, other] : t.layers_tp)
          if (size == n)
            return InvalidArgument(where + path + ": a second profile of tp_size " + std::to_string(n) +
                                   " (one file a group size)");
        t.layers_tp.emplace_back(n, std::move(ranks).value());
      }
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
      // A type fitted on its own kernels plays that fit, unless the config
      // named one fit for every type.
      if (!cfg.ground_truth.roofline_given)
        for (const AcceleratorType& type : cfg.accelerator_types) {
          if (type.roofline_fit.empty()) continue;
          auto own = load_roofline_fit(type.roofline_fit);
          if (!own.ok())
            return Status(own.status().code(), type.source + ": accelerator.roofline: " + own.status().message());
          t.type_fits.emplace_back(type.name, std::move(own).value());
        }
    }
    t.types = cfg.accelerator_types;
    // Tensor-parallel groups: their all-reduces, over tp_link or measured.
    for (const AcceleratorConfig& a : cfg.accelerators) {
      t.tp_links.push_back(a.tp > 1 ? find_link_class(cfg, a.tp_link) : -1);
      if (!plays_all_reduce_profile(cfg, a) ||
          std::any_of(t.all_reduce.begin(), t.all_reduce.end(), [&](const auto& e) { return e.first == a.tp; }))
        continue;
      auto ar = TransferProfile::load_all_reduce(cfg.ground_truth.all_reduce_csv, a.tp);
      if (!ar.ok())
        return Status(ar.status().code(), a.tp_where + ": ground_truth.all_reduce: " + ar.status().message());
      t.all_reduce.emplace_back(a.tp, std::move(ar).value());
    }
    // A profile no group plays is still read: a broken file is an error
    // before a sweep reaches the point that needs it.
    if (!cfg.ground_truth.all_reduce_csv.empty() && t.all_reduce.empty())
      if (auto ar = TransferProfile::load_all_reduce(cfg.ground_truth.all_reduce_csv, 0); !ar.ok())
        return Status(ar.status().code(), cfg.path + ": ground_truth.all_reduce: " + ar.status().message());
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

std::vector<TruthPlayed> truth_played(const ExperimentConfig& cfg, const Truths& truths) {
  namespace fs = std::filesystem;
  auto file = [](const std::string& path) { return fs::path(path).filename().string(); };
  // The roofline fit a type plays: its own table's, unless the config names one.
  auto roofline_file = [&](const std::string& type) {
    const AcceleratorType* sheet = find_type(cfg.accelerator_types, type);
    const bool own = !cfg.ground_truth.roofline_given && sheet && !sheet->roofline_fit.empty();
    return file(own ? sheet->roofline_fit : cfg.ground_truth.roofline_fit);
  };
  std::vector<TruthPlayed> out;
  for (const auto& a : cfg.accelerators) {
    const std::string type = a.tp > 1 ? a.type + "/tp" + std::to_string(a.tp) : a.type;
    if (std::any_of(out.begin(), out.end(), [&](const TruthPlayed& p) { return p.type == type; })) continue;
    TruthPlayed p;
    p.type = type;
    p.datasheet = canonical_type(cfg.accelerator_types, a.type);
    p.tp = a.tp;
    if (a.tp > 1)
      p.all_reduce = plays_all_reduce_profile(cfg, a) ? file(cfg.ground_truth.all_reduce_csv)
                                                      : "ring over link class '" + a.tp_link + "'";
    if (truths.calibrated) {
      p.truth = "calibrated";
      p.source = file(cfg.ground_truth.calibrated);
    } else if (!truths.typed || played_profile(*truths.typed, a.type, a.tp)) {
      p.truth = "profile";
      p.source = file(cfg.ground_truth.layers_csv);
      // (load_truths keeps one entry a file, in the config's order)
      if (a.tp > 1 && truths.typed)
        for (std::size_t i = 0; i < truths.typed->layers_tp.size(); ++i)
          if (truths.typed->layers_tp[i].first == a.tp) p.source = file(cfg.ground_truth.layers_tp_csvs.at(i));
      p.roofline_models = cfg.ground_truth.off_profile_models;
      if (!p.roofline_models.empty() && truths.typed) {
        p.roofline_source = roofline_file(a.type);
        p.fit = fit_for(*truths.typed, a.type);
        // No model of the config is the one the profile measured: every
        // operator plays the roofline, whatever the type.
        if (p.roofline_models.size() >= cfg.models.size()) {
          p.truth = "roofline";
          p.profile_unplayed = std::exchange(p.source, std::exchange(p.roofline_source, ""));
          p.roofline_models.clear();
        }
      }
    } else {
      p.truth = "roofline";
      p.source = roofline_file(a.type);
      p.fit = fit_for(*truths.typed, a.type);
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string roofline_fallback_line(const std::vector<TruthPlayed>& played, const std::string& profile_given) {
  std::string types, source, per_type, profile;
  bool one_source = true;
  for (const auto& p : played) {
    // (A type the profile measured plays the roofline when no model is the
    // one it measured: profile_scope_lines says so.)
    if (p.truth == "roofline" && p.tp == 1 && p.profile_unplayed.empty()) {
      types += (types.empty() ? "" : ", ") + p.type + (p.datasheet != p.type ? " (" + p.datasheet + ")" : "");
      one_source = one_source && (source.empty() || source == p.source);
      source = p.source;
      per_type += (per_type.empty() ? "" : ", ") + p.source + " for " + p.type;
    } else if (p.truth == "profile" && p.tp == 1) {
      profile = p.source;  // (a tp group's profile is not what a tp-1 type skipped)
    }
  }
  if (types.empty()) return "";
  if (profile.empty()) profile = profile_given;
  return "ground truth: " + types + " play" + (types.find(", ") == std::string::npos ? "s" : "") +
         " the roofline (datasheet peaks, efficiencies from " + (one_source ? source : per_type) + "), " +
         (profile.empty() ? std::string("no measured profile given")
                          : "not the measured profile " + profile + " (ground_truth.layers_type names another type)");
}

std::vector<std::string> tp_group_lines(const std::vector<TruthPlayed>& played) {
  std::vector<std::string> out;
  for (const auto& p : played) {
    if (p.tp < 2) continue;
    const std::string group =
        "ground truth: " + p.type + " (a tensor-parallel group of " + std::to_string(p.tp) + " " + p.datasheet + ")";
    if (p.truth == "roofline")
      out.push_back(group + " plays the roofline at one rank's shapes (efficiencies from " + p.source +
                    "), its all-reduces " + p.all_reduce);
    else if (p.truth == "profile") {
      std::string others;  // models of another shape: the roofline, there too
      for (const auto& m : p.roofline_models) others += (others.empty() ? "'" : ", '") + m + "'";
      out.push_back(group + " plays " + p.source + " (one rank's layers, measured)" +
                    (others.empty() ? "" : " for the model it measured, and the roofline for " + others) +
                    ", its all-reduces " + p.all_reduce);
    }
  }
  return out;
}

std::vector<std::string> ground_truth_lines(const ExperimentConfig& cfg, const std::vector<TruthPlayed>& played) {
  std::vector<std::string> out;
  const std::string profile = std::filesystem::path(cfg.ground_truth.layers_csv).filename().string();
  if (std::string line = roofline_fallback_line(played, profile); !line.empty()) out.push_back(std::move(line));
  for (std::string& line : profile_scope_lines(cfg)) out.push_back(std::move(line));
  for (std::string& line : tp_group_lines(played)) out.push_back(std::move(line));
  // A tensor-parallel table no group plays was given for a reason: say so
  // rather than read it for nothing.
  for (const std::string& path : cfg.ground_truth.layers_tp_csvs) {
    const std::string name = std::filesystem::path(path).filename().string();
    if (std::none_of(played.begin(), played.end(),
                     [&](const TruthPlayed& p) { return p.truth == "profile" && p.source == name; }))
      out.push_back("ground truth: " + name +
                    " (ground_truth.layers_tp) is played by no group: the cluster has no tensor-parallel group of "
                    "the size it measured, of " +
                    (cfg.ground_truth.layers_type.empty() ? std::string("the profile's type")
                                                          : "type '" + cfg.ground_truth.layers_type + "'"));
  }
  return out;
}

std::vector<std::string> profile_scope_lines(const ExperimentConfig& cfg) {
  const GroundTruthConfig& g = cfg.ground_truth;
  std::vector<std::string> out;
  if (g.layers_csv.empty() || !g.calibrated.empty()) return out;
  const std::string profile = std::filesystem::path(g.layers_csv).filename().string();
  auto quoted = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
    return s;
  };
  if (!g.off_profile_models.empty()) {
    const std::string fit = std::filesystem::path(g.roofline_fit).filename().string();
    out.push_back("ground truth: model" + std::string(g.off_profile_models.size() > 1 ? "s " : " ") +
                  quoted(g.off_profile_models) + (g.off_profile_models.size() > 1 ? " play" : " plays") +
                  " the roofline on every type (efficiencies from " + fit + " or the type's own fit), not " + profile +
                  (g.layers_model.empty()
                       ? ", which times Llama's block (gate_proj, post_layernorm): another block form"
                       : ", which measured '" + g.layers_model + "' (ground_truth.layers_model): another shape"));
  }
  std::vector<std::string> models, types;
  if (g.layers_model.empty())
    for (const auto& m : cfg.models)
      if (std::find(g.off_profile_models.begin(), g.off_profile_models.end(), m.name) == g.off_profile_models.end())
        models.push_back(m.name);
  if (g.layers_type.empty())
    for (const auto& a : cfg.accelerators)
      if (a.tp == 1 && std::find(types.begin(), types.end(), a.type) == types.end()) types.push_back(a.type);
  if (!models.empty() || !types.empty()) {
    std::string what, keys;
    if (!models.empty()) {
      what = "model" + std::string(models.size() > 1 ? "s " : " ") + quoted(models);
      keys = "layers_model";
    }
    if (!types.empty()) {
      what += (what.empty() ? "" : " on ") + std::string("type") + (types.size() > 1 ? "s " : " ") + quoted(types);
      keys += (keys.empty() ? "" : " and ") + std::string("layers_type");
    }
    out.push_back("ground truth: " + profile + " is taken to measure " + what + " (set ground_truth." + keys +
                  " to what it measured: any other then plays the roofline)");
  }
  return out;
}

Status check_policies(const ExperimentConfig& cfg, const PluginRegistries& plugins,
                      const std::optional<std::string>& filter) {
  if (Status s = check_weights_fit(cfg); !s.ok()) return s;
  const auto cluster = make_cluster(cfg);
  if (!cluster.ok()) return cluster.status();
  for (const auto& p : cfg.policies) {
    if (filter && *filter != p.name) continue;
    if (auto made = build_plugins(cfg, p, plugins, *cluster.value()); !made.ok()) return made.status();
  }
  return Status::Ok();
}

std::vector<TypeFixedCosts> fixed_costs_per_type(const ExperimentConfig& cfg, const Truths& truths,
                                                 const AcceleratorSet& accels) {
  std::vector<TypeFixedCosts> out(accels.type_count());
  for (AccelTypeId t = 0; t < accels.type_count(); ++t) {
    // Type names and aliases resolve as everywhere ("H100" finds "H100-SXM").
    const CalibrationProfile::FixedCost* measured = nullptr;
    if (truths.calibrated)
      for (const auto& f : truths.calibrated->fixed_costs)
        if (same_type(cfg.accelerator_types, f.type, accels.type_name(t))) measured = &f;
    out[t].iteration_s = cfg.ground_truth.iteration_overhead_s.value_or(measured ? measured->iteration_s : 0.0);
    out[t].sequence_s = cfg.ground_truth.sequence_overhead_s.value_or(measured ? measured->sequence_s : 0.0);
    out[t].request_s = cfg.ground_truth.request_overhead_s.value_or(measured ? measured->request_s : 0.0);
  }
  return out;
}

namespace {

// Another ground truth plus the engine's fixed costs, per iteration, per
// sequence of the iteration and once per request, charged to the operator
// that samples (Model::sampler(): it ends the iteration) at the costs of its
// accelerator's type, and summed so a run can report them apart. A
// request's cost is charged to the first iteration of it that runs (an
// iteration preempted before it started charges nothing); the observer half
// learns from the engine's kIteration events which requests each iteration
// holds, and asks for them only when some type has a cost per request.
class FixedCostTruth final : public GroundTruth, public EngineObserver {
 public:
  using Costs = TypeFixedCosts;
  // `per_type[t]`: the costs on accelerator type t.
  FixedCostTruth(GroundTruth& inner, const ModelSet& models, const AcceleratorSet& accels, std::vector<Costs> per_type)
      : inner_(inner), models_(models), accels_(accels), per_type_(std::move(per_type)) {
    per_request_ = std::any_of(per_type_.begin(), per_type_.end(), [](const Costs& c) { return c.request_s > 0; });
  }
  Result<double> op_seconds(const Gmg& gmg, OpId op) override {
    auto s = inner_.op_seconds(gmg, op);
    if (!s.ok()) return s;
    const OpRecord& r = gmg.op(op);
    const Model* m = models_.of(r.tmpl);
    if (!m || r.tmpl_op != m->sampler()) return s;
    const Costs& c = per_type_[accels_.type(r.accel)];
    const std::int64_t seqs = m->dims_of(gmg.templates().get(r.tmpl), gmg.dims(op)).sequences;
    ++iterations_;
    sequence_iterations_ += static_cast<std::size_t>(std::max<std::int64_t>(0, seqs));
    iteration_seconds_ += c.iteration_s;
    sequence_seconds_ += c.sequence_s * static_cast<double>(seqs);
    double extra = c.iteration_s + c.sequence_s * static_cast<double>(seqs);
    if (auto it = first_.find(r.instance); it != first_.end()) {
      std::size_t fresh = 0;
      for (std::uint64_t key : it->second) fresh += charged_.insert(key).second;
      first_.erase(it);
      requests_ += fresh;
      request_seconds_ += c.request_s * static_cast<double>(fresh);
      extra += c.request_s * static_cast<double>(fresh);
    }
    return s.value() + extra;
  }
  double transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) override {
    return inner_.transfer_seconds(from, to, bytes);
  }
  void on_request(const RequestEvent& e, const RequestRecord& /*record*/) override {
    // Only when some type charges requests: another observer may have asked
    // for iteration events, and the count must not depend on who watches.
    if (!per_request_ || e.kind != RequestEvent::Kind::kIteration) return;
    const std::uint64_t key = (static_cast<std::uint64_t>(e.tenant) << 32) | e.request;
    if (!charged_.contains(key)) first_[e.instance].push_back(key);
  }
  bool iterations() const override { return per_request_; }
  void report(PolicyRun::FixedCosts& out) const {
    out.iterations = iterations_;
    out.sequence_iterations = sequence_iterations_;
    out.requests = requests_;
    out.iteration_seconds = iteration_seconds_;
    out.sequence_seconds = sequence_seconds_;
    out.request_seconds = request_seconds_;
    out.seconds = iteration_seconds_ + sequence_seconds_ + request_seconds_;
  }

 private:
  GroundTruth& inner_;
  const ModelSet& models_;
  const AcceleratorSet& accels_;
  std::vector<Costs> per_type_;
  bool per_request_ = false;
  // Requests (tenant << 32 | request) already charged, and per iteration
  // not yet run the requests it holds that were not.
  std::unordered_set<std::uint64_t> charged_;
  std::unordered_map<InstanceId, std::vector<std::uint64_t>> first_;
  std::size_t iterations_ = 0, sequence_iterations_ = 0, requests_ = 0;
  double iteration_seconds_ = 0, sequence_seconds_ = 0, request_seconds_ = 0;
};

}  // namespace

Result<PolicyRun> run_offline(const ExperimentConfig& cfg, PolicyParts& parts, const Truths& truths,
                              const RecordOptions& opt) {
  auto truth = make_ground_truth(cfg, truths, *parts.accels, parts.models);
  if (!truth.ok()) return truth.status();
  FixedCostTruth fixed(*truth.value(), parts.models, *parts.accels, fixed_costs_per_type(cfg, truths, *parts.accels));
  EmulatedCluster cluster(parts.accels->size(), fixed, *parts.plugins.arbiter);
  // The ground truth holds what each accelerator's HBM holds, no more.
  std::vector<std::int64_t> budgets, weights;
  for (AccelId a = 0; a < parts.accels->size(); ++a) {
    budgets.push_back(parts.accels->hbm_bytes(a));
    weights.push_back(parts.gmg->hbm(a).weights);
  }
  cluster.set_arbiter_name("transfer arbiter '" + parts.policy.arbiter.name + "'");
  if (Status s = cluster.set_memory(std::move(budgets), weights); !s.ok())
    return Status(s.code(), "policy '" + parts.policy.name + "': " + s.message());
  EngineObserver* const watch[] = {&fixed};
  auto run = run_recorded(cfg, parts, cluster, opt, watch);
  if (!run.ok()) return run;
  run->fixed_costs.per_iteration_s = cfg.ground_truth.iteration_overhead_s;
  run->fixed_costs.per_sequence_s = cfg.ground_truth.sequence_overhead_s;
  run->fixed_costs.per_request_s = cfg.ground_truth.request_overhead_s;
  fixed.report(run->fixed_costs);
  return run;
}

}  // namespace slicesched
