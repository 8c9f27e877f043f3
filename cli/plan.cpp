// `slicesched plan CONFIG --policy NAME --vary KEY=LO..HI --objective EXPR`:
// the smallest integer value of KEY at which every objective holds, found
// by bisection over offline runs (each point a full simulation).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.compose.experiment;
import slicesched.cli.fail;
import slicesched.cli.points;
import slicesched.planning.rows;
import slicesched.planning.search;
import slicesched.compose.policy;
import slicesched.compose.setup;
import slicesched.config;
import slicesched.core.plugin;
import slicesched.planning.grid;

namespace slicesched::cli {

int plan(const PlanOptions& opt) {
  auto vary = planning::parse_vary(opt.vary);
  if (!vary.ok()) fail(vary.status().message());
  std::vector<planning::Objective> objectives;
  for (const auto& o : opt.objectives) {
    auto parsed = planning::parse_objective(o);
    if (!parsed.ok()) fail(parsed.status().message());
    objectives.push_back(std::move(parsed).value());
  }
  if (objectives.empty()) fail("plan: give at least one --objective (e.g. ttft_p90_s<=1.0)");
  // The baseline's run (slo_baseline) sets the SLO threshold: run it only
  // when an objective reads SLO attainment (it also pins GPUs by name, so
  // without it a range may start below them).
  const bool slo = std::any_of(objectives.begin(), objectives.end(),
                               [](const planning::Objective& o) { return o.figure.starts_with("slo"); });
  std::vector<ConfigOverride> base;
  for (const auto& s : opt.sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) fail("--set " + s + ": expected KEY=VALUE");
    base.push_back({s.substr(0, eq), s.substr(eq + 1)});
    // (--vary would override it at every point, silently; a wildcard that
    // also sets the other elements is fine: --vary, applied after, wins on
    // its own element)
    if (planning::same_setting(base.back().key, vary->key) && !planning::sets_more_than(base.back().key, vary->key))
      fail("--set " + s + ": sets what --vary " + opt.vary + " varies; give one or the other");
  }
  // (Each point reads the prior with its ground truth, by load_truths.)
  const auto opened = value_or_fail(open_experiment(opt.config, {.overrides = base, .prior = false}));
  const PluginRegistries& plugins = opened->plugins;

  const std::vector<planning::SweepAxis> axes = {
      {vary->key.substr(vary->key.find_last_of('.') + 1), vary->key, {}, "--vary"}};
  // Points are searched by index (VaryRange::at gives the value).
  auto point_at = [&](std::int64_t i) {
    return planning::SweepPoint{static_cast<std::size_t>(i), {std::to_string(vary->at(i))}};
  };
  // Every value (of a range longer than 64, both ends) must make a valid
  // config before anything runs: a config is read in milliseconds, a plan
  // that stops halfway has spent its runs.
  const std::int64_t step = vary->list.empty() && vary->count() > 64 ? vary->count() - 1 : 1;
  {
    std::vector<PreparedPoint> checked;
    for (std::int64_t i = 0; i < vary->count(); i += step)
      checked.push_back(prepare_point(opt.config, base, point_at(i), axes, {opt.policy}, plugins, slo));
    print_ground_truth(checked, axes);
  }

  struct Tried {
    std::int64_t value;
    bool holds;
    nlohmann::json entry;
  };
  std::vector<Tried> tried;
  const int jobs = slo ? 2 : 1;  // the policy and its reference side by side
  auto holds = [&](std::int64_t i) {
    const std::int64_t v = vary->at(i);
    const PreparedPoint p = prepare_point(opt.config, base, point_at(i), axes, {opt.policy}, plugins, slo);
    const auto result = run_points({p}, plugins, jobs, "");
    const nlohmann::json& e = result[0].entries[0];
    const auto row = planning::make_row(p.point, opt.policy, e);
    bool ok = true;
    std::string why;
    for (const auto& o : objectives) {
      const double x = planning::figure(row, o.figure);
      ok &= o.holds(x);
      char b[96];
      std::snprintf(b, sizeof b, "%s%s=%.4g", why.empty() ? "" : ", ", o.figure.c_str(), x);
      why += b;
    }
    std::fprintf(stderr, "  %s=%lld: %s -> %s\n", axes[0].name.c_str(), static_cast<long long>(v), why.c_str(),
                 ok ? "holds" : "fails");
    tried.push_back({v, ok, e});
    return ok;
  };
  auto found = planning::smallest_holding(0, vary->count() - 1, holds);
  if (found.answer) found.answer = vary->at(*found.answer);
  std::sort(tried.begin(), tried.end(), [](const Tried& a, const Tried& b) { return a.value < b.value; });

