// `slicesched sweep CONFIG --set KEY=V1,V2 ... --out DIR`: every policy at
// every point of a grid of config overrides, run in parallel; sweep.csv,
// sweep.json and plots of each figure against each swept key.
// `slicesched sweep-merge DIR... --out DIR` joins the shards of one sweep.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"

import slicesched.compose.experiment;
import slicesched.cli.fail;
import slicesched.cli.points;
import slicesched.cli.signals;
import slicesched.core.files;
import slicesched.engine.metrics;
import slicesched.planning.rows;
import slicesched.compose.policy;
import slicesched.compose.setup;
import slicesched.config;
import slicesched.core.plugin;
import slicesched.cli.report;
import slicesched.core.status;
import slicesched.hardware.roofline;
import slicesched.planning.grid;

namespace slicesched::cli {

namespace {

namespace fs = std::filesystem;
using planning::SweepTable;

void write(const fs::path& path, const std::string& content) {
  if (Status s = write_file_atomically(path.string(), content); !s.ok()) throw std::runtime_error(s.message());
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path + ": cannot read");
  std::ostringstream o;
  o << f.rdbuf();
  return o.str();
}

// The config's bytes and every file it names, each after its path: what the
// shards of one sweep must agree on (a trace changed between two shards'
// runs would merge rows of two loads). A file that cannot be read counts as
// its path alone.
std::string inputs_text(const std::string& config, const ExperimentConfig& cfg) {
  std::vector<std::string> files;
  for (const TenantConfig& t : cfg.tenants)
    if (!t.stream.path.empty()) files.push_back(t.stream.path);
  const GroundTruthConfig& g = cfg.ground_truth;
  for (const std::string* f :
       {&g.layers_csv, &g.transfers_csv, &g.all_reduce_csv, &g.calibrated, &g.roofline_fit, &cfg.estimator_prior})
    if (!f->empty()) files.push_back(*f);
  files.insert(files.end(), g.layers_tp_csvs.begin(), g.layers_tp_csvs.end());
  for (const ModelConfig& m : cfg.models)
    if (!m.hf_config.empty()) files.push_back(m.hf_config);
  for (const AcceleratorType& a : cfg.accelerator_types)
    if (!a.source.empty()) files.push_back(a.source);
  for (const std::string& p : cfg.plugin_paths) files.push_back(p);
  std::string text = read_text(config);
  for (const std::string& f : files) {
    text += "\n" + f + "\n";
    std::ifstream in(f, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return text;
}

// The output folder must be creatable and writable before anything runs.
// Returns whether it made the folder (a sweep stopped before writing takes
// it away again).
bool check_out(const std::string& out) {
  const fs::path dir(out);
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  if (existed && !fs::is_directory(dir, ec)) fail("--out " + out + ": exists and is not a folder");
  fs::create_directories(dir, ec);
  if (ec) fail("--out " + out + ": cannot create (" + ec.message() + ")");
  const fs::path probe = dir / ".slicesched-write-check";
  std::ofstream f(probe);
  if (!f) fail("--out " + out + ": not writable");
  f.close();
  fs::remove(probe, ec);
  return !existed;
}

std::string slug(const std::string& s) {
  std::string o;
  for (char c : s) o += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  return o;
}

bool numeric(const std::string& v, double& out) {
  char* end = nullptr;
  out = std::strtod(v.c_str(), &end);
  return !v.empty() && end && *end == '\0' && std::isfinite(out);
}

// One PNG per (figure, swept key): a line per policy (and per value of the
// other keys, when there are several). Returns whether the images were
// drawn (false: no gnuplot, or it failed; the data and script are there).
// A figure n/a at every point is not plotted (gnuplot stops at a plot
// with no point, and the images after it were never drawn).
bool plots(const fs::path& dir, const SweepTable& t) {
  static const std::vector<std::string> figures = {"token_throughput", "request_throughput", "slo_attainment",
                                                   "gpu_utilization", "ttft_p90_s"};
  const fs::path pd = dir / "plots";
  fs::create_directories(pd);
  std::ostringstream gp;
  gp << "set terminal png size 900,560\nset grid\nset key outside right\n";
  for (std::size_t a = 0; a < t.axes.size(); ++a) {
    const auto& axis = t.axes[a];
    if (axis.values.size() < 2) continue;  // nothing to draw a line through
    bool all_numeric = true;
    double lo = 1e300, hi = -1e300;
    for (const auto& v : axis.values) {
      double x;
      all_numeric &= numeric(planning::display(v), x);
      if (all_numeric) lo = std::min(lo, x), hi = std::max(hi, x);
    }
    const bool logx = all_numeric && lo > 0 && hi / lo >= 16;
    // Lines: policy x the other axes' values.
    std::map<std::string, std::vector<const planning::SweepRow*>> lines;
    std::vector<std::string> order;
    for (const auto& r : t.rows) {
      std::string name = r.policy;
      for (std::size_t b = 0; b < t.axes.size(); ++b)
        if (b != a) name += ", " + t.axes[b].name + "=" + planning::display(r.values[b]);
      if (!lines.count(name)) order.push_back(name);
      lines[name].push_back(&r);
    }
    for (const std::string& figure : figures) {
      if (std::none_of(t.rows.begin(), t.rows.end(),
                       [&](const planning::SweepRow& r) { return std::isfinite(planning::figure(r, figure)); }))
        continue;
      const std::string title(find_run_figure(figure)->label);
      const std::string png = slug(figure) + "_vs_" + slug(axis.name) + ".png";
      gp << "set output '" << png << "'\nset title '" << title << " vs " << axis.name << "'\nset xlabel '" << axis.name
         << "'\nset ylabel '" << title << "'\n"
         << (logx ? "set logscale x 2\n" : "unset logscale x\n") << "set yrange [0:*]\nplot ";
      for (std::size_t l = 0; l < order.size(); ++l) {
        std::ostringstream d;
        for (const planning::SweepRow* r : lines[order[l]]) {
          const auto pos = std::find(axis.values.begin(), axis.values.end(), r->values[a]) - axis.values.begin();
          const std::string x = planning::display(r->values[a]);
          d << (all_numeric ? x : std::to_string(pos)) << ' ' << planning::figure(*r, figure) << " \"" << x << "\"\n";
        }
        const std::string f = slug(figure) + "_" + slug(axis.name) + "_" + std::to_string(l) + ".dat";
        write(pd / f, d.str());
        gp << (l ? ", " : "") << "'" << f << "' using 1:2" << (all_numeric ? "" : ":xtic(3)")
           << " with linespoints lw 2 title '" << order[l] << "'";
      }
      gp << "\n";
    }
  }
  write(pd / "plots.gp", gp.str());
  return t.axes.empty() || draw_plots(pd, gp.str());
}

void print_table(const SweepTable& t) {
  std::printf("\n");
  for (const auto& a : t.axes) std::printf("%-14s ", a.name.c_str());
  std::printf("%-16s %9s %9s %9s %7s %7s %7s\n", "policy", "req/s", "tok/s", "TTFT p90", "SLO", "GPU", "done");
  for (const auto& r : t.rows) {
    for (const auto& v : r.values) std::printf("%-14s ", planning::display(v).c_str());
    // NaN is n/a: SLO attainment without a baseline at that point, TTFT
    // without an online first token, done without a request.
    auto shown = [&](const char* figure, double scale, const char* unit) {
      const double v = planning::figure(r, figure);
      return std::isnan(v) ? std::string("n/a") : fmt::format("{:.{}f}{}", scale * v, scale == 1 ? 3 : 1, unit);
    };
    std::printf("%-16s %9.3f %9.1f %9s %7s %6.1f%% %7s\n", r.policy.c_str(), planning::figure(r, "request_throughput"),
                planning::figure(r, "token_throughput"), shown("ttft_p90_s", 1, "s").c_str(),
                shown("slo_attainment", 100, "%").c_str(), 100 * planning::figure(r, "gpu_utilization"),
                shown("done", 100, "%").c_str());
  }
}

// The tables together or not at all (a full disk keeps the last ones
// whole), then the plots. Returns whether the images were drawn.
bool write_outputs(const fs::path& dir, const SweepTable& t, bool wall) {
  StagedFiles files;
  auto stage = [&](const fs::path& path, const std::string& content) {
    if (Status s = files.add(path.string(), content); !s.ok())
      throw std::runtime_error(s.message() + "; no result of this sweep was put in place");
  };
  stage(dir / "sweep.csv", planning::to_csv(t));
  stage(dir / "sweep.json", planning::to_json(t).dump(2) + "\n");
  if (wall) stage(dir / "sweep_wall.csv", planning::wall_csv(t));
  if (Status s = files.commit(); !s.ok()) throw std::runtime_error(s.message());
  // (A merge has no wall times: an earlier sweep's would not be its own.)
  std::error_code ec;
  if (!wall) fs::remove(dir / "sweep_wall.csv", ec);
  return plots(dir, t);
}

}  // namespace

int sweep(const SweepOptions& opt) {
  std::vector<planning::SweepAxis> axes;
  for (const auto& s : opt.sets) {
    auto axis = planning::parse_axis(s);
    if (!axis.ok()) fail(axis.status().message());
    axes.push_back(std::move(axis).value());
  }
  check(planning::check_axes(axes));
  planning::Shard shard;
  if (opt.shard) {
    auto s = planning::parse_shard(*opt.shard);
    if (!s.ok()) fail(s.status().message());
    shard = s.value();
  }
  const auto opened = value_or_fail(open_experiment(opt.config, {.prior = false}));
  const ExperimentConfig* const base = &opened->cfg;
  const PluginRegistries& plugins = opened->plugins;

  const auto grid = planning::expand(axes);
  // (a shard past the points would run nothing and write an empty table)
  if (opt.shard && shard.index >= grid.size())
    check(InvalidArgument("--shard " + *opt.shard + ": the grid has " + std::to_string(grid.size()) +
                          " point(s): shard " + std::to_string(shard.index) + " would run none (expected at most " +
                          std::to_string(grid.size()) + " shards)"));
  const auto mine = planning::select(grid, shard);
  // Every point's config is loaded and checked before anything runs (a
  // few ms each: a large grid says so first, not after a silent minute).
  if (mine.size() >= 1000) std::fprintf(stderr, "sweep: checking %zu point(s) before running any\n", mine.size());
  std::vector<PreparedPoint> points;
  for (const auto& p : mine) points.push_back(prepare_point(opt.config, {}, p, axes, opt.policies, plugins));
  print_ground_truth(points, axes);
  // (after the points: a bad one made an empty --out folder)
  const bool made_out = check_out(opt.out);

  // Ctrl-C (SIGINT) or SIGTERM: the runs end at their next event and
  // nothing is written (rows cut short would look complete); an --out
  // folder the sweep made is taken away again if it is still empty. A
  // second signal stops the process at once.
  const StopSignals signals(
      {.second_kills = true,
       .first_cancels = true,
       .first_line = "\nslicesched: stopping: each run ends at its next event (a plugin still deciding returns "
                     "first); Ctrl-C again to stop now\n"});
  const int jobs = opt.jobs > 0 ? opt.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The SLO baseline, run beside the policies a point reports, counts in
  // the progress line's runs: said here, so the two numbers agree.
  std::size_t references = 0;
  std::string baseline;  // (a sweep over slo_baseline names the first)
  for (const PreparedPoint& p : points)
    if (p.reference) {
      if (references++ == 0) baseline = *p.reference;
    }
  std::fprintf(stderr, "sweep: %zu point(s)%s x %zu polic%s%s on %d thread(s)\n", points.size(),
               opt.shard ? (" (shard " + *opt.shard + " of " + std::to_string(grid.size()) + ")").c_str() : "",
               points.empty() ? 0 : points[0].policies.size(),
               !points.empty() && points[0].policies.size() == 1 ? "y" : "ies",
               references == 0 ? ""
                               : (", plus the SLO baseline '" + baseline + "' at " +
                                  (references == points.size() ? std::string("each") : std::to_string(references)) +
                                  " (" + std::to_string(references) + " run(s) more)")
                                     .c_str(),
               jobs);
  const auto results = run_points(points, plugins, jobs, "sweep", &signals.stop());
  if (signals.count() > 0) {
    std::error_code ec;
    if (made_out && fs::is_empty(opt.out, ec)) fs::remove(opt.out, ec);
    std::fprintf(stderr, "\nslicesched: %s: sweep stopped while running; nothing written%s\n", signals.name(),
                 made_out ? "" : (" (" + opt.out + " is as it was)").c_str());
    return 128 + signals.last();  // 130 for SIGINT, 143 for SIGTERM
  }

  SweepTable t;
  t.config = opt.config;
  t.config_hash = planning::fnv1a64_hex(inputs_text(opt.config, *base));
  t.seed = base->seed;
  t.axes = axes;
  for (const auto& q : base->policies)
    if (opt.policies.empty() || std::find(opt.policies.begin(), opt.policies.end(), q.name) != opt.policies.end())
      t.policies.push_back(q.name);
  t.points_total = grid.size();
  if (opt.shard) t.shard = shard;
  for (std::size_t i = 0; i < points.size(); ++i)
    for (std::size_t k = 0; k < points[i].policies.size(); ++k) {
      auto row = planning::make_row(points[i].point, points[i].policies[k], results[i].entries[k]);
      row.wall_s = results[i].wall_s[k];
      t.rows.push_back(std::move(row));
    }
  planning::sort_rows(t);
  print_table(t);
  const bool drawn = write_outputs(opt.out, t, true);
  std::printf("\nwrote %s/sweep.csv, sweep.json, sweep_wall.csv and plots/%s\n", opt.out.c_str(),
              drawn ? "" : " (data and script only)");
  return 0;
}

int sweep_merge(const SweepMergeOptions& opt) {
  std::vector<SweepTable> shards;
  std::vector<std::string> names;
  for (const auto& d : opt.dirs) {
    const std::string path = (fs::path(d) / "sweep.json").string();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text(path));
    } catch (const nlohmann::json::exception& e) {  // not JSON, or a number out of range
      fail(path + ": not JSON (" + e.what() + ")");
    }
    auto t = planning::from_json(j, path);
    if (!t.ok()) fail(t.status().message());
    shards.push_back(std::move(t).value());
    names.push_back(path);
  }
  auto merged = planning::merge(std::move(shards), names);
  if (!merged.ok()) fail(merged.status().message());
  check_out(opt.out);
  print_table(merged.value());
  const bool drawn = write_outputs(opt.out, merged.value(), false);
  std::printf("\nmerged %zu shard(s) into %s/sweep.csv, sweep.json and plots/%s\n", opt.dirs.size(), opt.out.c_str(),
              drawn ? "" : " (data and script only)");
  return 0;
}

}  // namespace slicesched::cli
