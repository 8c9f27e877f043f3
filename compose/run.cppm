// Running a policy's parts: the engine over a backend with observers, and
// the recorders every command reports from (metrics, timeline, predictions,
// decisions, progress), gathered into a PolicyRun.
module;
#include <atomic>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

export module slicesched.compose.run;
import slicesched.compose.policy;
import slicesched.engine.metrics;
import slicesched.engine.progress;
import slicesched.engine.recorders;
import slicesched.config;
import slicesched.core.backend;
import slicesched.core.calibration;
import slicesched.core.estimator;
import slicesched.core.ids;
import slicesched.core.status;
import slicesched.engine;
import slicesched.engine.observer;
import slicesched.engine.scheduler;
import slicesched.engine.tenant;

export namespace slicesched {

// The engine over `parts` and `backend`, with `observers` watching. `stop`:
// see EngineOptions::stop (null: never). Fails as Engine::run does, or when
// a plugin throws through it, naming the policy and its placement plugin.
// The parts are used up: run them once. On a failure, `so_far` (when
// given) gets what the run had come to (Engine::so_far).
Result<EngineResult> run(PolicyParts& parts, Backend& backend, std::span<EngineObserver* const> observers = {},
                         const std::atomic<int>* stop = nullptr, EngineResult* so_far = nullptr);

// What every command reports of one policy's run.
struct PolicyRun {
  std::string name;
  double wall_s = 0;
  RunMetrics metrics;
  std::vector<RequestRecord> requests;  // every tenant's, tenant by tenant (empty when not kept)
  std::vector<RunRecord> log;           // the intervals that started inside the timeline window
  std::vector<std::string> tenant_names, accel_names;
  // Per accelerator: its GPUs (a tensor-parallel group's tp, else 1) and
  // the bytes its GPUs hold beyond its HBM account (each rank's copies of
  // what is not sharded), so one GPU's HBM is (account + copies) / GPUs.
  // The tenants' host-link copies (hand-offs and swaps) that started inside
  // the timeline window, with the tenant's index: the trace's host lanes.
  std::vector<std::pair<std::uint32_t, HostLinkCopy>> host_copies;
  Nanos host_copies_until = 0;  // the trace shows copies (out, and back) that start by then
  std::vector<int> accel_gpus;
  std::vector<std::int64_t> accel_copies;
  PluginChoice arbiter;                             // the transfer arbiter plugin and its arguments
  PluginChoice estimator;                           // the estimator plugin and its arguments
  std::string estimator_prior;                      // the [estimators] prior it started from, or empty
  std::vector<EstimatorSet::ReportRow> estimators;  // empty when it is not linear
  RoundStats scheduling;
  std::size_t issued_budget = 0;                    // the scheduler's cap on issued operators (policy config)
  std::size_t lost_ops = 0, rebuilt_sequences = 0;  // faults (EngineResult)
  std::size_t fault_failed_requests = 0;            // (EngineResult)
  // Memory pressure (EngineResult): preemptions, the sequences they held,
  // requests failed as out of memory, and the backend's accounting.
  std::size_t preemptions = 0, preempted_sequences = 0, oom_failed_requests = 0;
  std::vector<std::pair<std::string, std::int64_t>> kv_budgets_learnt;  // (EngineResult)
  std::size_t swapped_sequences = 0;                                    // (EngineResult) when swap_mode
  std::int64_t swapped_bytes = 0;
  bool swap_mode = false;
  std::size_t handed_off = 0;  // (EngineResult) when prefill_lanes
  std::int64_t handoff_bytes = 0;
  bool prefill_lanes = false;
  std::size_t rider_evictions = 0;  // (EngineResult) when riders
  bool riders = false;
  MemoryStats memory;
  std::vector<PluginRecord> plugins;  // every plugin it ran, with what its calls cost
  std::vector<OfferedLoad> offered;
  std::size_t requests_beyond_window = 0;
  std::size_t requests_truncated = 0;             // cut to their model's context window (on_overflow = "truncate")
  std::optional<CalibrationProfile> calibration;  // what the estimators learned, when linear
  std::vector<PredictionError> predictions;       // empty when the policy does not simulate
  std::vector<DecisionLog::Line> decisions;       // with RecordOptions::decisions
  bool interrupted = false;                       // stopped by the stop flag
  // The engine's fixed costs the ground truth charged (offline runs;
  // [ground_truth] iteration_overhead_us, sequence_overhead_us and
  // request_overhead_us, or what
  // calibrate measured per type), apart from the operators'.
  struct FixedCosts {
    // As configured: the same on every type ([ground_truth]), or nullopt
    // where they came per type from the calibration profile.
    std::optional<double> per_iteration_s, per_sequence_s, per_request_s;
    std::size_t iterations = 0;           // sampling operators charged
    std::size_t sequence_iterations = 0;  // their sequences, summed
    std::size_t requests = 0;             // requests charged once (at their first iteration)
    double iteration_seconds = 0;         // charged per iteration
    double sequence_seconds = 0;          // charged per sequence
    double request_seconds = 0;           // charged per request
    double seconds = 0;                   // all three
  } fixed_costs;
  // Why the run failed (RecordOptions::keep_failed): what it knew until
  // then is above, cut short. Empty: it ran to the end.
  std::string error;
};

struct RecordOptions {
  // Intervals (and decisions) that start before this many seconds of the
  // run's clock are kept for the timeline (Chrome traces); < 0: none.
  double timeline_s = 60;
  bool decisions = false;     // record the scheduler's rounds (--explain)
  bool keep_requests = true;  // keep every request's record (the requests CSV)
  ProgressFn progress = {};   // called about every 1 % of requests ended
  const std::atomic<int>* stop = nullptr;
  std::string origin;  // where the calibration snapshot comes from, e.g. "simulate cfg.toml, policy P"
  // A run that fails still comes back, with what it recorded until then
  // and PolicyRun::error set (so its decisions and trace can be written);
  // off, the failure is returned as a Status.
  bool keep_failed = false;
};

// run() with the recorders, then the PolicyRun from them. `extra` observers
// watch too (after the recorders). Fails as run() does, unless
// opt.keep_failed.
Result<PolicyRun> run_recorded(const ExperimentConfig& cfg, PolicyParts& parts, Backend& backend,
                               const RecordOptions& opt, std::span<EngineObserver* const> extra = {});

}  // namespace slicesched
