// What `simulate` (and later `serve`) hands its user: the comparison table
// on stdout, and with --out: summary.json, per-request and per-accelerator
// CSVs, a Chrome trace per policy (opens in Perfetto) and PNG plots.
module;
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"

export module slicesched.cli.report;
export import slicesched.config;
export import slicesched.engine.metrics;
export import slicesched.core.calibration;

export namespace slicesched::cli {

// What a tenant's stream offers inside the measurement window (all its
// instances together).
struct OfferedLoad {
  std::string tenant;
  std::size_t requests = 0;
  std::int64_t input_tokens = 0, output_tokens = 0;
  double window_s = 0;  // duration_s, or the stream's span without a window
  double requests_per_s() const { return window_s > 0 ? static_cast<double>(requests) / window_s : 0; }
  double input_tokens_per_s() const { return window_s > 0 ? static_cast<double>(input_tokens) / window_s : 0; }
  double output_tokens_per_s() const { return window_s > 0 ? static_cast<double>(output_tokens) / window_s : 0; }
};

struct PolicyRun {
  std::string name;
  double wall_s = 0;
  RunMetrics metrics;
  std::vector<RequestRecord> requests;
  std::vector<RunRecord> log;
  std::vector<std::string> tenant_names, accel_names;
  PluginChoice arbiter;                             // the transfer arbiter plugin and its arguments
  PluginChoice estimator;                           // the estimator plugin and its arguments
  std::string estimator_prior;                      // the [estimators] prior it started from, or empty
  std::vector<EstimatorSet::ReportRow> estimators;  // empty when it is not linear
  RoundStats scheduling;
  std::size_t lost_ops = 0, rebuilt_sequences = 0;  // faults (EngineResult)
  std::vector<OfferedLoad> offered;
  std::size_t requests_beyond_window = 0;
  std::optional<CalibrationProfile> calibration;  // what the estimators learned, when linear
};

// A policy's entry of summary.json (after finish_slo): its figures, offered
// load, scheduling counts and plugins.
nlohmann::json policy_summary(const PolicyRun& r);

// The SLO threshold: the p90 TTFT of the policy named "Static-Online" (the
// paper's definition), or of the first policy run when there is none.
double slo_threshold(const std::vector<PolicyRun>& runs);

// Refuses an --out that report() could not write for these policies,
// before anything runs: `out` must be a folder or creatable as one, and
// writable, and no result's path may hold something of another kind (a
// file named plots, a folder named summary.json). Throws
// std::runtime_error with one line naming the path and what was expected.
void check_out(const std::string& out, const std::vector<std::string>& policies);

// Fills SLO attainment, prints the table, writes the files when opt.out is
// set. Throws std::runtime_error naming the path on a write failure.
void report(const ExperimentConfig& cfg, std::vector<PolicyRun>& runs, const SimulateOptions& opt);

}  // namespace slicesched::cli
