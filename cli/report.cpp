module;
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"

module slicesched.cli.report;
import slicesched.config;
import slicesched.core.files;
import slicesched.core.calibration;
import slicesched.core.ids;
import slicesched.core.status;
import slicesched.engine.metrics;
import slicesched.engine.observer;
import slicesched.engine.recorders;
import slicesched.engine.tenant;
import slicesched.hardware.roofline;
import slicesched.models.work;

namespace slicesched::cli {

namespace {

namespace fs = std::filesystem;

// Results are written atomically; a failure ends the command with its message.
void write_file(const fs::path& path, const std::string& content) {
  if (Status s = write_file_atomically(path.string(), content); !s.ok()) throw std::runtime_error(s.message());
}

// A result staged with the others (core/files' StagedFiles): a failure
// says that nothing of this run was put in place.
void stage(StagedFiles& files, const fs::path& path, const std::string& content) {
  if (Status s = files.add(path.string(), content); !s.ok())
    throw std::runtime_error(s.message() + "; no result of this run was put in place");
}

std::string slug(const std::string& name) { return file_stem(name); }

double round6(double v) { return std::round(v * 1e6) / 1e6; }

// What report() writes, relative to --out: named once here, so check_out
// looks for clashes at exactly the paths that are written.
const fs::path kSummary = "summary.json", kTiming = "timing.json", kPlots = "plots", kDecisions = "decisions.jsonl";
fs::path requests_file(const std::string& policy) { return "requests_" + slug(policy) + ".csv"; }
fs::path accelerators_file(const std::string& policy) { return "accelerators_" + slug(policy) + ".csv"; }
fs::path trace_file(const std::string& policy) { return "trace_" + slug(policy) + ".json"; }
fs::path calibration_file(const std::string& policy) { return "calibration_" + slug(policy) + ".json"; }
fs::path plot_data(const std::string& figure, const std::string& policy) {
  return kPlots / (figure + "_" + slug(policy) + ".dat");
}
const char* const kPlotFiles[] = {"throughput.dat",      "plots.gp",        "ttft_cdf.png",
                                  "idle_slices_cdf.png", "utilization.png", "throughput.png"};

std::vector<fs::path> output_files(const std::vector<std::string>& policies, bool explain) {
  std::vector<fs::path> files{kSummary, kTiming};
  if (explain) files.push_back(kDecisions);
  for (const std::string& p : policies)
    for (const fs::path& f : {requests_file(p), accelerators_file(p), trace_file(p), calibration_file(p),
                              plot_data("ttft", p), plot_data("idle", p), plot_data("util", p)})
      files.push_back(f);
  for (const char* f : kPlotFiles) files.push_back(kPlots / f);
  return files;
}

std::string percent_or_na(const std::optional<double>& v, int width) {
  return v ? fmt::format("{:>{}.1f}%", 100 * *v, width - 1) : fmt::format("{:>{}}", "n/a", width);
}

// A figure as engine/metrics declares it (nullopt: n/a, nothing to measure).
std::optional<double> figure(const RunMetrics& m, std::string_view name) {
  return find_run_figure(name)->read(m, RunLoad{});
}

// `v` scaled, in `format` ("{:8.3f}s"), or n/a right-aligned in `width` columns.
std::string shown_or_na(const std::optional<double>& v, double scale, std::string_view format, int width) {
  return v ? fmt::format(fmt::runtime(format), scale * *v) : fmt::format("{:>{}}", "n/a", width);
}

void print_table(const std::vector<PolicyRun>& runs, const SloBasis& slo) {
  std::printf("\n%-16s %9s %9s %9s %9s %9s %9s %8s %7s %6s %7s\n", "policy", "req/s", "tok/s", "TTFT p50", "TTFT p90",
              "TTFT p99", "TPOT ms", "SLO", "GPU", "done", "wall s");
  for (const PolicyRun& r : runs) {
    const RunMetrics& m = r.metrics;
    std::printf("%-16s %9.3f %9.1f %s %s %s %s %s %6.1f%% %s %7.1f\n", r.name.c_str(), m.request_throughput,
                m.token_throughput, shown_or_na(figure(m, "ttft_p50_s"), 1, "{:8.3f}s", 9).c_str(),
                shown_or_na(figure(m, "ttft_p90_s"), 1, "{:8.3f}s", 9).c_str(),
                shown_or_na(figure(m, "ttft_p99_s"), 1, "{:8.3f}s", 9).c_str(),
                shown_or_na(figure(m, "tpot_mean_s"), 1e3, "{:9.2f}", 9).c_str(),
                percent_or_na(m.slo_attainment, 8).c_str(), 100 * m.gpu_utilization,
                percent_or_na(figure(m, "done"), 6).c_str(), r.wall_s);
  }
  if (slo.threshold_s)
    std::printf("\nSLO threshold (%s): %.3f s\n", slo.basis.c_str(), *slo.threshold_s);
  else
    std::printf("\nSLO attainment n/a: %s\n", slo.basis.c_str());
}

nlohmann::json summary(const ExperimentConfig& cfg, const std::vector<PolicyRun>& runs, const SloBasis& slo,
                       const nlohmann::json& ground_truth) {
  nlohmann::json j;
  j["config"] = cfg.name;
  if (!ground_truth.is_null()) j["ground_truth"] = ground_truth;
  j["seed"] = cfg.seed;
  j["slo_threshold_s"] = slo.threshold_s ? nlohmann::json(round6(*slo.threshold_s)) : nlohmann::json(nullptr);
  j["slo_basis"] = slo.basis;
  for (const PolicyRun& r : runs) j["policies"][r.name] = policy_summary(r);
  return j;
}

// A CSV field: quoted (quotes doubled) when it holds a comma, quote or line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string requests_csv(const PolicyRun& r) {
  std::ostringstream o;
  // `id` is the request's row (from 0): what decisions.jsonl and
  // `slicesched explain --request` call it.
  o << "id,tenant,arrival_s,input_tokens,output_tokens,generated,first_token_s,done_s,ttft_s,error\n";
  std::size_t id = 0;
  for (const RequestRecord& q : r.requests) {
    auto s = [](Nanos t) { return t < 0 ? std::string() : std::to_string(static_cast<double>(t) / 1e9); };
    o << id++ << ',' << r.tenant_names[q.tenant] << ',' << s(q.arrival) << ',' << q.input_tokens << ','
      << q.output_tokens << ',' << q.generated << ',' << s(q.first_token) << ',' << s(q.done) << ','
      << (q.first_token < 0 ? std::string() : std::to_string(static_cast<double>(q.first_token - q.arrival) / 1e9))
      << ',' << csv_field(q.error) << '\n';
  }
  return o.str();
}

// What each GPU of accelerator `a` held at its peak, in bytes: a
// tensor-parallel group's account plus every rank's copies, over its GPUs
// (each holds an equal share); an accelerator's own peak otherwise.
double peak_bytes_per_gpu(const PolicyRun& r, std::size_t a) {
  const std::int64_t copies = a < r.accel_copies.size() ? r.accel_copies[a] : 0;
  const int gpus = a < r.accel_gpus.size() ? std::max(1, r.accel_gpus[a]) : 1;
  return static_cast<double>(r.memory.peak[a] + copies) / gpus;
}

std::string accelerators_csv(const PolicyRun& r) {
  std::ostringstream o;
  // The HBM columns per accelerator: summary.json's peak_hbm_gib and
  // peak_hbm_fraction are maxima that may come from different ones.
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  // A tensor-parallel group's row is the group's; `gpus` and the last
  // column say what its busiest GPU held (each holds an equal share).
  o << "accelerator,busy_s,utilization,peak_hbm_gib,hbm_gib,gpus,peak_hbm_gib_per_gpu\n";
  for (std::size_t a = 0; a < r.accel_names.size(); ++a) {
    o << r.accel_names[a] << ',' << r.metrics.accel_busy_s[a] << ','
      << (r.metrics.span_s > 0 ? r.metrics.accel_busy_s[a] / r.metrics.span_s : 0.0) << ',';
    if (a < r.memory.peak.size()) o << static_cast<double>(r.memory.peak[a]) / kGiB;
    o << ',';
    if (a < r.memory.budget.size()) o << static_cast<double>(r.memory.budget[a]) / kGiB;
    const int gpus = a < r.accel_gpus.size() ? r.accel_gpus[a] : 1;
    o << ',' << gpus << ',';
    if (a < r.memory.peak.size()) o << peak_bytes_per_gpu(r, a) / kGiB;
    o << '\n';
  }
  return o.str();
}

// Chrome trace JSON: one lane per accelerator and per link (source ->
// destination), and one per tenant whose KV caches crossed its host link
// (hand-offs, swaps); slices are named by tenant so Perfetto colours them by
// tenant. Beside each accelerator's lane, a "predicted" lane holds where
// the what-if expected each operator (simulating policies only), and a
// "scheduler" lane the rounds as instant events (with --explain). Written
// straight into one string, not through a JSON document: a large
// cluster's trace holds hundreds of thousands of slices, and a document of
// them took gigabytes and seconds.
std::string chrome_trace(const PolicyRun& r, double seconds) {
  const Nanos until = static_cast<Nanos>(seconds * 1e9);
  auto quoted = [](const std::string& s) {  // escaped; bytes that are not UTF-8 as U+FFFD
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::vector<std::string> tenants;
  for (const auto& t : r.tenant_names) tenants.push_back(quoted(t));
  std::string out = R"({"displayTimeUnit":"ms","traceEvents":[)";
  // The process is the policy (Perfetto showed "Process 1").
  fmt::format_to(std::back_inserter(out), R"({{"args":{{"name":{}}},"name":"process_name","ph":"M","pid":1}})",
                 quoted(r.name));
  // Lanes are shown in `order`: each accelerator, its predicted lane right
  // after it, then the links, then the scheduler.
  auto lane = [&](int tid, const std::string& name, long order) {
    fmt::format_to(std::back_inserter(out),
                   R"(,{{"args":{{"name":{}}},"name":"thread_name","ph":"M","pid":1,"tid":{}}})", quoted(name), tid);
    fmt::format_to(std::back_inserter(out),
                   R"(,{{"args":{{"sort_index":{}}},"name":"thread_sort_index","ph":"M","pid":1,"tid":{}}})", order,
                   tid);
  };
  std::map<std::pair<AccelId, AccelId>, int> link_lane;
  const int n = static_cast<int>(r.accel_names.size());
  for (int a = 0; a < n; ++a) lane(a, r.accel_names[a], 2L * a);
  // Lane ids: accelerators 0..n-1, links from n up, predicted lanes from
  // 2^29 + a, the scheduler at 2^30 (apart from any link's).
  constexpr int kPredicted = 1 << 29, kScheduler = 1 << 30;
  std::vector<bool> predicted_lane(static_cast<std::size_t>(n), false);
  if (!r.decisions.empty()) {
    lane(kScheduler, "scheduler", 1L << 40);
    for (const DecisionLog::Line& d : r.decisions) {
      if (d.t > until) continue;
      fmt::format_to(std::back_inserter(out),
                     R"(,{{"args":{},"cat":"round","name":"round","ph":"i","pid":1,"s":"t","tid":{},"ts":{}}})", d.json,
                     kScheduler, static_cast<double>(d.t) / 1e3);
    }
  }
  for (const RunRecord& x : r.log) {
    if (x.start > until) continue;
    if (x.to == kNoAccel && x.predicted_start >= 0 && x.predicted_finish >= x.predicted_start &&
        x.accel < predicted_lane.size()) {
      if (!predicted_lane[x.accel]) {
        predicted_lane[x.accel] = true;
        lane(kPredicted + static_cast<int>(x.accel), r.accel_names[x.accel] + " (predicted)", 2L * x.accel + 1);
      }
      fmt::format_to(
          std::back_inserter(out),
          R"(,{{"args":{{"op":{},"actual_start_us":{},"actual_finish_us":{}}},"cat":"predicted","dur":{},"name":{},"ph":"X","pid":1,"tid":{},"ts":{}}})",
          x.op, static_cast<double>(x.start) / 1e3, static_cast<double>(x.finish) / 1e3,
          static_cast<double>(x.predicted_finish - x.predicted_start) / 1e3, tenants[x.tenant],
          kPredicted + static_cast<int>(x.accel), static_cast<double>(x.predicted_start) / 1e3);
    }
    int tid = static_cast<int>(x.accel);
    const char* what = "op";
    if (x.to != kNoAccel) {
      auto key = std::pair{x.accel, x.to};
      auto it = link_lane.find(key);
      if (it == link_lane.end()) {
        it = link_lane.emplace(key, n + static_cast<int>(link_lane.size())).first;
        lane(it->second, r.accel_names[x.accel] + " -> " + r.accel_names[x.to], 2L * n + it->second);
      }
      tid = it->second;
      what = "transfer";
    }
    if (x.lost) what = "lost";  // (no work came of it: not a finished operator)
    std::string args = fmt::format(R"("op":{})", x.op);
    if (x.predicted_start >= 0 && x.predicted_finish >= 0)
      fmt::format_to(std::back_inserter(args), R"(,"predicted_start_us":{},"predicted_finish_us":{})",
                     static_cast<double>(x.predicted_start) / 1e3, static_cast<double>(x.predicted_finish) / 1e3);
    fmt::format_to(std::back_inserter(out),
                   R"(,{{"args":{{{}}},"cat":"{}","dur":{},"name":{},"ph":"X","pid":1,"tid":{},"ts":{}}})", args, what,
                   static_cast<double>(x.finish - x.start) / 1e3, tenants[x.tenant], tid,
                   static_cast<double>(x.start) / 1e3);
  }
  // Each tenant's host link: a hand-off's or a swap's copy to host memory,
  // then the copy back, as two slices.
  constexpr int kHostLink = 1 << 28;
  std::vector<bool> host_lane(r.tenant_names.size(), false);
  for (const auto& [tenant, c] : r.host_copies) {
    if (c.start > until || c.start > r.host_copies_until || tenant >= host_lane.size()) continue;
    const int tid = kHostLink + static_cast<int>(tenant);
    if (!host_lane[tenant]) {
      host_lane[tenant] = true;
      lane(tid, r.tenant_names[tenant] + " <-> host", (1L << 39) + tenant);
    }
    const char* what = c.handoff ? "hand-off" : "swap";
    for (int back = 0; back < (c.start + c.copy <= r.host_copies_until ? 2 : 1); ++back)
      fmt::format_to(
          std::back_inserter(out),
          R"(,{{"args":{{"bytes":{},"sequences":{},"direction":"{}"}},"cat":"host_copy","dur":{},"name":"{} {}","ph":"X","pid":1,"tid":{},"ts":{}}})",
          c.bytes, c.sequences, back ? "from host" : "to host", static_cast<double>(c.copy) / 1e3, what,
          back ? "back" : "out", tid, static_cast<double>(c.start + back * c.copy) / 1e3);
  }
  out += "]}";
  return out;
}

// PNG plots through gnuplot (Debian's gnuplot-nox): the data files and the
// script stay next to the images, so a user can restyle them.
void plots(const fs::path& dir, const std::vector<PolicyRun>& runs) {
  const fs::path pd = dir / kPlots;
  fs::create_directories(pd);
  std::ostringstream gp;
  gp << "set terminal png size 900,560\nset grid\nset key bottom right\n";
  // A plot whose every series is empty (a server no online request reached)
  // gets fixed ranges: gnuplot stops at an autoscaled range with no point.
  auto empty_ranges = [&gp](bool empty, const char* x) {
    if (empty) gp << "set xrange " << x << "\nset yrange [0:1]\n";
  };
  auto none = [&runs](auto field) {
    return std::all_of(runs.begin(), runs.end(), [&](const PolicyRun& r) { return field(r).empty(); });
  };
  const bool no_ttft = none([](const PolicyRun& r) -> const auto& { return r.metrics.online_ttft_s; });
  const bool no_idle = none([](const PolicyRun& r) -> const auto& { return r.metrics.idle_slices_s; });
  const bool no_busy = none([](const PolicyRun& r) -> const auto& { return r.metrics.busy_bins_s; });
  // TTFT CDF per policy.
  gp << "set output 'ttft_cdf.png'\nset title 'TTFT of online requests (CDF)" << (no_ttft ? ": none ran" : "")
     << "'\nset xlabel 'TTFT (s)'\nset ylabel 'fraction of requests'\nset logscale x\n";
  empty_ranges(no_ttft, "[0.001:10]");
  gp << "plot ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::ostringstream d;
    const auto& v = runs[i].metrics.online_ttft_s;
    for (std::size_t k = 0; k < v.size(); ++k) d << v[k] << ' ' << static_cast<double>(k + 1) / v.size() << '\n';
    const std::string f = plot_data("ttft", runs[i].name).filename().string();
    write_file(pd / f, d.str());
    gp << (i ? ", " : "") << "'" << f << "' using 1:2 with lines lw 2 title '" << runs[i].name << "'";
  }
  gp << "\nunset logscale x\nset autoscale\n";
  // Idle-slice CDF per policy.
  gp << "set output 'idle_slices_cdf.png'\nset title 'Idle slices between operators (CDF)" << (no_idle ? ": none" : "")
     << "'\nset xlabel 'idle slice (s)'\nset logscale x\n";
  empty_ranges(no_idle, "[0.000001:10]");
  gp << "plot ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::ostringstream d;
    const auto& v = runs[i].metrics.idle_slices_s;
    for (std::size_t k = 0; k < v.size(); k += std::max<std::size_t>(1, v.size() / 2000))
      d << std::max(v[k], 1e-6) << ' ' << static_cast<double>(k + 1) / v.size() << '\n';
    const std::string f = plot_data("idle", runs[i].name).filename().string();
    write_file(pd / f, d.str());
    gp << (i ? ", " : "") << "'" << f << "' using 1:2 with lines lw 2 title '" << runs[i].name << "'";
  }
  gp << "\nunset logscale x\nset autoscale\n";
  // Utilization over time (10 s bins, all accelerators).
  gp << "set output 'utilization.png'\nset title 'GPU utilization over time (10 s bins)'\nset xlabel 'time (s)'\n"
        "set ylabel 'busy fraction'\nset yrange [0:1]\n";
  if (no_busy) gp << "set xrange [0:10]\n";
  gp << "plot ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const double bin = RunMetrics::kBusyBinS;
    const std::vector<double>& busy = runs[i].metrics.busy_bins_s;
    std::ostringstream d;
    for (std::size_t b = 0; b < busy.size(); ++b)
      d << (static_cast<double>(b) + 0.5) * bin << ' '
        << busy[b] / (bin * static_cast<double>(runs[i].accel_names.size())) << '\n';
    const std::string f = plot_data("util", runs[i].name).filename().string();
    write_file(pd / f, d.str());
    gp << (i ? ", " : "") << "'" << f << "' using 1:2 with lines lw 2 title '" << runs[i].name << "'";
  }
  gp << "\nset autoscale\n";
  // Throughput bars.
  {
    std::ostringstream d;
    for (const PolicyRun& r : runs) d << '"' << r.name << "\" " << r.metrics.token_throughput << '\n';
    write_file(pd / "throughput.dat", d.str());
    gp << "set output 'throughput.png'\nset title 'Token throughput'\nset xlabel ''\nset ylabel 'tokens/s'\n"
          "set style fill solid 0.7\nset boxwidth 0.6\nset yrange [0:*]\nunset key\n"
          "plot 'throughput.dat' using 0:2:xtic(1) with boxes\n";
  }
  write_file(pd / "plots.gp", gp.str());
  draw_plots(pd, gp.str());
}

