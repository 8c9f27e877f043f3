// Every figure of a run that users read (summary.json, the table), on a
// small run worked out by hand.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

import slicesched.engine;
import slicesched.engine.metrics;
import slicesched.core.ids;
import slicesched.engine.observer;
import slicesched.engine.tenant;

using namespace slicesched;

namespace {

constexpr Nanos kS = 1'000'000'000;

RequestRecord request(std::uint32_t tenant, double arrival, double first, double done, std::int64_t generated,
                      std::string error = {}) {
  auto ns = [](double s) { return s < 0 ? Nanos{-1} : static_cast<Nanos>(s * 1e9); };
  return {tenant, ns(arrival), ns(first), ns(done), 16, generated, generated, {}, std::move(error)};
}

// Tenant 0 online, tenant 1 offline, two accelerators:
//   r0 online  arrives 0.0, first token 1.0, done 3.0, 3 tokens  -> TTFT 1.0, TPOT (3-1)/2 = 1.0
//   r1 online  arrives 1.0, first token 1.5, done 2.5, 5 tokens  -> TTFT 0.5, TPOT 1/4 = 0.25
//   r2 online  arrives 2.0, never started                         -> counts, no TTFT
//   r3 offline arrives 0.0, first token 2.0, done 3.6, 2 tokens  -> done, no TTFT or TPOT
//   r4 online  arrives 0.1, first token 0.6, failed, 1 token      -> TTFT 0.5, failed, not done
// Operators: gpu0 [0,1] [2,3] [3.5,4]; gpu1 [1,2]; a transfer gpu0 -> gpu1 [0.5,0.7].
EngineResult hand_worked() {
  EngineResult r;
  r.requests = {request(0, 0.0, 1.0, 3.0, 3), request(0, 1.0, 1.5, 2.5, 5), request(0, 2.0, -1, -1, 0),
                request(1, 0.0, 2.0, 3.6, 2), request(0, 0.1, 0.6, 0.6, 1, "no placement left that can run it")};
  return r;
}

std::vector<RunRecord> hand_log() {
  return {{1, 0, 0, kNoAccel, 0, kS},
          {2, 0, 0, kNoAccel, 2 * kS, 3 * kS},
          {3, 1, 0, kNoAccel, 7 * kS / 2, 4 * kS},
          {4, 0, 1, kNoAccel, kS, 2 * kS},
          {5, 0, 0, 1, kS / 2, 7 * kS / 10}};
}

}  // namespace

TEST_CASE("metrics: every figure of a hand-worked run", "[engine][metrics]") {
  RunMetrics m = compute_metrics("p", hand_worked(), hand_log(), 2, {true, false});
  struct Row {
    const char* figure;
    double got, want;
  };
  const std::vector<Row> rows = {
      {"requests_total", static_cast<double>(m.requests_total), 5},
      {"requests_done", static_cast<double>(m.requests_done), 3},  // r0, r1, r3
      {"requests_failed", static_cast<double>(m.requests_failed), 1},
      {"online_total", static_cast<double>(m.online_total), 4},
      {"online_done", static_cast<double>(m.online_done), 2},
      {"offline_done", static_cast<double>(m.offline_done), 1},
      {"tokens_generated", static_cast<double>(m.tokens_generated), 11},
      {"span_s (the last completion, an operator's)", m.span_s, 4.0},
      {"request_throughput (3 done / 4 s)", m.request_throughput, 0.75},
      {"token_throughput (11 / 4 s)", m.token_throughput, 2.75},
      {"ttft_p50_s of 0.5, 0.5, 1.0", m.ttft_p50_s, 0.5},
      {"ttft_p90_s (interpolated)", m.ttft_p90_s, 0.9},
      {"ttft_p99_s (interpolated)", m.ttft_p99_s, 0.99},
      {"tpot_mean_s (1.0 and 0.25)", m.tpot_mean_s, 0.625},
      {"gpu busy gpu0 (transfers do not count)", m.accel_busy_s.at(0), 2.5},
      {"gpu busy gpu1", m.accel_busy_s.at(1), 1.0},
      {"gpu_utilization (3.5 / (2 x 4))", m.gpu_utilization, 0.4375},
      {"idle slices", static_cast<double>(m.idle_slices_s.size()), 2},
      {"shortest idle slice (gpu0 3 -> 3.5)", m.idle_slices_s.at(0), 0.5},
      {"longest idle slice (gpu0 1 -> 2)", m.idle_slices_s.at(1), 1.0},
  };
  for (const Row& row : rows) {
    INFO(row.figure);
    CHECK(row.got == Approx(row.want).margin(1e-12));
  }
  // SLO attainment: of all four online requests (the one that never
  // started counts as a miss), those within the threshold.
  finish_slo(m, 0.5);
  CHECK(m.slo_attainment.value() == Approx(0.5));
  finish_slo(m, 1.0);
  CHECK(m.slo_attainment.value() == Approx(0.75));
  finish_slo(m, 0.1);
  CHECK(m.slo_attainment.value() == 0);
  // Without online requests there is nothing to attain: n/a, not 0 %.
  RunMetrics none;
  finish_slo(none, 1.0);
  CHECK_FALSE(none.slo_attainment.has_value());
}

