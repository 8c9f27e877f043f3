// What `simulate` and `serve` hand their user: the comparison table on
// stdout, and with --out: summary.json, per-request and per-accelerator
// CSVs, a Chrome trace per policy (opens in Perfetto), PNG plots, and with
// --explain the scheduler's decisions (decisions.jsonl).
module;
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

export module slicesched.cli.report;
export import slicesched.compose.run;

export namespace slicesched::cli {

// A policy's entry of summary.json (after finish_slo): its figures, offered
// load, scheduling counts and plugins.
nlohmann::json policy_summary(const PolicyRun& r);

// The SLO threshold: the p90 TTFT of the policy named "Static-Online" (the
// paper's definition), or of the first policy run when there is none.
double slo_threshold(const std::vector<PolicyRun>& runs);

struct ReportOptions {
  std::optional<std::string> out;  // the folder to write into; none: the table only
  double trace_seconds = 60;       // what the Chrome traces cover (the runs' timeline window)
  bool explain = false;            // also write decisions.jsonl (the runs recorded their decisions)
  // Runs that failed (PolicyRun::error), with what they knew: not in the
  // table, but in summary.json marked failed, and their decisions, CSVs
  // and traces written.
  std::vector<PolicyRun>* failed = nullptr;
};

// Refuses an --out that report() could not write for these policies,
// before anything runs: `out` must be a folder or creatable as one, and
// writable, and no result's path may hold something of another kind (a
// file named plots, a folder named summary.json). Throws
// std::runtime_error with one line naming the path and what was expected.
void check_out(const std::string& out, const std::vector<std::string>& policies, bool explain = false);

// Fills SLO attainment, prints the table, writes the files when opt.out is
// set. Throws std::runtime_error naming the path on a write failure.
void report(const ExperimentConfig& cfg, std::vector<PolicyRun>& runs, const ReportOptions& opt);

}  // namespace slicesched::cli
