// The grid of a sweep: each `--set [NAME:]KEY=V1,V2,...` is an axis, and
// the points are every combination of their values (the last axis varies
// fastest). A point is a list of config overrides (slicesched.config).
module;
#include <cstddef>
#include <string>
#include <vector>

export module slicesched.planning.grid;
import slicesched.config;
import slicesched.core.status;

export namespace slicesched::planning {

struct SweepAxis {
  std::string name;                 // the column: NAME, or KEY's last component
  std::string key;                  // dotted path into the TOML (ConfigOverride::key)
  std::vector<std::string> values;  // TOML values, as given
  std::string flag = "--set";       // the option that gave it, as errors name it
};

struct SweepPoint {
  std::size_t index = 0;            // place in the full grid
  std::vector<std::string> values;  // one per axis
};

// "[NAME:]KEY=V1,V2,...": commas inside [...], {...} or quotes do not split.
// Fails with one line naming the argument on an empty key, no '=', or an
// empty value.
Result<SweepAxis> parse_axis(const std::string& arg);

// Whether two override keys can set the same value: equal once an index is
// written one way (`a[0]` is `a.0`), a `*` matching any one component.
bool same_setting(const std::string& a, const std::string& b);

// Whether `wide` sets `key`'s value and others too: the same setting, with
// a `*` where `key` names one element (`tenants.*.lanes` over
// `tenants.offline0.lanes`).
bool sets_more_than(const std::string& wide, const std::string& key);

// Checks that axis names are distinct and no two axes set the same value
// (one line naming the clash), and the grid is at most `max_points` points.
Status check_axes(const std::vector<SweepAxis>& axes, std::size_t max_points = 1'000'000);

// Every combination, in grid order (last axis fastest); one empty point
// when there are no axes.
std::vector<SweepPoint> expand(const std::vector<SweepAxis>& axes);

// "I/N" with 0 <= I < N: the points whose index % N == I.
struct Shard {
  std::size_t index = 0, count = 1;
};
Result<Shard> parse_shard(const std::string& arg);
std::vector<SweepPoint> select(const std::vector<SweepPoint>& points, Shard shard);

// The overrides that make a point's config.
std::vector<ConfigOverride> overrides(const std::vector<SweepAxis>& axes, const SweepPoint& point);

// A value for display in tables and CSV: TOML quotes removed.
std::string display(const std::string& value);

}  // namespace slicesched::planning
