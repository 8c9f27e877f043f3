// What `simulate` (and later `serve`) hands its user: the comparison table
// on stdout, and with --out: summary.json, per-request and per-accelerator
// CSVs, a Chrome trace per policy (opens in Perfetto) and PNG plots.
module;
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"

export module slicesched.cli.report;
export import slicesched.config;
export import slicesched.engine.metrics;
export import slicesched.core.calibration;

export namespace slicesched::cli {

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
  std::optional<CalibrationProfile> calibration;  // what the estimators learned, when linear
};

// The SLO threshold: the p90 TTFT of the policy named "Static-Online" (the
// paper's definition), or of the first policy run when there is none.
double slo_threshold(const std::vector<PolicyRun>& runs);

// Fills SLO attainment, prints the table, writes the files when opt.out is
// set. Throws std::runtime_error naming the path on a write failure.
void report(const ExperimentConfig& cfg, std::vector<PolicyRun>& runs, const SimulateOptions& opt);

}  // namespace slicesched::cli
