module;
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

module slicesched.cli.policy;
import slicesched.plugins.builtin;
import slicesched.plugins.loader;

namespace slicesched::cli {

CalibrationProfile read_profile(const ExperimentConfig& cfg, const std::string& key, const std::string& path) {
  auto profile = read_calibration(path);
  if (!profile.ok()) fail(cfg.path + ": " + key + ": " + profile.status().message());
  TemplateRegistry templates;
  check(templates.add(llama::make_template(cfg.model.name, model_shape(cfg.model))).status());
  if (Status s = check_features(profile.value(), templates); !s.ok())
    fail(cfg.path + ": " + key + ": " + path + ": " + s.message());
  return std::move(profile).value();
}

std::optional<CalibrationProfile> read_prior(const ExperimentConfig& cfg) {
  if (cfg.estimator_prior.empty()) return std::nullopt;
  return read_profile(cfg, "estimators.prior", cfg.estimator_prior);
}

void load_plugins(const ExperimentConfig& cfg, PluginRegistries& into) {
  check(plugins::register_builtins(into));
  for (const auto& path : cfg.plugin_paths) check(load_plugin_library(path, into));
}

std::unique_ptr<PolicyParts> build_policy(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                          const PluginRegistries& plugins, const CalibrationProfile* prior,
                                          double time_scale, bool parallel) {
  auto p = std::make_unique<PolicyParts>();
  p->accels = make_cluster(cfg);
  p->templates = std::make_shared<TemplateRegistry>();
  p->tmpl = p->templates->add(llama::make_template(cfg.model.name, model_shape(cfg.model))).value();
  p->gmg = std::make_unique<Gmg>(p->templates, p->accels);
  for (AccelId a = 0; a < p->accels->size(); ++a) check(p->gmg->place_weights(p->tmpl, a));

  // The estimator predicts for the what-if and learns from the backend's
  // feedback; the linear built-in starts from the template and link-class
  // priors (and [estimators] prior), a model without a linear form from
  // whatever it knows itself.
  auto estimator = plugins.estimator.create(policy.estimator.name, policy.estimator.args);
  if (!estimator.ok()) fail("policy '" + policy.name + "': " + estimator.status().message());
  p->estimator = std::move(estimator).value();
  p->linear = p->estimator->linear();
  if (p->linear) {
    check(p->estimator->seed_linear([&](EstimatorSet& set) {
      if (Status s = seed_priors(set, *p->templates, *p->accels); !s.ok()) return s;
      return prior ? apply_as_prior(*prior, set, *p->templates, *p->accels) : Status::Ok();
    }));
    p->prior_applied = prior != nullptr;
  } else {
    std::fprintf(stderr,
                 "slicesched: policy '%s': estimator '%s' has no linear form: it starts without the priors from "
                 "the model, the link classes and [estimators] prior\n",
                 policy.name.c_str(), policy.estimator.name.c_str());
  }

  // Only what the measurement window offers is replayed: a request that
  // arrives after it could neither finish nor be fairly scored.
  const double window = cfg.duration_s > 0 ? cfg.duration_s : -1;
  for (const std::string& name : policy.tenants) {
    const auto at = std::find_if(cfg.tenants.begin(), cfg.tenants.end(), [&](auto& t) { return t.name == name; });
    const TenantConfig& tc = *at;
    // Seeded by the tenant's place in the config, not in the policy, so
    // every policy that runs a tenant gets the same requests.
    Trace stream = make_stream(tc, cfg.seed + static_cast<std::uint64_t>(at - cfg.tenants.begin()), window);
    OfferedLoad offered{tc.name};
    const double span = window > 0 ? window : stream.window_s;
    // A synthetic stream was cut at the window and counted what it left out;
    // a trace is read whole and counted here.
    p->requests_beyond_window += stream.beyond_cut;
    for (const Request& r : stream.requests) {
      if (window > 0 && r.arrival_s >= window) {
        ++p->requests_beyond_window;
        continue;
      }
      ++offered.requests;
      offered.input_tokens += r.input_tokens;
      offered.output_tokens += r.output_tokens;
    }
    offered.window_s = span;
    p->offered.push_back(offered);
    // Instances deal the one stream round-robin.
    const auto instances = static_cast<std::size_t>(instances_of(policy, tc));
    for (std::size_t k = 0; k < instances; ++k) {
      TenantSpec spec;
      spec.name = instances == 1 ? tc.name : tc.name + "#" + std::to_string(k);
      spec.priority = tc.priority;
      spec.online = tc.online;
      spec.requests.window_s = stream.window_s;
      for (std::size_t i = k; i < stream.requests.size(); i += instances) {
        Request r = stream.requests[i];
        if (window > 0 && r.arrival_s >= window) break;
        r.arrival_s /= time_scale;
        spec.requests.requests.push_back(r);
      }
      spec.token_budget = tc.token_budget;
      spec.max_seqs = tc.max_seqs;
      spec.kv_budget_tokens = tc.kv_budget_tokens;
      spec.lanes = tc.lanes;
      p->tenants.emplace_back(static_cast<std::uint32_t>(p->tenants.size()), std::move(spec), p->tmpl);
      p->online.push_back(tc.online);
    }
  }

  std::vector<PluginPtr<PartitionSet>> sets;
  for (const auto& choice : policy.partition_sets) {
    auto set = plugins.partition.create(choice.name, tenant_ids(cfg, policy, choice.args));
    if (!set.ok()) fail("policy '" + policy.name + "': " + set.status().message());
    sets.push_back(std::move(set).value());
  }
  p->partitions = std::make_unique<UnionPartitionSet>(std::move(sets));
  if (Status s = p->partitions->bind(*p->accels); !s.ok()) fail("policy '" + policy.name + "': " + s.message());
  auto placement = plugins.placement.create(policy.placement.name, policy.placement.args);
  if (!placement.ok()) fail("policy '" + policy.name + "': " + placement.status().message());
  p->placement = std::move(placement).value();
  auto arbiter = plugins.arbiter.create(policy.arbiter.name, policy.arbiter.args);
  if (!arbiter.ok()) fail("policy '" + policy.name + "': " + arbiter.status().message());
  p->arbiter = std::move(arbiter).value();

  SchedulerOptions sopt;
  sopt.issued_budget = policy.issued_budget;
  sopt.batch_cap = policy.batch_cap;
  sopt.parallel = parallel;
  sopt.scoped = policy.scoped_what_if;
  sopt.horizon = policy.horizon_s < 0 ? -1 : static_cast<Nanos>(policy.horizon_s * 1e9);
  sopt.arbiter = [&plugins, &choice = policy.arbiter] { return plugins.arbiter.create(choice.name, choice.args); };
  p->scheduler = std::make_unique<Scheduler>(*p->placement, *p->partitions, *p->estimator, sopt);
  return p;
}

ProgressFn progress_printer(const std::string& name) {
  const bool tty = stderr_is_tty();
  return [tty, name](Nanos now, std::size_t done, std::size_t total) {
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    if (tty)
      std::fprintf(stderr, "\r  %-16s [%-40s] %3d%%  %zu/%zu requests  t=%.0f s ", name.c_str(),
                   std::string(static_cast<std::size_t>(pct * 40 / 100), '#').c_str(), pct, done, total,
                   static_cast<double>(now) / 1e9);
    else if (pct % 25 == 0)
      std::fprintf(stderr, "  %s: %d%% (%zu/%zu requests, t=%.0f s)\n", name.c_str(), pct, done, total,
                   static_cast<double>(now) / 1e9);
  };
}

PolicyRun collect_run(const ExperimentConfig& cfg, const PolicyConfig& policy, PolicyParts& parts,
                      const EngineResult& result, const std::vector<RunRecord>& log, double wall_s,
                      const std::string& origin) {
  PolicyRun run;
  run.name = policy.name;
  run.wall_s = wall_s;
  run.metrics = compute_metrics(policy.name, result, log, parts.accels->size(), parts.online, cfg.duration_s);
  run.requests = result.requests;
  run.log = log;
  for (const auto& t : parts.tenants) run.tenant_names.push_back(t.spec().name);
  for (AccelId a = 0; a < parts.accels->size(); ++a) run.accel_names.push_back((*parts.accels)[a].name);
  run.scheduling = result.scheduling;
  run.lost_ops = result.lost_ops;
  run.rebuilt_sequences = result.rebuilt_sequences;
  run.offered = parts.offered;
  run.requests_beyond_window = parts.requests_beyond_window;
  run.arbiter = policy.arbiter;
  run.estimator = policy.estimator;
  if (parts.prior_applied) run.estimator_prior = cfg.estimator_prior;
  if (parts.linear) {
    for (const auto& row : parts.linear->report()) run.estimators.push_back(row);
    run.calibration = snapshot(*parts.linear, *parts.templates, *parts.accels, origin);
  }
  return run;
}

}  // namespace slicesched::cli
