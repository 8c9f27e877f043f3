// Sweep results: one row per (point, policy) with every scalar figure of
// that policy's summary.json entry, rendered as sweep.csv and sweep.json.
// Rows carry no wall time, so the files are byte-identical for the same
// config, grid and seed however the points were run (jobs, shards).
module;
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

export module slicesched.planning.rows;
import slicesched.planning.grid;
import slicesched.core.status;

export namespace slicesched::planning {

// The figures of a row, in column order: the sweep columns of the run's
// figures (engine/metrics' run_figures()), read from a policy's
// summary.json entry.
const std::vector<std::string>& figure_names();

struct SweepRow {
  std::size_t point = 0;
  std::vector<std::string> values;  // the point's axis values
  std::string policy;
  std::vector<double> figures;  // parallel to figure_names()
  double wall_s = 0;            // kept apart: not in sweep.csv or the rows of sweep.json
};

// A row from a policy's summary.json entry (figures it lacks are 0; a null
// figure, n/a, is NaN).
SweepRow make_row(const SweepPoint& point, const std::string& policy, const nlohmann::json& summary_entry);

struct SweepTable {
  std::string config;       // the config path, as given
  std::string config_hash;  // of the config file's bytes and the files it names (fnv1a64, hex)
  std::uint64_t seed = 0;
  std::vector<SweepAxis> axes;
  std::vector<std::string> policies;  // in the config's order (row order within a point)
  std::size_t points_total = 0;       // the whole grid's
  std::optional<Shard> shard;         // set when this table is one shard of the grid
  std::vector<SweepRow> rows;         // ordered by point, then policy
};

std::string fnv1a64_hex(const std::string& bytes);

// Sorts rows by point, then by the table's policy order.
void sort_rows(SweepTable& t);
// A figure's value by name for a row (throws std::out_of_range on an unknown name).
double figure(const SweepRow& row, const std::string& name);

std::string to_csv(const SweepTable& t);
std::string wall_csv(const SweepTable& t);
nlohmann::json to_json(const SweepTable& t);
// Reads what to_json wrote; `where` names the file in errors.
Result<SweepTable> from_json(const nlohmann::json& j, const std::string& where);

// Merges shards of one sweep: same config hash, seed, axes and policies;
// every point of the grid exactly once. The result has no shard.
Result<SweepTable> merge(std::vector<SweepTable> shards, const std::vector<std::string>& names);

}  // namespace slicesched::planning
