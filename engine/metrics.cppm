// What a run achieved, in the paper's terms: request and token throughput,
// TTFT (queue + prefill) percentiles, TPOT, SLO attainment, GPU utilization
// (busy fraction) and idle-slice durations.
module;
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

export module slicesched.engine.metrics;
import slicesched.engine;
import slicesched.core.ids;
import slicesched.engine.observer;
import slicesched.engine.tenant;

export namespace slicesched {

struct RunMetrics {
  std::string policy;
  double span_s = 0;  // the window; without one, time 0 to the last completion or the streams' end, whichever is later
  std::size_t requests_total = 0, requests_done = 0, online_total = 0, online_done = 0, offline_done = 0;
  std::size_t requests_failed = 0;  // ended with an error (RequestRecord::error): not done
  std::int64_t tokens_generated = 0;
  double request_throughput = 0, token_throughput = 0;  // per second of span
  // Over the online requests that got a first token (online_ttft_s); 0 and
  // n/a in every report when none did (has_ttft()).
  double ttft_p50_s = 0, ttft_p90_s = 0, ttft_p99_s = 0;
  double tpot_mean_s = 0;         // online requests done with > 1 token; n/a when none (tpot_requests)
  std::size_t tpot_requests = 0;  // the requests tpot_mean_s averages
  bool has_ttft() const { return !online_ttft_s.empty(); }
  // Of all online requests, those whose TTFT <= the threshold (finish_slo);
  // empty until a threshold is known (n/a).
  std::optional<double> slo_attainment;
  double gpu_utilization = 0;
  std::vector<double> online_ttft_s;  // sorted
  std::vector<double> idle_slices_s;  // sorted gaps between operators on each accelerator
  std::vector<double> accel_busy_s;   // per accelerator
  // Operator time of all accelerators per kBusyBinS-second bin from time
  // 0 through the span (utilization over time; not clipped to a window).
  static constexpr double kBusyBinS = 10;
  std::vector<double> busy_bins_s;
};

// What compute_metrics needs of a run's timeline: every operator interval,
// per accelerator (16 bytes each, whatever the run's length; transfers are
// not kept). An engine observer; not thread-safe.
class IntervalRecorder final : public EngineObserver {
 public:
  explicit IntervalRecorder(std::size_t accelerators) : per_(accelerators) {}
  void on_finish(const RunRecord& r) override { add(r); }
  // Keeps `r` when it is an operator on a known accelerator, not lost: a
  // lost one's time is no work (live, it ran on until the loss was found:
  // an executor killed 1 s in showed 3 s busy; an outside probe).
  void add(const RunRecord& r) {
    if (r.to == kNoAccel && !r.lost && r.accel < per_.size()) per_[r.accel].push_back({r.start, r.finish});
  }
  const std::vector<std::vector<std::pair<Nanos, Nanos>>>& intervals() const { return per_; }
  // Each accelerator's intervals in order of start (then finish), in place.
  void sort();

 private:
  std::vector<std::vector<std::pair<Nanos, Nanos>>> per_;
};

// Linear-interpolated percentile (p in [0, 100]) of sorted values; 0 if empty.
double percentile(const std::vector<double>& sorted, double p);

// `online[t]` tells whether tenant t is SLO-bound. With `window_s` > 0 the
// rates are per second of that window (requests done inside it);
// otherwise per second of the span up to the last completion, or up to
// `offered_s` (the end of the streams the run was offered) when that is
// later: a policy that finishes early has not served the load faster than
// it arrived, so its rates never exceed the offered load's. `gpus[a]`:
// the GPUs accelerator a stands for (a tensor-parallel group's N, busy
// together), which GPU utilization weighs it by; empty: one each.
// Sorts `intervals` in place (IntervalRecorder::sort): a sorted copy doubled
// the peak memory of a long run.
RunMetrics compute_metrics(const std::string& policy, const std::vector<RequestRecord>& requests,
                           IntervalRecorder& intervals, const std::vector<bool>& online, double window_s = -1,
                           double offered_s = 0, std::span<const int> gpus = {});
// The same from a whole log (operators and transfers) on `accelerators`.
RunMetrics compute_metrics(const std::string& policy, const EngineResult& result, const std::vector<RunRecord>& log,
                           std::size_t accelerators, const std::vector<bool>& online, double window_s = -1,
                           double offered_s = 0);

// Sets slo_attainment for a TTFT threshold in seconds (left empty, n/a,
// when the run had no online request).
void finish_slo(RunMetrics& m, double threshold_s);

// What a run's report adds to its RunMetrics: the load its tenants offered
// inside the window (summed over tenants) and the requests it did not
// replay as they came.
struct RunLoad {
  double offered_requests_per_s = 0, offered_output_tokens_per_s = 0;
  std::size_t requests_beyond_window = 0;  // arrivals after the window, not replayed
  std::size_t requests_truncated = 0;      // cut to their model's context window
};

// A scalar figure of a run, declared once: summary.json writes each under
// its name, the sweep rows (sweep.csv, sweep.json) have one column per
// `sweep_column` figure in run_figures() order, and plan's objectives and
// sweep's plots name them.
struct RunFigure {
  std::string_view name;
  std::string_view label;  // what it is, with its unit (plot titles)
  bool count = false;      // an integer; otherwise a real rounded to 6 decimals
  bool sweep_column = true;
  // Its value; nullopt: n/a (SLO attainment without a threshold, TTFT and
  // TPOT without an online request to measure).
  std::optional<double> (*read)(const RunMetrics&, const RunLoad&) = nullptr;
};

// Every figure, sweep columns first in column order.
std::span<const RunFigure> run_figures();
// The figure of that name, or nullptr.
const RunFigure* find_run_figure(std::string_view name);

}  // namespace slicesched
