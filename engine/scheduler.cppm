// The scheduling module (the paper's Algorithm 1): take the highest-priority
// operator of the unscheduled frontier, collect a small connected batch,
// ask the PartitionSet for candidate placements, what-if each one in
// parallel (clone the GMG, apply, simulate, discard OOM), let the
// PlacementPolicy pick, and issue. Repeats until the issued-operator budget
// is reached, the frontier is empty, or the policy defers.
module;
#include <cstdint>
#include <memory>
#include <vector>

export module slicesched.engine.scheduler;
export import slicesched.core;
export import slicesched.core.plugin;
import slicesched.simulator.global;

export namespace slicesched {

struct SchedulerOptions {
  std::size_t issued_budget = 256;  // the paper's B: issued, not yet done, operators
  std::size_t batch_cap = 16;       // operators per batch
  Nanos horizon = -1;               // what-if horizon past now; < 0: until the snapshot drains
  bool parallel = true;             // what-if candidates on oneTBB workers
};

struct RoundStats {
  std::size_t rounds = 0, batches = 0, candidates = 0, simulations = 0, deferred = 0;
};

// Not thread-safe: the engine thread calls schedule(); what-if work fans
// out to oneTBB workers inside the call. The policy, partition set and
// estimators must outlive the scheduler.
class Scheduler {
 public:
  Scheduler(PlacementPolicy& policy, PartitionSet& partitions, const EstimatorSet& estimators,
            SchedulerOptions opt = {});
  ~Scheduler();

  // Runs rounds at time `now` and returns the operators issued, in issue
  // order (the backend must be handed them in this order).
  Result<std::vector<OpId>> schedule(Gmg& gmg, Nanos now);
  const RoundStats& stats() const { return stats_; }

 private:
  Batch collect(const Gmg& gmg, OpId seed) const;
  std::vector<Outcome> what_if(const Gmg& gmg, const Batch& batch, const std::vector<Candidate>& cands, Nanos now);

  PlacementPolicy& policy_;
  PartitionSet& partitions_;
  const EstimatorSet& est_;
  SchedulerOptions opt_;
  RoundStats stats_;
  struct Workers;
  std::unique_ptr<Workers> workers_;
};

}  // namespace slicesched