// One line when `dir` also holds per-policy results of policies this run
// did not write (an earlier run's, with --policy or another config): they
// stay, but summary.json does not describe them.
void warn_other_results(const fs::path& dir, const std::vector<const PolicyRun*>& written) {
  std::vector<std::string> ours;
  for (const PolicyRun* r : written)
    for (const fs::path& f :
         {requests_file(r->name), accelerators_file(r->name), trace_file(r->name), calibration_file(r->name)})
      ours.push_back(f.string());
  std::vector<std::string> others;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    const bool result = (f.starts_with("requests_") || f.starts_with("accelerators_")) && f.ends_with(".csv");
    const bool json = (f.starts_with("trace_") || f.starts_with("calibration_")) && f.ends_with(".json");
    if ((result || json) && std::find(ours.begin(), ours.end(), f) == ours.end()) others.push_back(f);
  }
  if (others.empty()) return;
  std::sort(others.begin(), others.end());
  std::string list;
  for (std::size_t i = 0; i < others.size() && i < 4; ++i) list += (i ? ", " : "") + others[i];
  if (others.size() > 4) list += ", ... (" + std::to_string(others.size()) + " in all)";
  std::fprintf(stderr, "slicesched: --out %s also holds results this run did not write (%s): an earlier run's\n",
               dir.string().c_str(), list.c_str());
}

}  // namespace

