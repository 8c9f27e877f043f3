// One policy's run, assembled from a config the same way for every backend:
// the cluster, the model template and GMG, the estimator, the tenants, the
// partition sets, the placement policy, the transfer arbiter, the scheduler
// and the engine's options. `simulate`, `sweep` and `plan` run the parts on
// an emulated cluster (compose.offline), `serve` on live executors.
//
// Failures are Statuses with a one-line message naming the config or the
// policy; nothing here prints except the one warning build_policy gives for
// an estimator without a linear form.
module;
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

export module slicesched.compose.policy;
import slicesched.compose.guard;
import slicesched.core.calibration;
import slicesched.engine;
import slicesched.engine.union_partition_set;
import slicesched.config;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.core.status;
import slicesched.engine.scheduler;
import slicesched.engine.tenant;
import slicesched.models.model;
import slicesched.workload.trace;

export namespace slicesched {

// What a tenant's stream offers inside the measurement window (all its
// instances together).
struct OfferedLoad {
  std::string tenant;
  std::size_t requests = 0;
  std::int64_t input_tokens = 0, output_tokens = 0;
  double window_s = 0;  // duration_s, or the stream's span without a window
  // Per second of the window; NaN (no rate: summary.json's null) when
  // something arrived in a window of 0 s (one request, no duration_s).
  double requests_per_s() const { return rate(static_cast<double>(requests)); }
  double input_tokens_per_s() const { return rate(static_cast<double>(input_tokens)); }
  double output_tokens_per_s() const { return rate(static_cast<double>(output_tokens)); }

 private:
  double rate(double n) const {
    return window_s > 0 ? n / window_s : n == 0 ? 0 : std::numeric_limits<double>::quiet_NaN();
  }
};

// One plugin a policy runs: its extension point ("placement policy"),
// name and arguments as configured, the library it was loaded from (empty:
// built in), and what calls into it cost (its guard counts them).
struct PluginRecord {
  std::string kind, name;
  nlohmann::json args;
  std::string library;
  std::shared_ptr<PluginUse> use;
  std::optional<double> weight;  // a score stage's
};

// A policy's plugins, each created once from its configured name and
// arguments (the partition sets already bound to the cluster), each behind
// a guard (compose.guard).
struct PolicyPlugins {
  PluginPtr<Estimator> estimator;
  std::unique_ptr<UnionPartitionSet> partitions;
  PluginPtr<PlacementPolicy> placement;
  PluginPtr<TransferArbiter> arbiter;  // the backend's; what-if workers make their own
  std::vector<PluginRecord> records;   // every one of them, in config order
};

// What a policy's placement is called in messages: its plugin's name, or
// "stages" for a list of stages.
std::string placement_label(const PolicyConfig& policy);

// Creates `policy`'s plugins for `accels`. Fails with one line naming the
// policy and the plugin (unknown name, bad argument, a partition set that
// does not fit the cluster).
Result<PolicyPlugins> build_plugins(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                    const PluginRegistries& plugins, const AcceleratorSet& accels);

// Everything one policy's run needs, owned together. The scheduler and the
// engine options point into the parts themselves and into the registries
// they were built from, which must outlive them.
struct PolicyParts {
  PolicyConfig policy;  // a copy: the parts do not depend on the config's lifetime
  std::shared_ptr<AcceleratorSet> accels;
  std::shared_ptr<TemplateRegistry> templates;
  TemplateId tmpl = 0;            // the first model's
  std::vector<TemplateId> tmpls;  // per model of the config (cfg.models order)
  ModelSet models;                // the model behind each template
  std::unique_ptr<Gmg> gmg;
  PolicyPlugins plugins;
  // The estimator's linear form when it has one, and whether it started
  // from the [estimators] prior given.
  const EstimatorSet* linear = nullptr;
  bool prior_applied = false;
  std::vector<Tenant> tenants;             // one per tenant instance
  std::vector<bool> online;                // per tenant instance: SLO-bound
  std::vector<OfferedLoad> offered;        // per configured tenant, inside the window
  std::size_t requests_beyond_window = 0;  // arrivals after duration_s, not replayed
  std::size_t requests_truncated = 0;      // cut to their model's context window (on_overflow = "truncate")
  std::unique_ptr<Scheduler> scheduler;
  EngineOptions engine;  // the window's end on the run's clock, and the faults

  // Requests the tenants replay, in all.
  std::size_t requests() const;
};

struct BuildOptions {
  // The config's [estimators] prior, which a linear estimator starts from
  // (read_prior; null when the config has none).
  const CalibrationProfile* prior = nullptr;
  // Request arrivals (and the window's end) come this many times sooner
  // (live mode's [live] time_scale).
  double time_scale = 1.0;
  // What-if candidates on oneTBB workers (sweep runs whole policies in
  // parallel instead).
  bool parallel = true;
  // Simulate every candidate to the end, not only those that can still win
  // (SchedulerOptions::prune off): what --explain records. Same picks.
  // Only through explain_s simulated seconds (the traced ones, whose rounds
  // are recorded) when >= 0; after them rounds are cut short again.
  bool explain = false;
  double explain_s = -1;
  // When set, the requests tenant `t` replays instead of its configured
  // stream (a benchmark's fixed load). Called once per tenant.
  std::function<Trace(const TenantConfig& t)> stream = {};
};

// Whether every request of the tenants' traces fits its model's context
// window (or the model cuts it): what build_policy would find, without
// building anything (a sweep checks every point before running one).
// Synthetic streams are checked when the config loads.
Status check_traces_fit(const ExperimentConfig& cfg);

// Builds `policy` of `cfg`. Fails with one line naming the config or the
// policy. `plugins` must outlive the parts (the scheduler creates what-if
// arbiters from it).
Result<std::unique_ptr<PolicyParts>> build_policy(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                                  const PluginRegistries& plugins, const BuildOptions& opt = {});

// The policy a command runs: the one named `name`; without a name, the
// config's first (`first_by_default`) or its only one. The one lookup every
// command uses, so every command says the same:
//   "no policy named 'x' in cfg.toml (policies: a, b)"
//   "cfg.toml has 2 policies; pick one with --policy (a, b)"
Result<const PolicyConfig*> find_policy(const ExperimentConfig& cfg, const std::optional<std::string>& name,
                                        bool first_by_default = false);

// Reads the calibration profile `path` that key `key` of `cfg` names (e.g.
// "estimators.prior") and checks that its fits of the config's model were
// fitted to the template's features. Fails with one line naming the config,
// the key and the file.
Result<CalibrationProfile> read_profile(const ExperimentConfig& cfg, const std::string& key, const std::string& path);

// The config's [estimators] prior, read and checked (read_profile); none
// when it names none. Every command that builds policies reads it this way,
// before running anything.
Result<std::optional<CalibrationProfile>> read_prior(const ExperimentConfig& cfg);

// The built-in plugins and those of the config's plugin libraries, into
// `into`; fails naming a library that does not load.
Status load_plugins(const ExperimentConfig& cfg, PluginRegistries& into);

}  // namespace slicesched