  if (opt.json) {
    nlohmann::json j;
    j["key"] = vary->key;
    j["policy"] = opt.policy;
    if (vary->list.empty())
      j["range"] = {vary->lo, vary->hi};
    else
      j["values"] = vary->list;
    j["objectives"] = opt.objectives;
    j["answer"] = found.answer ? nlohmann::json(*found.answer) : nlohmann::json(nullptr);
    j["monotone"] = found.monotone;
    j["points"] = nlohmann::json::array();
    for (const auto& t : tried) {
      nlohmann::json f;
      for (const auto& o : objectives) f[o.figure] = t.entry.contains(o.figure) ? t.entry.at(o.figure) : nullptr;
      j["points"].push_back({{"value", t.value}, {"holds", t.holds}, {"figures", f}});
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("\n%-12s", axes[0].name.c_str());
    for (const auto& o : objectives) std::printf(" %16s", o.figure.c_str());
    std::printf("  objectives\n");
    for (const auto& t : tried) {
      std::printf("%-12lld", static_cast<long long>(t.value));
      for (const auto& o : objectives) {
        // (null: n/a, e.g. TTFT with no online request; it holds no objective)
        const auto it = t.entry.find(o.figure);
        if (it != t.entry.end() && it->is_number()) {
          // Four decimals, or as many as tell the figure from the bound
          // (0.500003 against <= 0.5 read "0.5000 fail").
          const double x = it->get<double>();
          char four[64];
          std::snprintf(four, sizeof four, "%.4f", x);
          std::printf(o.holds(std::strtod(four, nullptr)) == o.holds(x) ? " %16.4f" : " %16.9g", x);
        } else {
          std::printf(" %16s", "n/a");
        }
      }
      std::printf("  %s\n", t.holds ? "hold" : "fail");
    }
    std::string objs;
    for (const auto& o : opt.objectives) objs += (objs.empty() ? "" : ", ") + o;
    // Bisection tries a few values: the answer is the smallest one where
    // the objectives hold only if they hold from some value up.
    std::string among = "[" + std::to_string(vary->lo) + ", " + std::to_string(vary->hi) + "]";
    if (!vary->list.empty()) {
      among = "{";
      for (std::int64_t x : vary->list) among += (among.size() > 1 ? ", " : "") + std::to_string(x);
      among += "}";
    }
    if (found.answer)
      std::printf(
          "\nanswer: %s = %lld is the smallest value in %s where %s (policy %s), if they hold "
          "from some value up: bisection tried %zu of the %lld values\n",
          vary->key.c_str(), static_cast<long long>(*found.answer), among.c_str(), objs.c_str(), opt.policy.c_str(),
          tried.size(), static_cast<long long>(vary->count()));
    else
      std::printf(
          "\nanswer: none: even %s = %lld misses %s (policy %s); the search assumes they hold from some "
          "value up, so one that holds only at smaller values is not looked for\n",
          vary->key.c_str(), static_cast<long long>(vary->hi), objs.c_str(), opt.policy.c_str());
    if (!found.monotone)
      std::printf("warning: the objectives are not monotone in %s here (a value above the answer fails)\n",
                  vary->key.c_str());
  }
  return 0;
}

}  // namespace slicesched::cli