void check_out(const std::string& out, const std::vector<std::string>& policies, bool explain) {
  const fs::path dir(out);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw std::runtime_error("--out " + out + ": exists and is not a folder (expected a folder or a new path)");
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--out " + out + ": cannot create the folder (" + ec.message() + ")");
  // Permissions alone do not tell (root, read-only mounts): try a file.
  const fs::path probe = dir / ".slicesched-write-check";
  if (!std::ofstream(probe))
    throw std::runtime_error("--out " + out + ": the folder is not writable (expected a writable folder)");
  fs::remove(probe, ec);
  // A leftover of another kind where a result goes would stop the writes
  // halfway through: refuse it now, naming it.
  if (fs::exists(dir / kPlots, ec) && !fs::is_directory(dir / kPlots, ec))
    throw std::runtime_error("--out " + out + ": " + (dir / kPlots).string() +
                             " exists and is not a folder (expected the plots folder or nothing there)");
  for (const fs::path& f : output_files(policies, explain))
    for (const fs::path& p : {dir / f, fs::path((dir / f).string() + ".tmp")})
      if (fs::is_directory(p, ec))
        throw std::runtime_error("--out " + out + ": " + p.string() +
                                 " is a folder (expected a file to replace or nothing there)");
}

nlohmann::json ground_truth_json(const std::vector<TruthPlayed>& played) {
  nlohmann::json j = nlohmann::json::object();
  for (const TruthPlayed& p : played) {
    nlohmann::json& t = j[p.type];
    t["truth"] = p.truth;
    t["source"] = p.source;
    t["datasheet"] = p.datasheet;
    if (!p.roofline_models.empty()) {
      t["roofline_models"] = p.roofline_models;
      t["roofline_source"] = p.roofline_source;
    }
    if (!p.profile_unplayed.empty()) t["profile_unplayed"] = p.profile_unplayed;
    if (p.tp > 1) {
      t["tp"] = p.tp;
      t["all_reduce"] = p.all_reduce;
    }
    if (p.fit)
      for (int k = 0; k < kWorkKinds; ++k) {
        const auto kind = static_cast<WorkKind>(k);
        const KindEfficiency& e = (*p.fit)[kind];
        auto& o = t["efficiencies"][std::string(work_kind_name(kind))];
        o = {{"compute", round6(e.compute)}, {"memory", round6(e.memory)}, {"overhead_us", round6(e.overhead_s * 1e6)}};
        if (std::isfinite(e.overlap_p)) o["overlap_p"] = round6(e.overlap_p);
        if (e.sm_bytes_per_cycle > 0) o["sm_bytes_per_cycle"] = round6(e.sm_bytes_per_cycle);
        if (e.sm_flops_per_cycle > 0) o["sm_flops_per_cycle"] = round6(e.sm_flops_per_cycle);
      }
  }
  return j;
}

