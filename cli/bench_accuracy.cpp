// `slicesched bench accuracy CONFIG`: how well the simulator predicts a live
// run (the paper's end-to-end and estimator accuracy).
//   1. calibrate the config's model on its devices (the code of `calibrate`);
//   2. serve one policy of the config live (compose/live), recording every
//      operator and transfer the engine measured, with its features;
//   3. simulate the same config and policy with the calibration profile as
//      ground truth, without noise (the emulated cluster, same engine,
//      scheduler, plugins, estimator prior and time scale as the live run).
// e2e_error_pct: |simulated - live| / live of the end-to-end time, from the
// first operator's start to the last completion. op_mape_pct / transfer_mape_pct:
// the calibrated estimators' predictions against every operator / transfer
// duration the live run measured.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "executor/torch/runtime.h"

import slicesched.core.status;
import slicesched.core.shape;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.estimator;
import slicesched.core.calibration;
import slicesched.core.files;
import slicesched.core.plugin;
import slicesched.config;
import slicesched.engine.observer;
import slicesched.engine.recorders;
import slicesched.compose.setup;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.compose.live;
import slicesched.cli.calibrate;
import slicesched.cli.fail;
import slicesched.cli.progress;
import slicesched.simulator.emulated_cluster;
import slicesched.core.backend;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.engine.tenant;
import slicesched.executor.calibration;

