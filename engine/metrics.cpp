module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

module slicesched.engine.metrics;

namespace slicesched {

void IntervalRecorder::sort() {
  for (auto& v : per_) std::sort(v.begin(), v.end());
}

double percentile(const std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

RunMetrics compute_metrics(const std::string& policy, const EngineResult& result, const std::vector<RunRecord>& log,
                           std::size_t accelerators, const std::vector<bool>& online, double window_s,
                           double offered_s) {
  IntervalRecorder intervals(accelerators);
  for (const RunRecord& r : log) intervals.add(r);
  return compute_metrics(policy, result.requests, intervals, online, window_s, offered_s);
}

RunMetrics compute_metrics(const std::string& policy, const std::vector<RequestRecord>& requests,
                           IntervalRecorder& intervals, const std::vector<bool>& online, double window_s,
                           double offered_s, std::span<const int> gpus) {
  RunMetrics m;
  m.policy = policy;
  Nanos last = 0;
  double tpot_sum = 0;
  std::size_t tpot_n = 0;
  for (const RequestRecord& r : requests) {
    ++m.requests_total;
    m.tokens_generated += r.generated;
    const bool is_online = r.tenant < online.size() && online[r.tenant];
    m.online_total += is_online;
    if (is_online && r.first_token >= 0)
      m.online_ttft_s.push_back(static_cast<double>(r.first_token - r.arrival) / 1e9);
    if (!r.error.empty()) {
      ++m.requests_failed;
      continue;
    }
    if (r.done < 0) continue;
    ++m.requests_done;
    last = std::max(last, r.done);
    (is_online ? m.online_done : m.offline_done)++;
    if (!is_online) continue;
    if (r.generated > 1) {
      tpot_sum += static_cast<double>(r.done - r.first_token) / 1e9 / static_cast<double>(r.generated - 1);
      ++tpot_n;
    }
  }
  std::sort(m.online_ttft_s.begin(), m.online_ttft_s.end());
  m.ttft_p50_s = percentile(m.online_ttft_s, 50);
  m.ttft_p90_s = percentile(m.online_ttft_s, 90);
  m.ttft_p99_s = percentile(m.online_ttft_s, 99);
  m.tpot_mean_s = tpot_n ? tpot_sum / static_cast<double>(tpot_n) : 0;
  m.tpot_requests = tpot_n;

  // Busy time and idle slices from the operator intervals (not transfers).
  // Inside a measurement window, work is clipped to it.
  const Nanos clip = window_s > 0 ? static_cast<Nanos>(window_s * 1e9) : INT64_MAX;
  const std::size_t accelerators = intervals.intervals().size();
  for (const auto& v : intervals.intervals())
    for (const auto& [start, finish] : v)
      if (start < clip) last = std::max(last, finish);
  m.span_s = window_s > 0 ? window_s : std::max(static_cast<double>(last) / 1e9, offered_s);
  // Utilization over time, unclipped: the bins cover the span.
  m.busy_bins_s.assign(static_cast<std::size_t>(m.span_s / RunMetrics::kBusyBinS) + 1, 0.0);
  for (const auto& v : intervals.intervals())
    for (const auto& [start, finish] : v) {
      double s = static_cast<double>(start) / 1e9, e = static_cast<double>(finish) / 1e9;
      while (s < e) {
        const auto b = static_cast<std::size_t>(s / RunMetrics::kBusyBinS);
        const double edge = std::min(e, (static_cast<double>(b) + 1) * RunMetrics::kBusyBinS);
        if (b < m.busy_bins_s.size()) m.busy_bins_s[b] += edge - s;
        s = edge;
      }
    }
  m.accel_busy_s.assign(accelerators, 0);
  double busy = 0, gpus_total = 0;  // GPU-seconds busy, and GPUs
  intervals.sort();                 // (after the bins: their sums keep the order they always had)
  for (std::size_t a = 0; a < accelerators; ++a) {
    // Those starting inside the window, cut at its end: sorted, as a
    // subsequence of sorted intervals is.
    bool first = true;
    Nanos previous = 0;  // the finish of the one before
    for (const auto& [start, whole] : intervals.intervals()[a]) {
      if (start >= clip) continue;
      const Nanos finish = std::min(whole, clip);
      m.accel_busy_s[a] += static_cast<double>(finish - start) / 1e9;
      if (!first && start > previous) m.idle_slices_s.push_back(static_cast<double>(start - previous) / 1e9);
      first = false;
      previous = finish;
    }
    const double g = a < gpus.size() ? gpus[a] : 1;
    busy += m.accel_busy_s[a] * g;
    gpus_total += g;
  }
  std::sort(m.idle_slices_s.begin(), m.idle_slices_s.end());
  if (m.span_s > 0) {
    m.request_throughput = static_cast<double>(m.requests_done) / m.span_s;
    m.token_throughput = static_cast<double>(m.tokens_generated) / m.span_s;
    m.gpu_utilization = busy / (gpus_total * m.span_s);
  }
  return m;
}

void finish_slo(RunMetrics& m, double threshold_s) {
  // Requests that never got a first token count as misses. Without online
  // requests there is nothing to attain: n/a, not 0 % or 100 %.
  m.slo_attainment.reset();
  if (m.online_total == 0) return;
  const auto within = std::upper_bound(m.online_ttft_s.begin(), m.online_ttft_s.end(), threshold_s);
  m.slo_attainment = static_cast<double>(within - m.online_ttft_s.begin()) / static_cast<double>(m.online_total);
}

namespace {

// A figure that is not a number (an offered rate over a window of 0 s) is
// none: null in summary.json.
template <typename T>
std::optional<double> real(T v) {
  const auto d = static_cast<double>(v);
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

// The order of the sweep columns (sweep.csv's header; sweep.json checks
// its figures against it) is a file format: append, do not reorder.
constexpr RunFigure kFigures[] = {
    {"request_throughput", "request throughput (requests/s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.request_throughput); }},
    {"token_throughput", "token throughput (tokens/s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.token_throughput); }},
    {"ttft_p50_s", "TTFT p50 (s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return m.has_ttft() ? real(m.ttft_p50_s) : std::nullopt; }},
    {"ttft_p90_s", "TTFT p90 (s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return m.has_ttft() ? real(m.ttft_p90_s) : std::nullopt; }},
    {"ttft_p99_s", "TTFT p99 (s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return m.has_ttft() ? real(m.ttft_p99_s) : std::nullopt; }},
    {"tpot_mean_s", "TPOT mean (s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return m.tpot_requests ? real(m.tpot_mean_s) : std::nullopt; }},
    {"slo_attainment", "SLO attainment", false, true,
     [](const RunMetrics& m, const RunLoad&) { return m.slo_attainment; }},
    {"gpu_utilization", "GPU utilization", false, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.gpu_utilization); }},
    {"done", "requests done (fraction)", false, true,
     [](const RunMetrics& m, const RunLoad&) {
       return m.requests_total ? real(static_cast<double>(m.requests_done) / static_cast<double>(m.requests_total))
                               : std::nullopt;
     }},
    {"requests_total", "requests", true, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.requests_total); }},
    {"requests_done", "requests done", true, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.requests_done); }},
    {"requests_failed", "requests failed", true, false,
     [](const RunMetrics& m, const RunLoad&) { return real(m.requests_failed); }},
    {"online_done", "online requests done", true, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.online_done); }},
    {"offline_done", "offline requests done", true, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.offline_done); }},
    {"tokens_generated", "tokens generated", true, true,
     [](const RunMetrics& m, const RunLoad&) { return real(m.tokens_generated); }},
    {"offered_requests_per_s", "offered load (requests/s)", false, true,
     [](const RunMetrics&, const RunLoad& l) { return real(l.offered_requests_per_s); }},
    {"offered_output_tokens_per_s", "offered load (output tokens/s)", false, true,
     [](const RunMetrics&, const RunLoad& l) { return real(l.offered_output_tokens_per_s); }},
    {"requests_beyond_window", "requests arriving after the window", true, true,
     [](const RunMetrics&, const RunLoad& l) { return real(l.requests_beyond_window); }},
    {"idle_slice_p50_s", "idle slice p50 (s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return real(percentile(m.idle_slices_s, 50)); }},
    {"idle_slice_p90_s", "idle slice p90 (s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return real(percentile(m.idle_slices_s, 90)); }},
    {"idle_slice_p99_s", "idle slice p99 (s)", false, true,
     [](const RunMetrics& m, const RunLoad&) { return real(percentile(m.idle_slices_s, 99)); }},
    // In summary.json only.
    {"span_s", "span to the last completion (s)", false, false,
     [](const RunMetrics& m, const RunLoad&) { return real(m.span_s); }},
    {"requests_truncated", "requests cut to the context window", true, false,
     [](const RunMetrics&, const RunLoad& l) { return real(l.requests_truncated); }},
};

}  // namespace

std::span<const RunFigure> run_figures() { return kFigures; }

const RunFigure* find_run_figure(std::string_view name) {
  for (const RunFigure& f : kFigures)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace slicesched
