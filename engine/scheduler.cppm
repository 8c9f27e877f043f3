// The scheduling module (the paper's Algorithm 1): take the highest-priority
// operator of the unscheduled frontier, collect a small connected batch,
// ask the PartitionSet for candidate placements, what-if each one in
// parallel (clone the GMG, apply, simulate, discard OOM), let the
// PlacementPolicy pick, and issue. Repeats until the issued-operator budget
// is reached, the frontier is empty, or the policy defers.
module;
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

export module slicesched.engine.scheduler;
import slicesched.core.plugin;
import slicesched.engine.observer;
import slicesched.simulator.global_simulator;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.gmg;
import slicesched.core.estimator;

export namespace slicesched {

// Makes the transfer arbiter of one what-if worker: the backend's arbiter
// plugin again, with the same arguments (e.g. a registry create() with the
// config's name and args). Arbiters are not thread-safe, so each worker
// thread gets its own, made on that thread at its first what-if and reused
// after; calls may be concurrent (registries allow concurrent create()).
using ArbiterFactory = std::function<Result<PluginPtr<TransferArbiter>>()>;

struct SchedulerOptions {
  std::size_t issued_budget = 256;  // the paper's B: issued, not yet done, operators
  std::size_t batch_cap = 16;       // operators per batch
  Nanos horizon = -1;               // what-if horizon past now; < 0: until the snapshot drains
  bool parallel = true;             // what-if candidates on oneTBB workers
  // A round's what-ifs simulate only the accelerators its candidates are
  // tied to (AccelComponents), not the whole cluster: what keeps rounds
  // cheap on a large cluster. See SimOptions::scope for how an outcome can
  // differ from the whole cluster's.
  bool scoped = true;
  // The backend's transfer rule, for the what-if to predict with; empty:
  // the default rule (built-in "greedy", reserve_oldest = true).
  ArbiterFactory arbiter = {};
  // Stop a what-if early once it cannot win (see
  // PlacementPolicy::objective()); off, every candidate is simulated to
  // the end (what --explain shows). The pick is the same either way.
  bool prune = true;
  // With prune off: rounds after this simulated time (>= 0) prune anyway
  // (--explain records the rounds of its window only).
  Nanos prune_after = -1;
};

struct RoundStats {
  std::size_t rounds = 0, batches = 0, candidates = 0, simulations = 0, deferred = 0;
  std::size_t dominated = 0;  // what-ifs stopped early: they could not beat an earlier candidate
  // Of those, candidates cut without a what-if: away from the batch's
  // inputs, even the round's floor for such a placement loses to the best.
  std::size_t cut_away = 0;
  // The issued budget holding work back: schedule() calls that stopped at a
  // full budget while unscheduled operators were ready to go, and the time
  // from the first such call to the next one with room (or with nothing
  // waiting), summed: how long ready work waited for the budget alone.
  std::size_t budget_full_calls = 0;
  Nanos budget_held = 0;
  // Iterations (instances) a batch of which waited for memory at least
  // once: its pick did not fit the GMG's HBM account (Gmg::check_memory),
  // or every candidate was out of memory; and picks the scheduler could not
  // issue: an index out of range (a policy bug, named in the decision log).
  std::size_t oom_waits = 0, invalid_picks = 0;
};

// A batch the placement policy deferred in the latest schedule() call, and
// what it had to choose from: enough for the engine to say why nothing
// runs when nothing can.
struct Deferral {
  std::uint32_t tenant = 0;     // the batch's tenant (index into the engine's tenants)
  std::size_t ops = 0;          // operators in the batch
  std::size_t candidates = 0;   // placements the partition sets offered
  bool simulated = false;       // the what-if ran (the policy needs it)
  std::size_t infeasible = 0;   // of the candidates, predicted to exceed HBM (when simulated)
  std::size_t unplaceable = 0;  // of the candidates, naming an accelerator that is unknown, lost or lacks the weights
  std::int32_t priority = 0;    // the batch's
  // Why the batch waited when the policy picked a candidate: it does not
  // fit the HBM account (`memory`), or the pick could not be issued.
  bool memory = false;
  // It does not fit even alone (Gmg::check_memory's `alone`) on any
  // candidate: waiting or preempting cannot help.
  bool never = false;
  // Only a lost accelerator could take it: every candidate (a static
  // policy: its pick) needs one, or holds it on none of the accelerators
  // left even alone.
  bool lost = false;
  // With `lost`: some candidate on the accelerators left could take it but
  // for their HBM (they hold the weights). Then fewer sequences, or fewer
  // operators at a time, may fit there: not a request lost with the
  // accelerator.
  bool live_placeable = false;
  std::string reason;
  InstanceId instance = 0;        // the instance of the batch's first operator
  std::vector<AccelId> short_of;  // when `memory`: the accelerators short of HBM
};

// Not thread-safe: the engine thread calls schedule(); what-if work fans
// out to oneTBB workers inside the call, which share the estimator (its
// predict_* only; through linear() when it has one) and each have their own
// simulator and arbiter. The policy, partition set and estimator must
// outlive the scheduler.
class Scheduler {
 public:
  Scheduler(PlacementPolicy& policy, PartitionSet& partitions, Estimator& estimator, SchedulerOptions opt = {});
  ~Scheduler();