namespace slicesched::cli {

namespace {

// What the engine fed the estimator during the live run.
struct Observation {
  bool transfer = false;
  OpKindId kind = 0;
  AccelTypeId type = 0;
  std::vector<double> x;
  AccelId src = 0, dst = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  double start_s = 0;  // on the run's clock: with `accel`, which operators overlapped
  AccelId accel = 0;   // an operator's accelerator
  std::string dims;    // an operator's dims, "name=value ..."
};

// Records every measurement the engine feeds the estimator (operators that
// did not fail, and every transfer), with the operator's features.
class Recorder final : public EngineObserver {
 public:
  void on_feedback(const Gmg& gmg, const Feedback& f) override {
    const double seconds = static_cast<double>(f.measured) / 1e9;
    const double start_s = static_cast<double>(f.start) / 1e9;
    if (f.kind == Feedback::Kind::kTransfer) {
      seen.push_back({.transfer = true,
                      .src = f.from,
                      .dst = f.to,
                      .bytes = static_cast<std::uint64_t>(f.bytes),
                      .seconds = seconds,
                      .start_s = start_s,
                      .accel = f.to});
      return;
    }
    if (f.failed) return;
    const OpRecord& r = gmg.op(f.op);
    const auto x = gmg.features(f.op);
    const DimTable& names = gmg.templates().get(r.tmpl).dims();
    const auto values = gmg.dims(f.op);
    std::string dims;
    for (std::size_t i = 0; i < values.size(); ++i)
      dims += (i ? " " : "") + names.name(static_cast<DimId>(i)) + "=" + std::to_string(values[i]);
    seen.push_back({.kind = r.kind,
                    .type = gmg.accels().type(r.accel),
                    .x = {x.begin(), x.end()},
                    .seconds = seconds,
                    .start_s = start_s,
                    .accel = r.accel,
                    .dims = std::move(dims)});
  }
  std::vector<Observation> seen;
};

struct Timeline {
  double e2e_s = 0, mean_latency_s = 0, mean_ttft_s = 0;
  double start_delay_s = 0;  // from the first arrival to the first operator's start
  std::size_t done = 0, total = 0;
};

// End to end: from the first operator's start (a live run starts its clock
// before loading the weights; the simulator has no such delay) to the last
// completion.
Timeline timeline(const std::vector<RequestRecord>& requests, const std::vector<RunRecord>& log) {
  Timeline t;
  t.total = requests.size();
  Nanos first = -1, last = -1, first_op = -1;
  for (const RunRecord& r : log)
    if (first_op < 0 || r.start < first_op) first_op = r.start;
  double lat = 0, ttft = 0;
  for (const RequestRecord& r : requests) {
    if (first < 0 || r.arrival < first) first = r.arrival;
    if (r.done < 0 || !r.error.empty()) continue;
    ++t.done;
    last = std::max(last, r.done);
    lat += static_cast<double>(r.done - r.arrival) / 1e9;
    ttft += static_cast<double>(r.first_token - r.arrival) / 1e9;
  }
  if (t.done) {
    if (first_op < 0) first_op = first;
    t.e2e_s = static_cast<double>(last - first_op) / 1e9;
    t.start_delay_s = static_cast<double>(first_op - first) / 1e9;
    t.mean_latency_s = lat / static_cast<double>(t.done);
    t.mean_ttft_s = ttft / static_cast<double>(t.done);
  }
  return t;
}

// The simulated twin of the live run: same parts, the calibration profile as
// noise-free ground truth.
struct SimRun {
  std::vector<RequestRecord> requests;
  std::vector<RunRecord> log;
};

SimRun simulate_calibrated(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                           const CalibrationProfile* prior, const CalibrationProfile& profile) {
  auto parts = value_or_fail(build_policy(cfg, policy, plugins, {.prior = prior, .time_scale = cfg.live.time_scale}));
  CalibratedGroundTruth truth(profile, *parts->accels, cfg.seed, 0.0, 0.0);
  check(truth.check_transfers());
  EmulatedCluster cluster(parts->accels->size(), truth, *parts->plugins.arbiter);
  TimelineRecorder log(std::numeric_limits<Nanos>::max());
  EngineObserver* observers[] = {&log};
  auto result = run(*parts, cluster, observers);
  if (!result.ok()) fail("simulated " + result.status().message());
  return {result->requests, std::move(log.log())};
}

struct Mape {
  double sum = 0, bias = 0;
  std::size_t n = 0;
  void add(double predicted, double measured) {
    sum += std::abs(predicted - measured) / measured;
    bias += (measured - predicted) / measured;
    ++n;
  }
  double pct() const { return n ? 100.0 * sum / static_cast<double>(n) : 0.0; }
  double bias_pct() const { return n ? 100.0 * bias / static_cast<double>(n) : 0.0; }
};

}  // namespace

int bench_accuracy(const BenchAccuracyOptions& opt) {
  ExperimentConfig cfg = value_or_fail(load_config(opt.config));
  if (opt.time_scale) cfg.live.time_scale = *opt.time_scale;
  // Its calibration runs in this process (calibrate refuses [[hosts]]: its
  // copies between hosts would be fitted as in-process ones).
  if (!cfg.hosts.empty())
    fail_in(cfg.path,
            "[[hosts]]: bench accuracy calibrates in this process, not on the config's executors; run it "
            "with a config without [[hosts]]");
  {
    // What fails below is said of the config (check_in, fail_in: one line, printed by main).
    check_in(cfg.path, check_devices(cfg));
    check_in(cfg.path, check_weights_fit(cfg));
    const PolicyConfig* policy = value_or_fail_in(cfg.path, find_policy(cfg, opt.policy, /*first_by_default=*/true));
    // Both runs start from [estimators] prior, as serve and simulate do.
    const std::optional<CalibrationProfile> prior = value_or_fail_in(cfg.path, read_prior(cfg));
    const bool progress = !opt.json;

    // Before minutes of timing: where the results go can take them.
    std::vector<std::pair<std::string, std::string>> outputs;
    if (opt.profile_out) outputs.push_back({*opt.profile_out, "--profile-out"});
    if (opt.samples) outputs.push_back({*opt.samples, "--samples"});
    check_in(cfg.path, check_result_paths(outputs));

    // 1. Calibrate.
    for (const ModelConfig& m : cfg.models) (void)value_or_fail_in(cfg.path, validated_runtime_model(m));
    rt::set_cpu_threads(cfg.live.threads);
    CalibrateSettings cs;
    cs.warmup = opt.warmup;
    cs.repeats = opt.repeats;
    cs.progress = progress;
    if (progress) std::fprintf(stderr, "bench accuracy: 1/3 calibrating; %s", describe(shape_grid(cfg)).c_str());
    std::optional<CalibrationResult> cal = value_or_fail_in(cfg.path, calibrate_config(cfg, cs));
    {
      StagedFiles files;  // the profile and its samples: both or neither
      if (opt.profile_out) check_in(cfg.path, files.add(*opt.profile_out, calibration_text(cal->profile)));
      if (opt.samples) check_in(cfg.path, files.add(*opt.samples, points_csv(*cal)));
      check_in(cfg.path, files.commit());
    }

    // 2. Live, recording what the engine measures.
    PluginRegistries plugins;
    check_in(cfg.path, load_plugins(cfg, plugins));
    Recorder recorder;
    EngineObserver* recorders[] = {&recorder};
    if (progress) std::fprintf(stderr, "bench accuracy: 2/3 serving policy '%s' live\n", policy->name.c_str());
    const PolicyRun live = [&] {  // (the devices are let go before the simulation)
      auto session = value_or_fail_in(
          cfg.path, LiveSession::open(cfg, *policy, plugins, prior ? &*prior : nullptr, {.progress = progress}));
      RecordOptions ro;
      ro.timeline_s = 1e9;  // the whole run: its first operator's start counts
      if (progress) ro.progress = progress_printer(policy->name);
      return value_or_fail_in(cfg.path, session->run(ro, recorders));
    }();

    // 3. Simulate the same run on the calibration.
    if (progress) std::fprintf(stderr, "bench accuracy: 3/3 simulating it on the calibration profile\n");
    const SimRun sim = simulate_calibrated(cfg, *policy, plugins, prior ? &*prior : nullptr, cal->profile);

    // Figures.
    const Timeline lt = timeline(live.requests, live.log), st = timeline(sim.requests, sim.log);
    if (lt.done == 0) fail_in(cfg.path, "the live run finished no request");
    const double e2e_err = std::abs(st.e2e_s - lt.e2e_s) / lt.e2e_s * 100.0;
    const double lat_err = std::abs(st.mean_latency_s - lt.mean_latency_s) / lt.mean_latency_s * 100.0;
    Mape ops, transfers;
    std::map<std::pair<OpKindId, AccelTypeId>, Mape> by_op;
    for (const Observation& o : recorder.seen) {
      if (!(o.seconds > 0)) continue;
      if (o.transfer) {
        transfers.add(cal->est.predict_transfer(o.src, o.dst, o.bytes), o.seconds);
      } else {
        const double p = cal->est.predict_op(o.kind, o.type, o.x);
        ops.add(p, o.seconds);
        by_op[{o.kind, o.type}].add(p, o.seconds);
      }
    }

    if (opt.observations) {
      std::FILE* f = std::fopen(opt.observations->c_str(), "w");
      if (!f) fail_in(cfg.path, "cannot write " + *opt.observations);
      std::fprintf(f, "what,type,src,dst,bytes,features,seconds,predicted,accel,start_s,dims\n");
      for (const Observation& o : recorder.seen) {
        const std::string& accel = (*cal->accels)[o.accel].name;
        if (o.transfer) {
          std::fprintf(f, "copy,,%s,%s,%llu,,%.9g,%.9g,%s,%.9f,\n", (*cal->accels)[o.src].name.c_str(),
                       (*cal->accels)[o.dst].name.c_str(), static_cast<unsigned long long>(o.bytes), o.seconds,
                       cal->est.predict_transfer(o.src, o.dst, o.bytes), accel.c_str(), o.start_s);
        } else {
          std::string x;
          for (double v : o.x) x += (x.empty() ? "" : " ") + std::to_string(static_cast<long long>(v));
          std::fprintf(f, "%s,%s,,,,%s,%.9g,%.9g,%s,%.9f,%s\n", cal->templates->kind_name(o.kind).c_str(),
                       cal->accels->type_name(o.type).c_str(), x.c_str(), o.seconds,
                       cal->est.predict_op(o.kind, o.type, o.x), accel.c_str(), o.start_s, o.dims.c_str());
        }
      }
      if (std::fclose(f) != 0) fail_in(cfg.path, "cannot write " + *opt.observations);
    }

    if (opt.json) {
      nlohmann::json j;
      j["e2e_error_pct"] = e2e_err;
      j["op_mape_pct"] = ops.pct();
      // null when the live run moved nothing (no figure, not a perfect one)
      j["transfer_mape_pct"] = transfers.n ? nlohmann::json(transfers.pct()) : nlohmann::json(nullptr);
      j["live_e2e_s"] = lt.e2e_s;
      j["simulated_e2e_s"] = st.e2e_s;
      j["live_start_delay_s"] = lt.start_delay_s;
      j["live_mean_latency_s"] = lt.mean_latency_s;
      j["simulated_mean_latency_s"] = st.mean_latency_s;
      j["latency_error_pct"] = lat_err;
      j["requests"] = lt.total;
      j["live_done"] = lt.done;
      j["simulated_done"] = st.done;
      j["ops"] = ops.n;
      j["transfers"] = transfers.n;
      j["op_bias_pct"] = ops.bias_pct();
      j["transfer_bias_pct"] = transfers.n ? nlohmann::json(transfers.bias_pct()) : nlohmann::json(nullptr);
      j["calibration_s"] = cal->wall_s;
      j["policy"] = policy->name;
      j["time_scale"] = cfg.live.time_scale;
      nlohmann::json per = nlohmann::json::object();
      for (const auto& [key, m] : by_op)
        per[cal->templates->kind_name(key.first) + "@" + cal->accels->type_name(key.second)] = {
            {"samples", m.n}, {"mape_pct", m.pct()}, {"bias_pct", m.bias_pct()}};
      j["per_op"] = per;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("calibration (%.1f s):\n", cal->wall_s);
      print_calibration(*cal, stdout);
      std::printf(
          "\nlive run of policy '%s' vs the calibrated estimators (bias: measured slower than predicted "
          "when > 0):\n",
          policy->name.c_str());
      std::printf("%-24s %-10s %8s %8s %8s\n", "op", "type", "samples", "MAPE %", "bias %");
      for (const auto& [key, m] : by_op)
        std::printf("%-24s %-10s %8zu %8.2f %8.2f\n", cal->templates->kind_name(key.first).c_str(),
                    cal->accels->type_name(key.second).c_str(), m.n, m.pct(), m.bias_pct());
      if (transfers.n)
        std::printf("%-24s %-10s %8zu %8.2f %8.2f\n", "transfers", "", transfers.n, transfers.pct(),
                    transfers.bias_pct());
      std::printf(
          "\nend to end        live %.4f s, simulated %.4f s (first operator to last completion; %zu "
          "requests, %zu / %zu done; the live run's first operator started %.3f s after the first arrival)\n",
          lt.e2e_s, st.e2e_s, lt.total, lt.done, st.done, lt.start_delay_s);
      std::printf("mean latency      live %.4f s, simulated %.4f s (error %.2f %%)\n", lt.mean_latency_s,
                  st.mean_latency_s, lat_err);
      std::printf("e2e_error_pct     %.3f\n", e2e_err);
      std::printf("op_mape_pct       %.3f  (%zu operators)\n", ops.pct(), ops.n);
      if (transfers.n)
        std::printf("transfer_mape_pct %.3f  (%zu transfers)\n", transfers.pct(), transfers.n);
      else
        std::printf("transfer_mape_pct n/a    (the live run moved nothing between accelerators)\n");
    }
  }
  return 0;
}

}  // namespace slicesched::cli
