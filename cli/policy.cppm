// One policy's run, assembled from a config the same way for every backend:
// the cluster, the model template and GMG, the estimator, the tenants, the
// partition sets, the placement policy, the transfer arbiter and the
// scheduler. `simulate` adds an emulated cluster, `serve` live executors.
// Failures throw std::runtime_error with a one-line message naming the
// policy.
module;
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

export module slicesched.cli.policy;
export import slicesched.cli.setup;
export import slicesched.cli.report;
export import slicesched.core.calibration;
export import slicesched.engine;
export import slicesched.engine.union_partition_set;

export namespace slicesched::cli {

struct PolicyParts {
  std::shared_ptr<AcceleratorSet> accels;
  std::shared_ptr<TemplateRegistry> templates;
  TemplateId tmpl = 0;
  std::unique_ptr<Gmg> gmg;
  PluginPtr<Estimator> estimator;
  const EstimatorSet* linear = nullptr;  // the estimator's linear form, when it has one
  bool prior_applied = false;            // the linear form started from the `prior` given
  std::vector<Tenant> tenants;           // one per tenant instance
  std::vector<bool> online;
  std::vector<OfferedLoad> offered;        // per configured tenant, inside the window
  std::size_t requests_beyond_window = 0;  // arrivals after duration_s, not replayed
  std::unique_ptr<UnionPartitionSet> partitions;
  PluginPtr<PlacementPolicy> placement;
  PluginPtr<TransferArbiter> arbiter;  // the backend's; what-if workers make their own
  std::unique_ptr<Scheduler> scheduler;
};

// Reads the calibration profile `path` that key `key` of `cfg` names (e.g.
// "estimators.prior") and checks that its fits of the config's model were
// fitted to the template's features. Fails with one line naming the config,
// the key and the file.
CalibrationProfile read_profile(const ExperimentConfig& cfg, const std::string& key, const std::string& path);

// The config's [estimators] prior, read and checked (read_profile); none
// when it names none. Every command that builds policies reads it this way,
// before running anything.
std::optional<CalibrationProfile> read_prior(const ExperimentConfig& cfg);

// The built-in plugins and those of the config's plugin libraries, into
// `into`; a library that fails to load throws (one line naming it).
void load_plugins(const ExperimentConfig& cfg, PluginRegistries& into);

// `prior`: the config's [estimators] prior, which the linear estimator
// starts from (read_prior; null when the config has none). `time_scale`: request arrivals happen this many times
// sooner. `parallel`: what-if candidates on oneTBB workers (sweep runs
// whole policies in parallel instead). `plugins` must outlive the parts (the
// scheduler creates arbiters from it).
std::unique_ptr<PolicyParts> build_policy(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                          const PluginRegistries& plugins, const CalibrationProfile* prior,
                                          double time_scale = 1.0, bool parallel = true);

// A progress bar on a terminal, a line every 25 % otherwise.
ProgressFn progress_printer(const std::string& name);

// The PolicyRun every command reports, from a finished engine run.
PolicyRun collect_run(const ExperimentConfig& cfg, const PolicyConfig& policy, PolicyParts& parts,
                      const EngineResult& result, const std::vector<RunRecord>& log, double wall_s,
                      const std::string& origin);

}  // namespace slicesched::cli