// HBM pressure: what waited, what was preempted or failed, and the most
// the ground truth (or the live devices) ever held against the budget.
static nlohmann::json memory_summary(const PolicyRun& r) {
  double peak_gib = 0, peak_fraction = 0, peak_per_gpu = 0;
  for (std::size_t a = 0; a < r.memory.peak.size() && a < r.memory.budget.size(); ++a) {
    peak_gib = std::max(peak_gib, static_cast<double>(r.memory.peak[a]) / (1024.0 * 1024.0 * 1024.0));
    // What one GPU held, as accelerators_<policy>.csv says (a group's
    // whole account read as one GPU's 138 GiB on 80-GiB GPUs).
    peak_per_gpu = std::max(peak_per_gpu, peak_bytes_per_gpu(r, a) / (1024.0 * 1024.0 * 1024.0));
    if (r.memory.budget[a] > 0)
      peak_fraction =
          std::max(peak_fraction, static_cast<double>(r.memory.peak[a]) / static_cast<double>(r.memory.budget[a]));
  }
  nlohmann::json m = {{"oom_waits", r.scheduling.oom_waits},
                      {"backend_memory_waits", r.memory.waits},
                      {"refused_receives", r.memory.refused_receives},
                      {"preemptions", r.preemptions},
                      {"preempted_sequences", r.preempted_sequences},
                      {"oom_failed_requests", r.oom_failed_requests},
                      {"peak_hbm_gib", round6(peak_gib)},
                      {"peak_hbm_gib_per_gpu", round6(peak_per_gpu)},
                      {"peak_hbm_fraction", round6(peak_fraction)}};
  // Only where a budget was lowered (as for swaps below: other summaries
  // keep their keys).
  for (const auto& [tenant, tokens] : r.kv_budgets_learnt) m["kv_budgets_learnt"][tenant] = tokens;
  // Only where a tenant swaps, so recompute-only summaries keep their keys.
  if (r.swap_mode) {
    m["swapped_sequences"] = r.swapped_sequences;
    m["swapped_gib"] = round6(static_cast<double>(r.swapped_bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  // Likewise only where riders ride (co_batch): riders that left an
  // iteration for room, each recomputing what it held later (not counted
  // as preemptions, which take whole iterations back).
  if (r.riders) m["rider_evictions"] = r.rider_evictions;
  // Likewise only where a tenant has prefill lanes.
  if (r.prefill_lanes) {
    m["handed_off_sequences"] = r.handed_off;
    m["handoff_gib"] = round6(static_cast<double>(r.handoff_bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  return m;
}

nlohmann::json policy_summary(const PolicyRun& r) {
  const RunMetrics& m = r.metrics;
  nlohmann::json p;
  // The configured costs (null: per type, from the calibration profile),
  // then what was charged: per iteration, per sequence, once per request,
  // and all three.
  const auto& fc = r.fixed_costs;
  auto us = [](const std::optional<double>& s) { return s ? nlohmann::json(round6(*s * 1e6)) : nlohmann::json(); };
  p["fixed_costs"] = {
      {"iteration_overhead_us", us(fc.per_iteration_s)},   {"sequence_overhead_us", us(fc.per_sequence_s)},
      {"request_overhead_us", us(fc.per_request_s)},       {"iterations", fc.iterations},
      {"sequence_iterations", fc.sequence_iterations},     {"requests", fc.requests},
      {"iteration_seconds", round6(fc.iteration_seconds)}, {"sequence_seconds", round6(fc.sequence_seconds)},
      {"request_seconds", round6(fc.request_seconds)},     {"seconds", round6(fc.seconds)}};
  // The load each tenant offered inside the window: equal across the
  // policies that run it, so differences in throughput are the policy's.
  double offered_rps = 0, offered_tps = 0;
  for (const OfferedLoad& o : r.offered) {
    auto rate = [](double v) { return std::isfinite(v) ? nlohmann::json(round6(v)) : nlohmann::json(nullptr); };
    p["offered"][o.tenant] = {{"requests", o.requests},
                              {"requests_per_s", rate(o.requests_per_s())},
                              {"input_tokens_per_s", rate(o.input_tokens_per_s())},
                              {"output_tokens_per_s", rate(o.output_tokens_per_s())}};
    offered_rps += o.requests_per_s();
    offered_tps += o.output_tokens_per_s();
  }
  // The scalar figures (engine/metrics declares them; the sweep rows read
  // them back from here by name).
  const RunLoad load{offered_rps, offered_tps, r.requests_beyond_window, r.requests_truncated};
  for (const RunFigure& f : run_figures()) {
    const std::optional<double> v = f.read(m, load);
    p[std::string(f.name)] = !v        ? nlohmann::json(nullptr)
                             : f.count ? nlohmann::json(static_cast<std::int64_t>(*v))
                                       : nlohmann::json(round6(*v));
  }
  p["faults"] = {{"replaced_ops", r.lost_ops},
                 {"rebuilt_sequences", r.rebuilt_sequences},
                 {"failed_requests", r.fault_failed_requests}};
  p["scheduling"] = {{"batches", r.scheduling.batches},
                     {"candidates", r.scheduling.candidates},
                     {"simulations", r.scheduling.simulations},
                     {"dominated", r.scheduling.dominated},
                     {"cut_away", r.scheduling.cut_away},
                     {"deferred", r.scheduling.deferred},
                     {"budget_full_calls", r.scheduling.budget_full_calls},
                     {"budget_held_s", round6(static_cast<double>(r.scheduling.budget_held) / 1e9)},
                     {"issued_budget", r.issued_budget},
                     {"invalid_picks", r.scheduling.invalid_picks}};
  p["memory"] = memory_summary(r);
  // Which plugins ran it, with their arguments as configured.
  p["arbiter"] = {{"plugin", r.arbiter.name}, {"args", r.arbiter.args}};
  // Every plugin, where it was loaded from (null: built in), and how many
  // calls the run made into it. (Not their wall time: summary.json is
  // byte-identical for a config and seed; timing.json has it, and simulate
  // warns when deciding takes longer than the time decided.)
  p["plugins"] = nlohmann::json::array();
  for (const PluginRecord& x : r.plugins)
    p["plugins"].push_back({{"kind", x.kind},
                            {"plugin", x.name},
                            {"args", x.args},
                            {"library", x.library.empty() ? nlohmann::json(nullptr) : nlohmann::json(x.library)},
                            {"calls", x.use ? x.use->calls.load() : 0}});
  for (std::size_t i = 0; i < r.plugins.size(); ++i)
    if (r.plugins[i].weight) p["plugins"][i]["weight"] = *r.plugins[i].weight;
  p["estimator"] = {{"plugin", r.estimator.name},
                    {"args", r.estimator.args},
                    {"prior", r.estimator_prior.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.estimator_prior)}};
  for (const auto& e : r.estimators)
    p["estimators"].push_back({{"what", e.what}, {"samples", e.samples}, {"mape_pct", round6(e.mape_pct)}});
  // The what-if's predictions against what ran, per operator kind (null
  // for a policy that does not simulate).
  p["prediction"] = nullptr;
  for (const PredictionError& e : r.predictions)
    p["prediction"][e.kind] = {{"ops", e.ops},
                               {"duration_mape_pct", round6(e.duration_mape_pct)},
                               {"duration_bias_pct", round6(e.duration_bias_pct)},
                               {"completion_mape_pct", round6(e.completion_mape_pct)},
                               {"completion_bias_pct", round6(e.completion_bias_pct)}};
  return p;
}

SloBasis slo_basis(const std::vector<PolicyRun>& runs, const std::string& baseline, std::optional<double> given,
                   const std::string& given_as) {
  if (given) return {given, given_as};
  if (baseline.empty())
    return {
        std::nullopt,
        "no baseline policy to take the threshold from (name one with slo_baseline, or give --slo-threshold SECONDS)"};
  for (const PolicyRun& r : runs)
    if (r.name == baseline) return baseline_slo(r.metrics, baseline);
  return {std::nullopt,
          "no " + baseline + " run to take the threshold from (run it beside, or give --slo-threshold SECONDS)"};
}

SloBasis baseline_slo(const RunMetrics& m, const std::string& baseline, const std::string& how) {
  if (!m.has_ttft())
    return {std::nullopt, baseline + " gave no online request a first token, so it has no p90 TTFT to take the " +
                              "threshold from (give --slo-threshold SECONDS)"};
  std::string basis = "p90 TTFT of " + baseline + how;
  // More than a tenth without a first token (failed, or still waiting when
  // the window closed): the p90 of all of them was never reached, so say
  // what the threshold is the p90 of.
  if (10 * (m.online_total - m.online_ttft_s.size()) > m.online_total)
    basis += fmt::format(", over the {} of its {} online requests that got a first token; the rest got none",
                         m.online_ttft_s.size(), m.online_total);
  return {m.ttft_p90_s, basis};
}

void apply_slo(std::vector<PolicyRun>& runs, const SloBasis& basis) {
  for (PolicyRun& r : runs) {
    r.metrics.slo_attainment.reset();
    if (basis.threshold_s) finish_slo(r.metrics, *basis.threshold_s);
  }
}

// The issued budget must never throttle silently: one line per policy whose
// budget held ready work back for more than kBudgetWarnShare of its run.
constexpr double kBudgetWarnShare = 0.05;

void warn_budget(const std::vector<PolicyRun>& runs) {
  for (const PolicyRun& r : runs) {
    const double held_s = static_cast<double>(r.scheduling.budget_held) / 1e9;
    if (r.metrics.span_s <= 0 || held_s <= kBudgetWarnShare * r.metrics.span_s) continue;
    std::fprintf(stderr,
                 "slicesched: policy '%s': the issued budget (%zu operators) held ready work back for %.1f s of "
                 "%.1f s (%.0f %%): raise policies.%s.scheduler.issued_budget\n",
                 r.name.c_str(), r.issued_budget, held_s, r.metrics.span_s, 100 * held_s / r.metrics.span_s,
                 r.name.c_str());
  }
}

bool deciding_plugin(const PluginRecord& x) {
  return x.kind == "placement policy" || x.kind == "partition set" || x.kind == "filter stage" ||
         x.kind == "score stage";
}

// What summary.json leaves out because it changes from run to run: each
// policy's wall time and the wall time of the calls into each plugin (its
// guard's steady-clock count), beside the call counts summary.json has.
nlohmann::json timing_json(const std::vector<const PolicyRun*>& all) {
  nlohmann::json t;
  t["note"] = "wall times of this run: they differ between runs, unlike summary.json";
  t["policies"] = nlohmann::json::object();
  for (const PolicyRun* r : all) {
    nlohmann::json p;
    p["wall_s"] = r->wall_s;
    p["simulated_s"] = r->metrics.span_s;
    double deciding = 0;
    p["plugins"] = nlohmann::json::array();
    for (const PluginRecord& x : r->plugins) {
      const double secs = x.use ? x.use->seconds() : 0;
      const std::uint64_t calls = x.use ? x.use->calls.load() : 0;
      if (deciding_plugin(x)) deciding += secs;
      p["plugins"].push_back({{"kind", x.kind},
                              {"plugin", x.name},
                              {"calls", calls},
                              {"wall_s", secs},
                              {"us_per_call", calls ? secs * 1e6 / static_cast<double>(calls) : 0.0}});
    }
    p["deciding_wall_s"] = deciding;
    t["policies"][r->name] = std::move(p);
  }
  return t;
}

void report(const ExperimentConfig& cfg, std::vector<PolicyRun>& runs, const ReportOptions& opt) {
  const SloBasis slo = opt.slo ? *opt.slo : slo_basis(runs, cfg.slo_baseline);
  apply_slo(runs, slo);
  warn_budget(runs);
  std::vector<const PolicyRun*> all;  // finished, then failed
  for (const PolicyRun& r : runs) all.push_back(&r);
  if (opt.failed) {
    apply_slo(*opt.failed, slo);
    for (PolicyRun& r : *opt.failed) all.push_back(&r);
  }
  if (!runs.empty()) print_table(runs, slo);
  if (!opt.out) return;
  const fs::path dir(*opt.out);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir.string() + ": cannot create (" + ec.message() + ")");
  nlohmann::json sum = summary(cfg, runs, slo, opt.ground_truth);
  for (std::size_t k = runs.size(); k < all.size(); ++k) {
    nlohmann::json p = policy_summary(*all[k]);
    p["failed"] = true;
    p["error"] = all[k]->error;
    sum["policies"][all[k]->name] = std::move(p);
  }
  StagedFiles files;
  // (A plugin's error or name need not be UTF-8: bad bytes as U+FFFD.)
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  stage(files, dir / kSummary, sum.dump(2, ' ', false, kReplace) + "\n");
  stage(files, dir / kTiming, timing_json(all).dump(2, ' ', false, kReplace) + "\n");
  if (opt.explain) {
    std::string lines;
    for (const PolicyRun* r : all)
      for (const DecisionLog::Line& d : r->decisions) (lines += d.json) += '\n';
    stage(files, dir / kDecisions, lines);
  }
  for (const PolicyRun* run : all) {
    const PolicyRun& r = *run;
    stage(files, dir / requests_file(r.name), requests_csv(r));
    stage(files, dir / accelerators_file(r.name), accelerators_csv(r));
    stage(files, dir / trace_file(r.name), chrome_trace(r, opt.trace_seconds));
    const fs::path calibration = dir / calibration_file(r.name);
    if (!r.calibration) {
      std::fprintf(stderr, "slicesched: policy '%s': not writing %s: estimator '%s' has no linear form to snapshot\n",
                   r.name.c_str(), calibration.string().c_str(), r.estimator.name.c_str());
      continue;
    }
    stage(files, calibration, calibration_text(*r.calibration));
  }
  if (Status s = files.commit(); !s.ok()) throw std::runtime_error(s.message());
  warn_other_results(dir, all);
  // (no finished run, no plot: gnuplot stopped at plots without a series)
  if (!runs.empty()) plots(dir, runs);
  std::printf(
      "wrote %s/summary.json, timing.json, per-policy CSVs, calibration profiles, Chrome traces (open in Perfetto)%s"
      "%s\n",
      dir.string().c_str(), opt.explain ? ", decisions.jsonl" : "", runs.empty() ? "" : " and plots/");
}

bool draw_plots(const fs::path& dir, const std::string& gp) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr,
                 "slicesched: gnuplot not found: plot data and script are in %s (apt-get install gnuplot-nox)\n",
                 dir.string().c_str());
    return false;
  }
  // gnuplot draws each image under a temporary name, renamed once all are
  // drawn, so a failed run (a full disk) leaves no empty or half-drawn PNG
  // (plots.gp itself keeps the final names, for a user to run again).
  std::string script = gp;
  std::vector<std::string> pngs;
  for (std::size_t at = 0; (at = script.find(".png'", at)) != std::string::npos; at += 9) {
    const std::size_t open = script.rfind('\'', at);
    pngs.push_back(script.substr(open + 1, at + 4 - open - 1));
    script.insert(at + 4, ".tmp");
  }
  bool drawn = false;
  if (FILE* g = popen(("cd '" + dir.string() + "' && gnuplot 2>/dev/null").c_str(), "w")) {
    const bool sent = std::fwrite(script.data(), 1, script.size(), g) == script.size();
    drawn = pclose(g) == 0 && sent;
  }
  std::error_code ec;
  for (const std::string& f : pngs)
    if (drawn && fs::file_size(dir / (f + ".tmp"), ec) == 0) drawn = false;
  for (const std::string& f : pngs) {
    const fs::path tmp = dir / (f + ".tmp");
    if (drawn) fs::rename(tmp, dir / f, ec);
    if (!drawn || ec) fs::remove(tmp, ec);
  }
  if (!drawn) std::fprintf(stderr, "slicesched: gnuplot failed on %s/plots.gp: no image drawn\n", dir.string().c_str());
  return drawn;
}

std::string requests_file_name(const std::string& policy) { return requests_file(policy).string(); }

}  // namespace slicesched::cli
