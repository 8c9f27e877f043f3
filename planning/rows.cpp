module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

module slicesched.planning.rows;
import slicesched.engine.metrics;

namespace slicesched::planning {

const std::vector<std::string>& figure_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const RunFigure& f : run_figures())
      if (f.sweep_column) n.emplace_back(f.name);
    return n;
  }();
  return names;
}

SweepRow make_row(const SweepPoint& point, const std::string& policy, const nlohmann::json& e) {
  SweepRow r;
  r.point = point.index;
  r.values = point.values;
  r.policy = policy;
  for (const auto& name : figure_names()) {
    auto it = e.find(name);
    // A figure that is n/a (null: SLO attainment without a baseline) stays
    // NaN, so no objective holds on it and no plot draws it as 0.
    r.figures.push_back(it == e.end()     ? 0.0
                        : it->is_number() ? it->get<double>()
                        : it->is_null()   ? std::numeric_limits<double>::quiet_NaN()
                                          : 0.0);
  }
  return r;
}

std::string fnv1a64_hex(const std::string& bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

void sort_rows(SweepTable& t) {
  auto rank = [&](const std::string& p) {
    return std::find(t.policies.begin(), t.policies.end(), p) - t.policies.begin();
  };
  std::stable_sort(t.rows.begin(), t.rows.end(), [&](const SweepRow& a, const SweepRow& b) {
    return a.point != b.point ? a.point < b.point : rank(a.policy) < rank(b.policy);
  });
}

double figure(const SweepRow& row, const std::string& name) {
  const auto& names = figure_names();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) throw std::out_of_range("no figure named '" + name + "'");
  return row.figures[static_cast<std::size_t>(it - names.begin())];
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Integral figures print as integers, the rest with six decimals: the same
// text for the same double on every machine.
std::string number(double v) {
  char s[64];
  if (std::nearbyint(v) == v && std::fabs(v) < 1e15)
    std::snprintf(s, sizeof s, "%.0f", v);
  else
    std::snprintf(s, sizeof s, "%.6f", v);
  return s;
}

}  // namespace

std::string to_csv(const SweepTable& t) {
  std::ostringstream o;
  for (const auto& a : t.axes) o << csv_field(a.name) << ',';
  o << "policy";
  for (const auto& f : figure_names()) o << ',' << f;
  o << '\n';
  for (const SweepRow& r : t.rows) {
    for (const auto& v : r.values) o << csv_field(display(v)) << ',';
    o << csv_field(r.policy);
    for (double f : r.figures) o << ',' << number(f);
    o << '\n';
  }
  return o.str();
}

std::string wall_csv(const SweepTable& t) {
  std::ostringstream o;
  o << "point,policy,wall_s\n";
  for (const SweepRow& r : t.rows) o << r.point << ',' << csv_field(r.policy) << ',' << number(r.wall_s) << '\n';
  return o.str();
}

nlohmann::json to_json(const SweepTable& t) {
  nlohmann::json j;
  j["format"] = "slicesched-sweep/1";
  j["config"] = t.config;
  j["config_hash"] = t.config_hash;
  j["seed"] = t.seed;
  j["axes"] = nlohmann::json::array();
  for (const auto& a : t.axes) j["axes"].push_back({{"name", a.name}, {"key", a.key}, {"values", a.values}});
  j["policies"] = t.policies;
  j["points_total"] = t.points_total;
  j["shard"] = t.shard ? nlohmann::json{{"index", t.shard->index}, {"count", t.shard->count}} : nlohmann::json(nullptr);
  j["figures"] = figure_names();
  j["rows"] = nlohmann::json::array();
  for (const SweepRow& r : t.rows)
    j["rows"].push_back({{"point", r.point}, {"values", r.values}, {"policy", r.policy}, {"figures", r.figures}});
  return j;
}

