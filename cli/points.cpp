module;
#include <tbb/parallel_for_each.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

module slicesched.cli.points;
import slicesched.cli.fail;
import slicesched.cli.progress;
import slicesched.cli.report;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.compose.setup;
import slicesched.core.status;

namespace slicesched::cli {

std::string describe(const std::vector<planning::SweepAxis>& axes, const planning::SweepPoint& point) {
  std::string s;
  for (std::size_t a = 0; a < axes.size(); ++a)
    s += (a ? ", " : "") + axes[a].name + "=" + planning::display(point.values[a]);
  return s.empty() ? "the config as it is" : s;
}

PreparedPoint prepare_point(const std::string& config, const std::vector<ConfigOverride>& base,
                            const planning::SweepPoint& point, const std::vector<planning::SweepAxis>& axes,
                            const std::vector<std::string>& filter, const PluginRegistries& plugins,
                            bool with_reference) {
  std::vector<ConfigOverride> all = base;
  for (const auto& o : planning::overrides(axes, point)) all.push_back(o);
  auto cfg = load_config(config, all);
  if (!cfg.ok()) fail(cfg.status().message());
  PreparedPoint p;
  p.point = point;
  p.cfg = std::move(cfg).value();
  const std::string where = "point " + std::to_string(point.index) + " (" + describe(axes, point) + ")";
  for (const std::string& name : filter) (void)value_or_fail(find_policy(p.cfg, name));
  for (const auto& q : p.cfg.policies)
    if (filter.empty() || std::find(filter.begin(), filter.end(), q.name) != filter.end()) p.policies.push_back(q.name);
  const std::string& baseline = p.cfg.slo_baseline;
  if (with_reference && !baseline.empty() &&
      std::find(p.policies.begin(), p.policies.end(), baseline) == p.policies.end())
    p.reference = baseline;
  for (const auto& q : p.cfg.policies)
    if (std::find(p.policies.begin(), p.policies.end(), q.name) != p.policies.end() || p.reference == q.name)
      if (Status s = check_policies(p.cfg, plugins, q.name); !s.ok()) fail(where + ": " + s.message());
  if (Status s = check_traces_fit(p.cfg); !s.ok()) fail(where + ": " + s.message());
  auto truths = load_truths(p.cfg);
  if (!truths.ok()) fail(where + ": " + truths.status().message());
  p.truths = std::move(truths).value();
  return p;
}

void print_ground_truth(const std::vector<PreparedPoint>& points, const std::vector<planning::SweepAxis>& axes) {
  struct Set {
    std::vector<std::string> lines;
    std::string where;  // the first points ("k=v; k=v"), then how many more
    std::size_t points = 0;
  };
  std::vector<Set> sets;
  constexpr std::size_t kNamed = 8;
  for (const PreparedPoint& p : points) {
    std::vector<std::string> lines = ground_truth_lines(p.cfg, truth_played(p.cfg, p.truths));
    auto it = std::find_if(sets.begin(), sets.end(), [&](const Set& s) { return s.lines == lines; });
    if (it == sets.end()) it = sets.insert(sets.end(), Set{std::move(lines), "", 0});
    if (it->points++ < kNamed) it->where += (it->where.empty() ? "" : "; ") + describe(axes, p.point);
  }
  for (Set& s : sets)
    if (s.points > kNamed) s.where += " and " + std::to_string(s.points - kNamed) + " more point(s)";
  if (sets.size() == 1) {
    for (const std::string& line : sets[0].lines) std::fprintf(stderr, "slicesched: %s\n", line.c_str());
    return;
  }
  std::fprintf(stderr, "slicesched: the ground truth differs across points (compare their figures with care):\n");
  for (const Set& s : sets) {
    std::fprintf(stderr, "slicesched: at %s:\n", s.where.c_str());
    if (s.lines.empty()) std::fprintf(stderr, "slicesched:   every accelerator plays the measured profile\n");
    for (const std::string& line : s.lines) std::fprintf(stderr, "slicesched:   %s\n", line.c_str());
  }
}

namespace {

std::string clock(double s) {
  char b[32];
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    std::snprintf(b, sizeof b, "%ldm%02lds", t / 60, t % 60);
  return b;
}

}  // namespace

std::vector<PointResult> run_points(const std::vector<PreparedPoint>& points, const PluginRegistries& plugins, int jobs,
                                    const std::string& label, const std::atomic<int>* stop) {
  const auto stopped = [&] { return stop && stop->load() > 0; };
  struct Task {
    std::size_t point;
    const PolicyConfig* policy;
    bool simulated;  // a what-if policy: the long runs, started first
  };
  std::vector<Task> tasks;
  for (std::size_t i = 0; i < points.size(); ++i)
    for (const auto& q : points[i].cfg.policies)
      if (std::find(points[i].policies.begin(), points[i].policies.end(), q.name) != points[i].policies.end() ||
          points[i].reference == q.name)
        tasks.push_back({i, &q, q.placement.name == "simulation-guided" || !q.stages.empty()});
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.simulated > b.simulated; });

  std::vector<std::vector<std::optional<PolicyRun>>> runs(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) runs[i].resize(points[i].cfg.policies.size());
  std::mutex mu;
  std::size_t done = 0;
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  const bool tty = stderr_is_tty();
  int last_decile = -1;
  auto report = [&] {
    if (label.empty()) return;  // the caller reports
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = done ? elapsed / static_cast<double>(done) * static_cast<double>(tasks.size() - done) : 0;
    const int pct = tasks.empty() ? 100 : static_cast<int>(100 * done / tasks.size());
    if (tty) {
      std::fprintf(stderr, "\r  %s [%-40s] %3d%%  %zu/%zu runs  elapsed %s  ETA %s ", label.c_str(),
                   std::string(static_cast<std::size_t>(pct * 40 / 100), '#').c_str(), pct, done, tasks.size(),
                   clock(elapsed).c_str(), done ? clock(eta).c_str() : "?");
    } else if (pct / 10 != last_decile) {
      last_decile = pct / 10;
      std::fprintf(stderr, "  %s: %d%% (%zu/%zu runs, elapsed %s, ETA %s)\n", label.c_str(), pct, done, tasks.size(),
                   clock(elapsed).c_str(), done ? clock(eta).c_str() : "?");
    }
  };
  {
    std::lock_guard lock(mu);
    report();
  }
  tbb::task_arena arena(std::max(1, jobs));
  arena.execute([&] {
    tbb::parallel_for_each(tasks.begin(), tasks.end(), [&](const Task& t) {
      {
        std::lock_guard lock(mu);
        if (!error.empty() || stopped()) return;
      }
      const PreparedPoint& p = points[t.point];
      std::optional<PolicyRun> run;
      std::string failure;
      // One run per worker: what-ifs stay on this thread. Only the
      // figures are kept (no timeline, no request records).
      auto parts = build_policy(p.cfg, *t.policy, plugins,
                                {.prior = p.truths.prior ? &*p.truths.prior : nullptr, .parallel = false});
      auto ran = parts.ok() ? run_offline(p.cfg, *parts.value(), p.truths,
                                          {.timeline_s = -1, .keep_requests = false, .stop = stop, .origin = {}})
                            : Result<PolicyRun>(parts.status());
      if (ran.ok())
        run = std::move(ran).value();
      else
        failure = "point " + std::to_string(p.point.index) + ": " + ran.status().message();
      std::lock_guard lock(mu);
      if (!failure.empty()) {
        if (error.empty()) error = failure;
        return;
      }
      const auto index = static_cast<std::size_t>(t.policy - p.cfg.policies.data());
      runs[t.point][index] = std::move(run);
      ++done;
      report();
    });
  });
  if (tty && !label.empty()) std::fprintf(stderr, "\n");
  if (stopped()) return {};  // (a run it cut short reads as failed: not an error)
  if (!error.empty()) fail(error);

  std::vector<PointResult> out(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    const PreparedPoint& p = points[i];
    std::vector<PolicyRun> ran;
    for (auto& r : runs[i])
      if (r) ran.push_back(std::move(*r));
    // Against the point's baseline run (slo_baseline), or n/a (null) without one.
    apply_slo(ran, slo_basis(ran, p.cfg.slo_baseline));
    for (const std::string& name : p.policies)
      for (PolicyRun& r : ran)
        if (r.name == name) {
          out[i].entries.push_back(policy_summary(r));
          out[i].wall_s.push_back(r.wall_s);
        }
  }
  return out;
}

}  // namespace slicesched::cli