  // Runs rounds at time `now` and returns the operators issued, in issue
  // order (the backend must be handed them in this order).
  Result<std::vector<OpId>> schedule(Gmg& gmg, Nanos now);
  const RoundStats& stats() const { return stats_; }
  // Ends an open budget-held period at `now` (the run's end), so
  // stats().budget_held counts it. Idempotent.
  void close_budget_period(Nanos now);
  // The batches deferred in the latest schedule() call, in round order.
  const std::vector<Deferral>& last_deferrals() const { return last_deferrals_; }
  // From now on the batches of iteration `instance` hold at most `cap`
  // operators (>= 1), fewer than batch_cap: one that can never fit as
  // collected (Deferral::never; all its operators on one accelerator, say)
  // may fit a few operators at a time. Let go once the iteration has
  // nothing ready.
  void limit_batches(InstanceId instance, std::size_t cap);
  // Called at the end of every round that had a batch (issued or
  // deferred), on the scheduler's thread; null: nobody listens.
  using DecisionFn = std::function<void(const Gmg&, const Decision&)>;
  void on_decision(DecisionFn fn) { on_decision_ = std::move(fn); }
  // The KV caches of sequences still running (Tenant::running_kv), with
  // their tenant's priority: a batch of lower priority may not take as
  // much HBM again where they are (their next iterations will), unless it
  // continues an iteration under way. Otherwise a preempted low-priority
  // iteration came back in the gap between two high-priority steps and
  // made each wait for it. `source` appends them; it is called at most
  // once per schedule() call, when a batch below `top` (the highest
  // priority any tenant has) is checked. Null: nothing is kept.
  struct Kept {
    AccelId accel;
    std::int32_t priority;
    std::int64_t bytes;
  };
  using KeptSource = std::function<void(std::vector<Kept>&)>;
  void keep_for(KeptSource source, std::int32_t top);

 private:
  // kept_, sorted by accelerator, loaded from kept_source_ once a call;
  // kept_bytes_ is per accelerator, filled for one pick's accelerators
  // and cleared after.
  KeptSource kept_source_;
  std::vector<Kept> kept_;
  bool kept_loaded_ = false;
  std::vector<std::int64_t> kept_bytes_;
  std::int32_t kept_top_ = INT32_MIN;
  // The HBM kept on `accels` from a batch of `priority` (0: none), filled
  // into kept_bytes_; clear_kept_bytes(accels) undoes it.
  std::int64_t fill_kept_bytes(std::span<const AccelId> accels, std::int32_t priority);
  void clear_kept_bytes(std::span<const AccelId> accels);
  Batch collect(const Gmg& gmg, OpId seed, std::size_t cap) const;
  std::vector<std::pair<InstanceId, std::size_t>> limited_;  // limit_batches
  void count_oom_wait(const Gmg& gmg, const Batch& batch);
  std::unordered_set<InstanceId> oom_waited_;
  // Writes one outcome per candidate over `out` (last round's, so their
  // buffers are reused).
  Status what_if(const Gmg& gmg, const Batch& batch, const std::vector<Candidate>& cands, Nanos now,
                 std::vector<Outcome>& out);

  PlacementPolicy& policy_;
  PartitionSet& partitions_;
  const Estimator& est_;
  const EstimatorSet* linear_;  // est_'s fast path, or null
  SchedulerOptions opt_;
  RoundStats stats_;
  Nanos budget_full_since_ = -1;  // the budget has held ready work back since (< 0: it is not)
  std::vector<Deferral> last_deferrals_;
  DecisionFn on_decision_;
  struct Workers;
  std::unique_ptr<Workers> workers_;
};

}  // namespace slicesched
