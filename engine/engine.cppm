// The engine: one loop for both modes. Tenants turn requests into graph
// instances, the scheduler places them, the backend (emulated cluster or
// live executors) runs them, and feedback flows back into the GMG, the
// estimators and the tenants. Observers (engine.observer) see it happen.
module;
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

export module slicesched.engine;
import slicesched.engine.tenant;
import slicesched.engine.scheduler;
import slicesched.core.backend;
import slicesched.engine.observer;
import slicesched.engine.inbox;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.core.status;

export namespace slicesched {

// A fault on the engine's timeline: at `at`, accelerator `accel` is lost
// (down) or comes back.
struct FaultEvent {
  Nanos at = 0;
  AccelId accel = kNoAccel;
  bool down = true;
};

struct EngineOptions {
  Nanos stop_at = -1;  // stop the clock here even if work remains (< 0: run until every tenant finished)
  // Set from another thread (e.g. a signal handler): 1 drains (no more
  // arrivals are delivered; admitted requests finish), 2 cancels (the run
  // stops at once; unfinished requests stay unfinished). Null: never.
  const std::atomic<int>* stop = nullptr;
  // Lost accelerators, in time order (the backend must support them; see
  // Backend::fail_accelerator). Lost work is redone elsewhere: a tenant's
  // iteration that lost anything starts again, rebuilding its sequences'
  // KV caches by prefill. When nothing is left that can run a waiting
  // request (its placements all need a lost accelerator, for good), the
  // request fails with the reason; when every accelerator is lost with
  // none coming back, the run fails (Aborted), saying so.
  std::vector<FaultEvent> faults;
  // Requests pushed at run time (live front ends; the caller's, must
  // outlive run()). While it is open the run does not end when every
  // tenant is done: it waits for the next push (the backend's wait must be
  // woken by it: see RequestInbox::counter). A drain (stop 1) closes it and
  // runs what was pushed before; a cancel (stop 2) closes it and ends every
  // request it brought that has not finished with kCancelledError, so every
  // sink hears of its end.
  RequestInbox* inbox = nullptr;
};

struct EngineResult {
  std::vector<RequestRecord> requests;  // every tenant's, tenant by tenant
  Nanos end = 0;                        // the clock when the run stopped
  RoundStats scheduling;
  bool complete = false;     // every request finished
  bool interrupted = false;  // stopped by EngineOptions::stop
  // Faults: operators lost with an accelerator (run, queued, or waiting on
  // data it held), whose work was placed again; sequences whose KV cache
  // was rebuilt by prefill; requests failed because nothing left could run
  // them (the accelerators they need lost).
  std::size_t lost_ops = 0, rebuilt_sequences = 0, fault_failed_requests = 0;
  // Memory pressure: iterations preempted (their KV caches released, their
  // sequences recomputed later) and the sequences they held; requests
  // failed because they could never fit the HBM alone.
  std::size_t preemptions = 0, preempted_sequences = 0, oom_failed_requests = 0;
  // Tenants whose KV budget an iteration that fit nowhere lowered
  // (Tenant::kv_budget), with the budget they ended with, in tokens.
  std::vector<std::pair<std::string, std::int64_t>> kv_budgets_learnt;
  // Of the preempted sequences, those whose KV cache went to host memory
  // and back (TenantSpec::preemption kSwap), and its bytes (one way); and
  // whether any tenant swaps.
  std::size_t swapped_sequences = 0;
  std::int64_t swapped_bytes = 0;
  bool swap_mode = false;
  // Prefill lanes (TenantSpec::prefill_lanes): sequences whose KV cache a
  // prefill lane handed to a decode lane, its bytes (one way), and whether
  // any tenant has prefill lanes.
  std::size_t handed_off = 0;
  std::int64_t handoff_bytes = 0;
  bool prefill_lanes = false;
  // Cross-tenant batches: riders that left an iteration for room (each
  // recomputes what it held later), and whether any tenant hosts riders.
  std::size_t rider_evictions = 0;
  bool riders = false;
  MemoryStats memory;  // the backend's (ground truth offline)
};

// Owns nothing; every argument must outlive run(). Not thread-safe.
class Engine {
 public:
  // `estimator` learns from every completion the backend reports (the
  // configured Estimator plugin; the scheduler predicts with the same one).
  Engine(Gmg& gmg, std::vector<Tenant>& tenants, Scheduler& scheduler, Estimator& estimator, Backend& backend,
         EngineOptions opt = {});
  // Runs to the end; fails with a one-line reason if the cluster deadlocks
  // (work left that nothing can place or run) or a component fails. Every
  // observer sees every event of the run, in order (see EngineObserver);
  // they are the caller's and must outlive the call. Run once.
  Result<EngineResult> run(std::span<EngineObserver* const> observers = {});
  // What a run that failed had come to by `now` (the backend's clock): its
  // requests as they are and its counts, for a report that says it failed.
  EngineResult so_far(Nanos now) const;

