// Offline runs: one policy of a config on the emulated cluster, playing a
// ground truth (measured profiles or a calibration profile). Used by
// `simulate`, `sweep` and `plan`. Failures throw std::runtime_error with a
// one-line message naming the config or the policy.
module;
#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>

export module slicesched.cli.offline;
export import slicesched.cli.policy;
import slicesched.simulator.profile;

export namespace slicesched::cli {

// The ground truth a run plays, and the estimators' prior. Read once per
// config; shared read-only by runs on any thread.
struct Truths {
  std::optional<LayerProfile> layers;
  std::optional<TransferProfile> transfers;
  std::optional<CalibrationProfile> calibrated;
  std::optional<CalibrationProfile> prior;
};

// Reads what `cfg`'s [ground_truth] and [estimators] name; fails when the
// config has no [ground_truth].
Truths load_truths(const ExperimentConfig& cfg);

// Creates (and drops) the plugins of every policy `filter` admits (all when
// empty), so a bad name or argument stops a command before anything runs.
// Also checks that the model's weights fit every accelerator.
void check_policies(const ExperimentConfig& cfg, const PluginRegistries& plugins,
                    const std::optional<std::string>& filter = std::nullopt);

struct OfflineRunOptions {
  bool progress = true;         // a progress line (bar on a terminal) on stderr
  ProgressFn on_progress = {};  // when set, called instead (and `progress` ignored)
  bool parallel = true;         // what-if candidates on oneTBB workers
  bool keep_log = true;         // keep per-op records (traces, CSVs); sweep needs only figures
  // Set from a signal handler: non-zero cancels the run (see
  // EngineOptions::stop); run_offline then throws Interrupted.
  const std::atomic<int>* stop = nullptr;
};

// A run cancelled through OfflineRunOptions::stop.
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

// Runs `policy` to the end of the window. Thread-safe for distinct calls
// (each builds its own parts); `plugins` and `truths` are only read.
PolicyRun run_offline(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                      const Truths& truths, const OfflineRunOptions& opt = {});

}  // namespace slicesched::cli
