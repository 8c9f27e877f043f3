module;
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

module slicesched.planning.search;
import slicesched.planning.rows;

namespace slicesched::planning {

bool Objective::holds(double v) const {
  switch (op) {
    case Op::kLe:
      return v <= bound;
    case Op::kGe:
      return v >= bound;
    case Op::kLt:
      return v < bound;
    case Op::kGt:
      return v > bound;
  }
  return false;
}

Result<Objective> parse_objective(const std::string& arg) {
  Objective o;
  o.text = arg;
  std::size_t at = arg.find_first_of("<>");
  if (at == std::string::npos)
    return InvalidArgument("--objective " + arg + ": expected FIGURE<=X, >=, < or > (e.g. ttft_p90_s<=1.0)");
  std::size_t len = 1;
  const bool eq = at + 1 < arg.size() && arg[at + 1] == '=';
  if (eq) len = 2;
  o.op =
      arg[at] == '<' ? (eq ? Objective::Op::kLe : Objective::Op::kLt) : (eq ? Objective::Op::kGe : Objective::Op::kGt);
  std::string name = arg.substr(0, at);
  while (!name.empty() && name.back() == ' ') name.pop_back();
  while (!name.empty() && name.front() == ' ') name.erase(name.begin());
  const auto& names = figure_names();
  bool known = false;
  for (const auto& n : names) known |= n == name;
  // "done=>0.9", "x=<1": the comparison written backwards.
  if (!known && !name.empty() && name.back() == '=' && at + 1 < arg.size() && arg[at + 1] != '=')
    return InvalidArgument("--objective " + arg + ": '=" + std::string(1, arg[at]) + "' is written backwards: '" +
                           std::string(1, arg[at]) + "=' (e.g. ttft_p90_s<=1.0)");
  if (!known) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return InvalidArgument("--objective " + arg + ": no figure named '" + name + "' (figures: " + list + ")");
  }
  o.figure = name;
  const std::string num = arg.substr(at + len);
  char* end = nullptr;
  o.bound = std::strtod(num.c_str(), &end);
  while (end && *end == ' ') ++end;
  if (num.empty() || !end || *end != '\0' || !std::isfinite(o.bound))
    return InvalidArgument("--objective " + arg + ": the bound '" + num + "' is not a finite number");
  // An objective no run can meet (every figure is >= 0, a fraction <= 1)
  // would search the whole range and answer "none": refused, saying why.
  const bool fraction = name == "slo_attainment" || name == "gpu_utilization" || name == "done";
  using Op = Objective::Op;
  if ((o.op == Op::kLe && o.bound < 0) || (o.op == Op::kLt && o.bound <= 0))
    return InvalidArgument("--objective " + arg + ": no run can meet it (" + name + " is never below 0)");
  if (fraction && ((o.op == Op::kGe && o.bound > 1) || (o.op == Op::kGt && o.bound >= 1)))
    return InvalidArgument("--objective " + arg + ": no run can meet it (" + name + " is a fraction, at most 1)");
  return o;
}

Result<VaryRange> parse_vary(const std::string& arg) {
  const auto eq = arg.find('=');
  const auto dots = arg.find("..", eq == std::string::npos ? 0 : eq);
  auto integer = [](const std::string& s, std::int64_t& out) {
    if (s.empty() || s.size() > 18) return false;
    std::size_t i = s[0] == '-' ? 1 : 0;
    if (i == s.size() || s.find_first_not_of("0123456789", i) != std::string::npos) return false;
    out = std::stoll(s);
    return true;
  };
  VaryRange v;
  if (eq != std::string::npos && eq > 0 && dots != std::string::npos) {
    v.key = arg.substr(0, eq);
    if (integer(arg.substr(eq + 1, dots - eq - 1), v.lo) && integer(arg.substr(dots + 2), v.hi) && v.lo <= v.hi)
      return v;
  } else if (eq != std::string::npos && eq > 0) {  // a list, perhaps of one value
    v.key = arg.substr(0, eq);
    bool ok = true;
    for (std::size_t from = eq + 1;;) {
      const std::size_t comma = arg.find(',', from);
      std::int64_t x = 0;
      ok &= integer(arg.substr(from, comma == std::string::npos ? std::string::npos : comma - from), x) &&
            (v.list.empty() || x > v.list.back());
      v.list.push_back(x);
      if (comma == std::string::npos || !ok) break;
      from = comma + 1;
    }
    if (ok) {
      v.lo = v.list.front();
      v.hi = v.list.back();
      return v;
    }
  }
  return InvalidArgument("--vary " + arg +
                         ": expected KEY=LO..HI with integers LO <= HI (e.g. cluster.accelerators[0].count=2..16), or "
                         "KEY=V1,V2,... with ascending integers (e.g. cluster.accelerators[0].tp=2,4,8)");
}

SearchResult smallest_holding(std::int64_t lo, std::int64_t hi, const std::function<bool(std::int64_t)>& holds) {
  SearchResult r;
  std::map<std::int64_t, bool> seen;
  auto eval = [&](std::int64_t v) {
    if (auto it = seen.find(v); it != seen.end()) return it->second;
    const bool h = holds(v);
    seen[v] = h;
    r.steps.push_back({v, h});
    return h;
  };
  const std::int64_t top = hi;
  if (!eval(hi)) return r;
  if (eval(lo)) {
    r.answer = lo;
  } else {
    // Invariant: lo fails, hi holds.
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      (eval(mid) ? hi : lo) = mid;
    }
    r.answer = hi;
  }
  if (*r.answer < top && !eval(*r.answer + 1)) r.monotone = false;
  for (const auto& [v, h] : seen)
    if (v > *r.answer && !h) r.monotone = false;
  return r;
}

}  // namespace slicesched::planning
