// What `simulate` and `serve` hand their user: the comparison table on
// stdout, and with --out: summary.json, per-request and per-accelerator
// CSVs, a Chrome trace per policy (opens in Perfetto), PNG plots, and with
// --explain the scheduler's decisions (decisions.jsonl).
module;
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

export module slicesched.cli.report;
import slicesched.compose.run;
import slicesched.compose.offline;
import slicesched.compose.policy;
import slicesched.config;
import slicesched.engine.metrics;

export namespace slicesched::cli {

// A policy's entry of summary.json (after finish_slo): its figures, offered
// load, scheduling counts and plugins.
nlohmann::json policy_summary(const PolicyRun& r);
// Whether a plugin decides placements (a placement policy, a partition set
// or a stage): what the "deciding takes longer than the time decided"
// warning and timing.json's deciding_wall_s add up.
bool deciding_plugin(const PluginRecord& x);

// What SLO attainment is measured against: a TTFT threshold and where it
// came from, or none, and then every SLO figure is n/a and `basis` says why.
// A run is never measured against its own TTFT.
struct SloBasis {
  std::optional<double> threshold_s;
  std::string basis;  // "p90 TTFT of Static-Online", "--slo-threshold", ...; or why there is none
};

// The threshold for these runs: `given` when set (`given_as` says where it
// came from), else the p90 TTFT of the `baseline` run among `runs` (the
// config's slo_baseline), else none (basis: what to do about it).
SloBasis slo_basis(const std::vector<PolicyRun>& runs, const std::string& baseline,
                   std::optional<double> given = std::nullopt, const std::string& given_as = "--slo-threshold");

// The threshold `baseline`'s run `m` gives: its p90 TTFT (`how` follows the
// name in the basis, e.g. ", run beside as the baseline"), over the online
// requests it gave a first token, saying how many those were when more
// than a tenth got none; none when it gave none (a p90 of nothing is not
// 0 s).
SloBasis baseline_slo(const RunMetrics& m, const std::string& baseline, const std::string& how = "");

// Fills each run's SLO attainment from `basis` (left empty, n/a, without a threshold).
void apply_slo(std::vector<PolicyRun>& runs, const SloBasis& basis);

struct ReportOptions {
  std::optional<std::string> out;  // the folder to write into; none: the table only
  double trace_seconds = 60;       // what the Chrome traces cover (the runs' timeline window)
  bool explain = false;            // also write decisions.jsonl (the runs recorded their decisions)
  std::optional<SloBasis> slo;     // the SLO basis; none: slo_basis(runs)
  // summary.json's "ground_truth": what each accelerator type played
  // (ground_truth_json); null: left out.
  nlohmann::json ground_truth;
  // Runs that failed (PolicyRun::error), with what they knew: not in the
  // table, but in summary.json marked failed, and their decisions, CSVs
  // and traces written.
  std::vector<PolicyRun>* failed = nullptr;
};

// {type: {"truth": "profile"|"calibrated"|"roofline", "source": file,
// "datasheet": name, and for the roofline "efficiencies": {kind: {compute,
// memory, overhead_us}}}} for summary.json.
nlohmann::json ground_truth_json(const std::vector<TruthPlayed>& played);

// Refuses an --out that report() could not write for these policies,
// before anything runs: `out` must be a folder or creatable as one, and
// writable, and no result's path may hold something of another kind (a
// file named plots, a folder named summary.json). Throws
// std::runtime_error with one line naming the path and what was expected.
void check_out(const std::string& out, const std::vector<std::string>& policies, bool explain = false);

// Fills SLO attainment (from opt.slo, or slo_basis(runs)), prints the
// table, writes the files when opt.out is set. Throws std::runtime_error naming the path on a write failure.
void report(const ExperimentConfig& cfg, std::vector<PolicyRun>& runs, const ReportOptions& opt);

// Runs gnuplot script `gp` (already written to `dir`/plots.gp) in `dir`.
// Returns whether every image was drawn; false, with one line saying why
// (no gnuplot, or it failed), leaves no image of this run.
bool draw_plots(const std::filesystem::path& dir, const std::string& gp);

// The per-request CSV report() writes for `policy`, relative to --out.
std::string requests_file_name(const std::string& policy);

}  // namespace slicesched::cli
