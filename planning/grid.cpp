module;
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

module slicesched.planning.grid;

namespace slicesched::planning {

namespace {

std::vector<std::string> split_values(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;
  for (char c : s) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Whether both are numbers and equal.
bool same_number(const std::string& a, const std::string& b) {
  char* ea = nullptr;
  char* eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return *ea == '\0' && *eb == '\0' && std::isfinite(x) && x == y;
}

}  // namespace

Result<SweepAxis> parse_axis(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos)
    return InvalidArgument("--set " + arg +
                           ": expected [NAME:]KEY=V1,V2,... (e.g. tenants.offline0.stream.constant_rate=1,2,4)");
  SweepAxis axis;
  std::string key = trim(arg.substr(0, eq));
  if (const auto colon = key.find(':'); colon != std::string::npos) {
    axis.name = trim(key.substr(0, colon));
    key = trim(key.substr(colon + 1));
    if (axis.name.empty()) return InvalidArgument("--set " + arg + ": empty NAME before ':'");
  }
  if (key.empty()) return InvalidArgument("--set " + arg + ": empty KEY before '='");
  axis.key = key;
  if (axis.name.empty()) {
    // The last path component, without an index: accelerators[0].count -> count.
    std::string last = key.substr(key.find_last_of('.') == std::string::npos ? 0 : key.find_last_of('.') + 1);
    if (const auto b = last.find('['); b != std::string::npos) last = last.substr(0, b);
    axis.name = last.empty() ? key : last;
  }
  for (const std::string& v : split_values(arg.substr(eq + 1))) {
    const std::string t = trim(v);
    if (t.empty()) return InvalidArgument("--set " + arg + ": empty value in the list");
    // (a value twice runs its points twice, and plots two rows at one x)
    if (std::find(axis.values.begin(), axis.values.end(), t) != axis.values.end())
      return InvalidArgument("--set " + arg + ": value '" + t + "' is listed twice");
    // One number written two ways ("5" and "5.0", "1e3" and "1000") is one
    // value too.
    if (const auto same = std::find_if(axis.values.begin(), axis.values.end(),
                                       [&](const std::string& u) { return same_number(t, u); });
        same != axis.values.end())
      return InvalidArgument("--set " + arg + ": values '" + *same + "' and '" + t + "' are one number, listed twice");
    axis.values.push_back(t);
  }
  return axis;
}

namespace {

// The components of an override key: "a.b[0].c" -> a, b, 0, c.
std::vector<std::string> components(const std::string& key) {
  std::vector<std::string> out(1);
  for (char c : key) {
    if (c == '.' || c == '[') {
      out.emplace_back();
    } else if (c != ']') {
      out.back() += c;
    }
  }
  std::erase(out, std::string());
  return out;
}

}  // namespace

bool same_setting(const std::string& a, const std::string& b) {
  const auto x = components(a), y = components(b);
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i] && x[i] != "*" && y[i] != "*") return false;
  return true;
}

bool sets_more_than(const std::string& wide, const std::string& key) {
  if (!same_setting(wide, key)) return false;
  const auto x = components(wide), y = components(key);
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] == "*" && y[i] != "*") return true;
  return false;
}

Status check_axes(const std::vector<SweepAxis>& axes, std::size_t max_points) {
  std::size_t points = 1;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (axes[i].name == axes[j].name)
        return InvalidArgument("--set " + axes[i].key + ": a second axis named '" + axes[i].name +
                               "' (name one with --set NAME:KEY=...)");
      // Two axes on one value: the later would win at every point, and the
      // rows would be labelled with values that were not run.
      if (same_setting(axes[i].key, axes[j].key))
        return InvalidArgument("--set " + axes[i].name + ":" + axes[i].key + ": sets what axis '" + axes[j].name +
                               "' (" + axes[j].key + ") sets; give each value one --set");
    }
    if (axes[i].name == "policy")
      return InvalidArgument("--set " + axes[i].key +
                             ": 'policy' is a column of its own; name the axis with --set NAME:KEY=...");
    points *= axes[i].values.size();
    if (points > max_points)
      return InvalidArgument("--set: the grid has more than " + std::to_string(max_points) + " points");
  }
  return Status::Ok();
}

std::vector<SweepPoint> expand(const std::vector<SweepAxis>& axes) {
  std::size_t total = 1;
  for (const auto& a : axes) total *= a.values.size();
  std::vector<SweepPoint> out(total);
  for (std::size_t p = 0; p < total; ++p) {
    out[p].index = p;
    out[p].values.resize(axes.size());
    std::size_t rest = p;
    for (std::size_t a = axes.size(); a-- > 0;) {
      out[p].values[a] = axes[a].values[rest % axes[a].values.size()];
      rest /= axes[a].values.size();
    }
  }
  return out;
}

Result<Shard> parse_shard(const std::string& arg) {
  const auto slash = arg.find('/');
  auto number = [](const std::string& s) -> long long {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoll(s);
  };
  if (slash != std::string::npos) {
    const long long i = number(arg.substr(0, slash)), n = number(arg.substr(slash + 1));
    if (i >= 0 && n >= 1 && i < n) return Shard{static_cast<std::size_t>(i), static_cast<std::size_t>(n)};
  }
  return InvalidArgument("--shard " + arg + ": expected I/N with 0 <= I < N (e.g. 0/4)");
}

std::vector<SweepPoint> select(const std::vector<SweepPoint>& points, Shard shard) {
  std::vector<SweepPoint> out;
  for (const auto& p : points)
    if (p.index % shard.count == shard.index) out.push_back(p);
  return out;
}

std::vector<ConfigOverride> overrides(const std::vector<SweepAxis>& axes, const SweepPoint& point) {
  std::vector<ConfigOverride> out;
  for (std::size_t a = 0; a < axes.size(); ++a) out.push_back({axes[a].key, point.values[a], axes[a].flag});
  return out;
}

std::string display(const std::string& value) {
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
    return value.substr(1, value.size() - 2);
  return value;
}

}  // namespace slicesched::planning
