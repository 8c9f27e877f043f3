// Running the points of a sweep or a plan: each point is the config with
// some overrides; each (point, policy) pair is one offline run. SLO
// attainment at a point is against that point's Static-Online run (the
// paper's definition), which is run as a reference even when not asked for.
// Failures throw std::runtime_error with one line naming the point.
module;
#include <atomic>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

export module slicesched.cli.points;
import slicesched.compose.offline;
import slicesched.planning.grid;
import slicesched.config;
import slicesched.core.plugin;

export namespace slicesched::cli {

struct PreparedPoint {
  planning::SweepPoint point;
  ExperimentConfig cfg;
  Truths truths;
  std::vector<std::string> policies;     // to report, in the config's order
  std::optional<std::string> reference;  // run only for the SLO threshold
};

// Loads and checks the point's config (overrides, plugins, ground truth);
// `filter`: the policies to report (all when empty). Nothing runs.
PreparedPoint prepare_point(const std::string& config, const std::vector<ConfigOverride>& base,
                            const planning::SweepPoint& point, const std::vector<planning::SweepAxis>& axes,
                            const std::vector<std::string>& filter, const PluginRegistries& plugins,
                            bool with_reference = true);

// Every (point, policy) run, on `jobs` threads (oneTBB), with a progress
// bar and an ETA on stderr (none when `label` is empty). Returns, per point, the summary.json entry of
// each reported policy (SLO filled in) and its wall time. When `stop` turns
// positive (a signal) the runs end at their next event and nothing comes
// back (an empty vector): figures cut short would look like complete ones.
struct PointResult {
  std::vector<nlohmann::json> entries;  // parallel to PreparedPoint::policies
  std::vector<double> wall_s;
};
std::vector<PointResult> run_points(const std::vector<PreparedPoint>& points, const PluginRegistries& plugins, int jobs,
                                    const std::string& label, const std::atomic<int>* stop = nullptr);

// "k=v, k2=v2" for messages.
std::string describe(const std::vector<planning::SweepAxis>& axes, const planning::SweepPoint& point);

// What the points' accelerators play (ground_truth_lines), on stderr: once
// when every point plays the same, else each distinct set with the points
// it holds at (a sweep over tp may mix measured tables and the roofline).
void print_ground_truth(const std::vector<PreparedPoint>& points, const std::vector<planning::SweepAxis>& axes);

}  // namespace slicesched::cli