TEST_CASE("metrics: inside a measurement window work is clipped to it", "[engine][metrics]") {
  // gpu0's [3.5, 4] is cut to [3.5, 3.75]; rates are per second of the window.
  const RunMetrics m = compute_metrics("p", hand_worked(), hand_log(), 2, {true, false}, 3.75);
  CHECK(m.span_s == 3.75);
  CHECK(m.accel_busy_s.at(0) == Approx(2.25));
  CHECK(m.gpu_utilization == Approx(3.25 / 7.5));
  CHECK(m.request_throughput == Approx(3 / 3.75));
  CHECK(m.token_throughput == Approx(11 / 3.75));
}

TEST_CASE("metrics: utilization over time sums operator time per 10 s bin through the span", "[engine][metrics]") {
  // A 25 s run: gpu0 [0, 12] crosses the first bin's edge, gpu1 [18, 25]
  // the second's; a transfer [1, 9] does not count.
  EngineResult r;
  r.requests = {request(0, 0.0, 1.0, 25.0, 2)};
  const std::vector<RunRecord> log = {
      {1, 0, 0, kNoAccel, 0, 12 * kS}, {2, 0, 1, kNoAccel, 18 * kS, 25 * kS}, {3, 0, 0, 1, kS, 9 * kS}};
  const RunMetrics m = compute_metrics("p", r, log, 2, {true});
  REQUIRE(m.busy_bins_s.size() == 3);  // [0, 10), [10, 20), [20, 30): the span is 25 s
  CHECK(m.busy_bins_s[0] == Approx(10));
  CHECK(m.busy_bins_s[1] == Approx(2 + 2));
  CHECK(m.busy_bins_s[2] == Approx(5));
  // The same from an IntervalRecorder fed as the engine feeds observers.
  IntervalRecorder rec(2);
  for (const RunRecord& x : log) rec.on_finish(x);
  CHECK(compute_metrics("p", r.requests, rec, {true}).busy_bins_s == m.busy_bins_s);
}

TEST_CASE("metrics: an operator lost with its accelerator is no busy time", "[engine][metrics]") {
  // gpu0 ran [0, 2] and then an operator from 2 s that was lost, found at
  // 5 s (live, an executor found dead after its timeout): 2 s busy, not 5
  // (an outside probe saw a killed executor's GPU 3 s busy).
  EngineResult r;
  r.requests = {request(0, 0.0, 1.0, 10.0, 2)};
  RunRecord lost{.op = 2, .tenant = 0, .accel = 0, .start = 2 * kS, .finish = 5 * kS, .failed = true, .lost = true};
  const std::vector<RunRecord> log = {{1, 0, 0, kNoAccel, 0, 2 * kS}, lost};
  IntervalRecorder rec(1);
  for (const RunRecord& x : log) rec.on_finish(x);
  const RunMetrics m = compute_metrics("p", r.requests, rec, {true});
  CHECK(m.accel_busy_s.at(0) == Approx(2));
  lost.lost = false;  // (a live error, not a loss: the device did run it)
  rec.on_finish(lost);
  CHECK(compute_metrics("p", r.requests, rec, {true}).accel_busy_s.at(0) == Approx(5));
}