Result<SweepTable> from_json(const nlohmann::json& j, const std::string& where) {
  try {
    if (j.value("format", "") != "slicesched-sweep/1")
      return InvalidArgument(where + ": not a sweep.json (format slicesched-sweep/1)");
    if (j.at("figures").get<std::vector<std::string>>() != figure_names())
      return InvalidArgument(where + ": written by another version (its figures differ); run the sweep again");
    SweepTable t;
    t.config = j.at("config").get<std::string>();
    t.config_hash = j.at("config_hash").get<std::string>();
    t.seed = j.at("seed").get<std::uint64_t>();
    for (const auto& a : j.at("axes"))
      t.axes.push_back({a.at("name").get<std::string>(), a.at("key").get<std::string>(),
                        a.at("values").get<std::vector<std::string>>()});
    t.policies = j.at("policies").get<std::vector<std::string>>();
    if (!j.at("points_total").is_number_integer() || j.at("points_total").get<std::int64_t>() < 0)
      return InvalidArgument(where + ": points_total is " + j.at("points_total").dump() + ", expected an integer >= 0");
    t.points_total = j.at("points_total").get<std::size_t>();
    if (!j.at("shard").is_null())
      t.shard = Shard{j.at("shard").at("index").get<std::size_t>(), j.at("shard").at("count").get<std::size_t>()};
    // The grid the axes make: its size, and each point's values (a row
    // that disagrees was edited or mixed up, and would merge wrong).
    const std::vector<SweepPoint> grid = expand(t.axes);
    if (t.points_total != grid.size())
      return InvalidArgument(where + ": points_total " + std::to_string(t.points_total) + " is not the " +
                             std::to_string(grid.size()) + " points its axes make");
    for (const auto& r : j.at("rows")) {
      SweepRow row;
      // (a JSON 1.5 would be read as 1)
      if (!r.at("point").is_number_integer() || r.at("point").get<std::int64_t>() < 0)
        return InvalidArgument(where + ": a row's point is " + r.at("point").dump() + ", expected an integer >= 0");
      row.point = r.at("point").get<std::size_t>();
      row.values = r.at("values").get<std::vector<std::string>>();
      row.policy = r.at("policy").get<std::string>();
      // (null: a figure that was n/a, written so by sweep itself)
      for (const auto& f : r.at("figures")) {
        if (!f.is_number() && !f.is_null())
          return InvalidArgument(where + ": a figure of point " + std::to_string(row.point) + " is " + f.dump() +
                                 ", expected a number or null (n/a)");
        row.figures.push_back(f.is_null() ? std::numeric_limits<double>::quiet_NaN() : f.get<double>());
      }
      if (row.values.size() != t.axes.size() || row.figures.size() != figure_names().size() ||
          row.point >= t.points_total)
        return InvalidArgument(where + ": row of point " + std::to_string(row.point) + " does not fit the grid");
      if (row.values != grid[row.point].values)
        return InvalidArgument(where + ": the row of point " + std::to_string(row.point) +
                               " has values that are not that point's in the grid");
      if (std::find(t.policies.begin(), t.policies.end(), row.policy) == t.policies.end())
        return InvalidArgument(where + ": a row of point " + std::to_string(row.point) + " names policy '" +
                               row.policy + "', which the sweep did not run");
      t.rows.push_back(std::move(row));
    }
    return t;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(where + ": malformed sweep.json (" + std::string(e.what()) + ")");
  }
}

Result<SweepTable> merge(std::vector<SweepTable> shards, const std::vector<std::string>& names) {
  if (shards.empty()) return InvalidArgument("sweep-merge: no shards given");
  SweepTable out = shards.front();
  out.rows.clear();
  out.shard.reset();
  auto same_axes = [](const SweepTable& a, const SweepTable& b) {
    if (a.axes.size() != b.axes.size()) return false;
    for (std::size_t i = 0; i < a.axes.size(); ++i)
      if (a.axes[i].key != b.axes[i].key || a.axes[i].name != b.axes[i].name || a.axes[i].values != b.axes[i].values)
        return false;
    return true;
  };
  std::set<std::pair<std::size_t, std::string>> seen;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const SweepTable& t = shards[s];
    const char* differs = t.config_hash != out.config_hash ? "the config or a file it names (trace, profile, model, "
                                                             "type table, plugin) differs"
                          : t.seed != out.seed             ? "the seed differs"
                          : !same_axes(t, out)             ? "the grid differs"
                          : t.policies != out.policies     ? "the policies differ"
                                                           : nullptr;
    if (differs)
      return InvalidArgument("sweep-merge: " + names[s] + " is from another sweep than " + names[0] + ": " + differs);
    for (const SweepRow& r : t.rows) {
      if (!seen.insert({r.point, r.policy}).second)
        return InvalidArgument("sweep-merge: point " + std::to_string(r.point) + ", policy '" + r.policy +
                               "' is in more than one shard (" + names[s] + ")");
      out.rows.push_back(r);
    }
  }
  // Every point must be there, with every policy the sweep ran.
  std::set<std::size_t> points;
  for (const auto& [p, policy] : seen) points.insert(p);
  for (const std::size_t p : points)
    for (const std::string& policy : out.policies)
      if (!seen.contains({p, policy}))
        return InvalidArgument("sweep-merge: point " + std::to_string(p) + " has no row of policy '" + policy +
                               "' in any shard: merge every shard, or run that point again");
  if (points.size() != out.points_total) {
    std::string missing;
    int listed = 0;
    for (std::size_t p = 0; p < out.points_total && listed < 8; ++p)
      if (!points.count(p)) missing += (listed++ ? ", " : "") + std::to_string(p);
    return InvalidArgument("sweep-merge: " + std::to_string(out.points_total - points.size()) + " of " +
                           std::to_string(out.points_total) + " points are missing (first: " + missing +
                           "): merge every shard");
  }
  sort_rows(out);
  return out;
}

}  // namespace slicesched::planning
