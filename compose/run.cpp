module;
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

module slicesched.compose.run;
import slicesched.compose.guard;
import slicesched.core.ids;
import slicesched.models.model;

namespace slicesched {

Result<EngineResult> run(PolicyParts& parts, Backend& backend, std::span<EngineObserver* const> observers,
                         const std::atomic<int>* stop, EngineResult* so_far) {
  EngineOptions eopt = parts.engine;
  eopt.stop = stop;
  Engine engine(*parts.gmg, parts.tenants, *parts.scheduler, *parts.plugins.estimator, backend, eopt);
  // A failure names the policy and its placement plugin, whether the
  // engine reports it or a plugin throws through it.
  const std::string who = "policy '" + parts.policy.name + "' (placement '" + placement_label(parts.policy) + "'): ";
  Status failed;
  try {
    auto result = engine.run(observers);
    if (result.ok()) return result;
    failed = Status(result.status().code(), who + result.status().message());
  } catch (const PluginFailure& e) {  // names the plugin that failed
    failed = Internal("policy '" + parts.policy.name + "': " + e.what());
  } catch (...) {
    failed = Internal(who + describe_current_exception());
  }
  if (so_far) *so_far = engine.so_far(backend.now());
  return failed;
}

Result<PolicyRun> run_recorded(const ExperimentConfig& cfg, PolicyParts& parts, Backend& backend,
                               const RecordOptions& opt, std::span<EngineObserver* const> extra) {
  const Nanos until = opt.timeline_s < 0 ? -1 : static_cast<Nanos>(opt.timeline_s * 1e9);
  IntervalRecorder intervals(parts.accels->size());
  TimelineRecorder timeline(until);
  PredictionRecorder predictions;
  ProgressObserver progress(opt.progress, parts.requests());
  std::vector<std::string> tenant_names;
  std::vector<std::size_t> tenant_requests;
  for (const Tenant& t : parts.tenants) {
    tenant_names.push_back(t.spec().name);
    tenant_requests.push_back(t.records().size());
  }
  std::optional<DecisionLog> decisions;
  std::vector<EngineObserver*> observers{&intervals, &predictions};
  if (until > 0) observers.push_back(&timeline);
  if (opt.decisions) observers.push_back(&decisions.emplace(parts.policy.name, tenant_names, tenant_requests, until));
  if (opt.progress) observers.push_back(&progress);
  observers.insert(observers.end(), extra.begin(), extra.end());

  const auto t0 = std::chrono::steady_clock::now();
  EngineResult so_far;
  auto result = run(parts, backend, observers, opt.stop, &so_far);
  if (!result.ok() && !opt.keep_failed) return result.status();
  PolicyRun r;
  if (!result.ok()) {
    // What the run knew when it failed: the tenants' requests as they are,
    // the engine's counts and the backend's memory so far.
    r.error = result.status().message();
    result = std::move(so_far);
  }
  r.name = parts.policy.name;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double offered_s = 0;  // without a window: the streams' end, the least span a rate is taken over
  for (const OfferedLoad& o : parts.offered) offered_s = std::max(offered_s, o.window_s);
  for (const AcceleratorConfig& a : cfg.accelerators) {
    r.accel_gpus.push_back(a.tp);
    r.accel_copies.push_back(a.tp > 1 ? a.gpu_hbm_bytes * a.tp - a.hbm_bytes : 0);
  }
  r.metrics = compute_metrics(parts.policy.name, result->requests, intervals, parts.online, cfg.duration_s, offered_s,
                              r.accel_gpus);
  if (opt.keep_requests) r.requests = std::move(result->requests);
  r.log = std::move(timeline.log());
  r.tenant_names = std::move(tenant_names);
  // Copies queue on the host link: those booked late in the window may run
  // after it, where the trace has nothing else.
  r.host_copies_until = std::min(until, static_cast<Nanos>(r.metrics.span_s * 1e9));
  if (until > 0)
    for (std::uint32_t i = 0; i < parts.tenants.size(); ++i)
      for (const HostLinkCopy& c : parts.tenants[i].host_link_copies())
        if (c.start <= r.host_copies_until) r.host_copies.emplace_back(i, c);
  for (AccelId a = 0; a < parts.accels->size(); ++a) r.accel_names.push_back((*parts.accels)[a].name);
  r.scheduling = result->scheduling;
  r.issued_budget = parts.policy.issued_budget;
  r.lost_ops = result->lost_ops;
  r.rebuilt_sequences = result->rebuilt_sequences;
  r.fault_failed_requests = result->fault_failed_requests;
  r.preemptions = result->preemptions;
  r.preempted_sequences = result->preempted_sequences;
  r.oom_failed_requests = result->oom_failed_requests;
  r.kv_budgets_learnt = result->kv_budgets_learnt;
  r.swapped_sequences = result->swapped_sequences;
  r.swapped_bytes = result->swapped_bytes;
  r.swap_mode = result->swap_mode;
  r.handed_off = result->handed_off;
  r.handoff_bytes = result->handoff_bytes;
  r.prefill_lanes = result->prefill_lanes;
  r.rider_evictions = result->rider_evictions;
  r.riders = result->riders;
  r.memory = result->memory;
  r.offered = parts.offered;
  r.requests_beyond_window = parts.requests_beyond_window;
  r.requests_truncated = parts.requests_truncated;
  r.plugins = parts.plugins.records;
  r.arbiter = parts.policy.arbiter;
  r.estimator = parts.policy.estimator;
  if (parts.prior_applied) r.estimator_prior = cfg.estimator_prior;
  if (parts.linear) {
    // Named as users know them, not by ids.
    for (EstimatorSet::ReportRow row : parts.linear->report()) {
      if (row.transfer && row.src < parts.accels->size() && row.dst < parts.accels->size())
        row.what = (*parts.accels)[row.src].name + " -> " + (*parts.accels)[row.dst].name;
      else if (!row.transfer)
        row.what = parts.templates->kind_name(row.kind) + " on " + parts.accels->type_name(row.type);
      r.estimators.push_back(std::move(row));
    }
    r.calibration = snapshot(*parts.linear, *parts.templates, *parts.accels, opt.origin);
    for (TemplateId t : parts.tmpls)
      if (const Model* m = parts.models.of(t)) r.calibration->models.push_back({m->name(), shape_text(*m)});
  }
  r.predictions = predictions.errors(*parts.templates);
  if (decisions) r.decisions = decisions->lines();
  r.interrupted = result->interrupted;
  return r;
}

}  // namespace slicesched
