// A config opened for running, the same way by every command: read (with
// --set overrides), its policy found, its [estimators] prior read, and the
// built-in and configured plugins loaded. Each step fails with its one line
// before anything is built or run.
module;
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

export module slicesched.compose.experiment;
import slicesched.core.status;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.estimator;
import slicesched.core.plugin;
import slicesched.core.calibration;
import slicesched.config;
import slicesched.compose.policy;

export namespace slicesched {

struct OpenOptions {
  std::vector<ConfigOverride> overrides;  // --set KEY=VALUE, applied as the config is read
  std::optional<std::uint64_t> seed;      // overrides the config's seed
  // Find the one policy the command runs (find_policy with `policy` and
  // `first_by_default`); off: the command runs several.
  bool one_policy = false;
  std::optional<std::string> policy;
  bool first_by_default = false;
  // Read the config's [estimators] prior (off where load_truths reads it).
  bool prior = true;
};

// Owned together: the policy points into the config, and the parts built
// from it point into the plugins, which must outlive them.
struct Experiment {
  ExperimentConfig cfg;
  const PolicyConfig* policy = nullptr;  // with OpenOptions::one_policy
  std::optional<CalibrationProfile> prior;
  PluginRegistries plugins;

  // The prior as BuildOptions::prior takes it (null: none).
  const CalibrationProfile* prior_or_null() const { return prior ? &*prior : nullptr; }
};

// Opens `path`: load_config, then find_policy (when one policy), read_prior,
// load_plugins, in that order.
Result<std::unique_ptr<Experiment>> open_experiment(const std::string& path, const OpenOptions& opt = {});

}  // namespace slicesched