 private:
  Status apply(const Feedback& f);
  // Hands the request events the tenants recorded to the observers.
  void flush_requests();
  void on_decision(const Gmg& gmg, const Decision& d);
  Status apply_faults(Nanos now);
  // Accelerator `a` is lost at `now`: a configured fault or one the backend
  // found (Backend::take_lost); both take this one path.
  Status lose(AccelId a, Nanos now);
  // Every accelerator is lost for good: what is unfinished fails, the
  // inbox closes, and the run ends as a failure saying so.
  Status all_lost(Nanos now);
  // Whether a configured fault yet to come brings back an accelerator that
  // is lost now: then a batch that fits nowhere may fit after it.
  bool returns_pending() const;
  // When a configured fault yet to come brings `a` back, -1 if none does.
  Nanos return_at(AccelId a) const;
  // A batch only a lost accelerator could take (Deferral::lost), with
  // none of the lost coming back: its iteration's requests fail now, as
  // the loss's; but where the accelerators left hold the weights and lack
  // only the HBM (Deferral::live_placeable), an iteration of several
  // sequences is first shed to fewer, and one of several operators cut
  // into smaller batches (which may fit over several accelerators left), as
  // one that fits nowhere is (fail_out_of_memory); what still cannot fit
  // fails as the loss's. One cut because it fit nowhere, the lost
  // accelerators included, fails out of memory. Whether one did.
  Result<bool> fail_lost(Nanos now);
  // Fails the sequences of deferred batch `d`'s iteration (not started, or
  // stuck part way) as the loss's. Whether it did.
  Result<bool> fail_as_lost(const Deferral& d, Nanos now);
  // Tenant::fail_out_of_memory on `d`'s iteration with reason `why` (several
  // sequences queue again, one fails), its plan dropped. Whether it acted.
  Result<bool> fail_as_oom(const Deferral& d, const std::string& why, Nanos now, bool started_too);
  // Hands what was pushed to the inbox to its tenants (closing it first on
  // a drain); fails on a request for a tenant that does not exist.
  Status take_inbox(Nanos now, int stop);
  // Why the operators still waiting cannot be placed, from the scheduler's
  // last round (a hint in the deadlock error).
  std::string deadlock_cause() const;
  // Memory pressure (the scheduler's last round deferred a batch for
  // HBM): preempts one iteration that has not started and holds a KV
  // cache, the lowest priority first, then the youngest (vLLM's order).
  // While the cluster runs, only a lower priority than the waiting batch's
  // holding KV where it is short, or any priority on an accelerator it is
  // short of where nothing runs (nothing there will free memory); when
  // nothing runs anywhere (`stalled`), any.
  // Returns whether it preempted.
  Result<bool> preempt(bool stalled);
  // Hands the backend the tenant's swap-outs and forgotten host copies.
  Status copy_to_host(Tenant& t);
  // A waiting iteration leaves as out of memory (Tenant::fail_out_of_memory:
  // several sequences queue again under a smaller KV budget, one alone
  // fails): one that fits nowhere even alone
  // (Deferral::never, kNever); or, when nothing runs anywhere and nothing
  // is left to preempt, any that waits for memory (kAny), one stuck part
  // way included (batches smaller than an iteration). Returns whether one
  // did.
  enum class OomFail { kNever, kAny };
  Result<bool> fail_out_of_memory(Nanos now, OomFail which);
  // Per accelerator (by id), 1 where an operator is issued.
  std::vector<char> issued_on() const;

  Gmg& gmg_;
  std::vector<Tenant>& tenants_;
  Scheduler& scheduler_;
  Estimator& est_;
  Backend& backend_;
  EngineOptions opt_;
  std::size_t next_fault_ = 0, lost_ops_ = 0, oom_failed_ = 0, fault_failed_ = 0;
  // Iterations whose batches were cut smaller (Scheduler::limit_batches):
  // because they fit nowhere even alone, or because they fit alone only
  // where an accelerator is lost. One that still cannot run fails for the
  // cause it was cut for: out of memory, or the loss.
  std::unordered_set<InstanceId> cut_for_memory_, cut_for_loss_;
  std::string lost_names_;  // "gpu3 at 600.000 s, ..." for failure reasons
  std::span<EngineObserver* const> observers_;
  std::vector<RequestEvent> request_events_;
  // Per OpId (slots are reused; rewritten at each issue): when it was
  // issued and the what-if's prediction for the placement picked.
  struct Issued {
    Nanos at = -1, predicted_start = -1, predicted_finish = -1;
  };
  std::vector<Issued> issued_;
  std::vector<std::pair<AccelId, std::int64_t>> running_kv_;  // (Scheduler::keep_for's source)
};

}  // namespace slicesched