TEST_CASE("metrics: percentiles interpolate between sorted values, and an empty run is all zeros",
          "[engine][metrics]") {
  struct Row {
    std::vector<double> v;
    double p, want;
  };
  for (const Row& row : std::vector<Row>{{{}, 50, 0},
                                         {{2}, 99, 2},
                                         {{1, 3}, 50, 2},
                                         {{1, 2, 3, 4}, 0, 1},
                                         {{1, 2, 3, 4}, 100, 4},
                                         {{1, 2, 3, 4}, 25, 1.75},
                                         {{1, 2, 3, 4}, 150, 4}}) {
    INFO("p" << row.p << " of " << row.v.size() << " values");
    CHECK(percentile(row.v, row.p) == Approx(row.want));
  }
  const RunMetrics m = compute_metrics("p", EngineResult{}, {}, 3, {});
  CHECK(m.requests_total == 0);
  CHECK(m.span_s == 0);
  CHECK(m.gpu_utilization == 0);
  CHECK(m.request_throughput == 0);
  CHECK(m.accel_busy_s.size() == 3);
}

TEST_CASE("metrics: without a window the span reaches at least the end of the offered streams", "[engine][metrics]") {
  // The hand-worked run's last completion is at 4 s; its streams ran to 10 s.
  // Finishing early is not serving the load faster than it arrived.
  const RunMetrics early = compute_metrics("p", hand_worked(), hand_log(), 2, {true, false}, -1, 10.0);
  CHECK(early.span_s == 10.0);
  CHECK(early.request_throughput == Approx(3 / 10.0));
  CHECK(early.token_throughput == Approx(11 / 10.0));
  CHECK(early.gpu_utilization == Approx(3.5 / 20.0));
  // Streams that ended before the last completion leave it the span.
  const RunMetrics late = compute_metrics("p", hand_worked(), hand_log(), 2, {true, false}, -1, 2.0);
  CHECK(late.span_s == 4.0);
  // A window wins over both.
  CHECK(compute_metrics("p", hand_worked(), hand_log(), 2, {true, false}, 3.75, 10.0).span_s == 3.75);
}

TEST_CASE("metrics: figures with nothing to measure are n/a, not 0", "[engine][metrics]") {
  auto read = [](const RunMetrics& m, const char* name) { return find_run_figure(name)->read(m, RunLoad{}); };
  // Online requests, none of which got a first token; one offline request done.
  EngineResult r;
  r.requests = {request(0, 0.0, -1, -1, 0), request(0, 0.5, -1, 0.5, 0, "out of memory"), request(1, 0.0, 1.0, 2.0, 3)};
  const RunMetrics m = compute_metrics("p", r, hand_log(), 2, {true, false});
  CHECK_FALSE(m.has_ttft());
  for (const char* name : {"ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s"}) {
    INFO(name);
    CHECK_FALSE(read(m, name).has_value());
  }
  CHECK(read(m, "done").value() == Approx(1 / 3.0));
  // The hand-worked run has them all.
  const RunMetrics full = compute_metrics("p", hand_worked(), hand_log(), 2, {true, false});
  CHECK(read(full, "ttft_p90_s").value() == Approx(0.9));
  CHECK(read(full, "tpot_mean_s").value() == Approx(0.625));
  // No request at all: done is n/a too.
  const RunMetrics empty = compute_metrics("p", EngineResult{}, {}, 1, {});
  CHECK_FALSE(read(empty, "done").has_value());
  CHECK_FALSE(read(empty, "ttft_p50_s").has_value());
}
