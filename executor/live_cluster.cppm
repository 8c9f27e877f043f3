// The live executor: real accelerators behind the engine's Backend
// interface. One worker thread per accelerator runs its operators; one
// transfer thread per accelerator receives copies into it.
//
// Queue rules (paper 4.4, the same as the emulated cluster and the global
// simulator): an operator waits until every input slot is ready; among the
// ready ones the higher priority first, then the earlier issue; one at a
// time; never preempted. A cross-accelerator input is a transfer in three
// steps: its Intent joins the pending set; the TransferArbiter activates a
// conflict-free subset (one per source, one per destination); Recv reserves
// the destination's memory first (refused over budget: the intent goes back
// and is retried after memory is freed, never an allocation failure), then
// Send copies; Recv's completion readies the slot.
//
// Memory is accounted per accelerator against its budget: resident weights,
// each finished operator's output and retained state until the engine
// releases them (release(): the GMG let go of them), each running
// operator's declared output, retained state and
// workspace, and received copies until their consumer finishes. An operator
// whose reservation does not fit waits for memory to free; a later ready
// operator that fits may run meanwhile (else the head could wait forever
// for memory only that operator frees).
//
// Threading: submit/next_event/advance_to/release/now/log/on_iteration come
// from one engine thread; workers and transfer threads are internal. The runner and
// the arbiter are called under the executor's lock except for
// OpRunner::run and OpRunner::copy, which run unlocked on the worker and
// transfer threads.
module;
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

export module slicesched.executor.live_cluster;
import slicesched.core.plugin;
import slicesched.executor.runner;
import slicesched.core.slots;
import slicesched.core.backend;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.gmg;

export namespace slicesched {

class LiveCluster final : public Backend {
 public:
  // `budgets[a]`: the bytes accelerator a may hold, weights included. The
  // runner and the arbiter must outlive the cluster. Starts the threads.
  LiveCluster(std::vector<std::int64_t> budgets, OpRunner& runner, TransferArbiter& arbiter);
  // Lets running operators and copies finish, drops queued work, joins.
  ~LiveCluster() override;
  LiveCluster(const LiveCluster&) = delete;
  LiveCluster& operator=(const LiveCluster&) = delete;

  // Charges resident bytes (weights) to `a`. Fails, naming the accelerator,
  // when they do not fit its budget.
  Status reserve_resident(AccelId a, std::int64_t bytes);

  // Queues an issued operator. Its inputs must be submitted before or done
  // with their values still held. Fails without side effects otherwise, or
  // when the runner cannot prepare it.
  Status submit(const Gmg& gmg, OpId op) override;
  // now() while completions wait to be collected; a poll horizon while work
  // is in flight; -1 when idle or stalled (see stall_reason()).
  Nanos next_event() const override;
  // Blocks until a completion arrives, the wall clock reaches `t`, or the
  // interrupt flag (set_interrupt) changes, then appends every completion so
  // far.
  Status advance_to(Nanos t, std::vector<Feedback>& out) override;
  // Frees the released values (their bytes count no longer), and forgets
  // an operator at its last release; queued work waiting for memory may
  // then start. The rest of Backend::release's contract.
  void release(std::span<const Release> released) override;
  // A counter a signal handler bumps (serve's Ctrl-C / SIGTERM, the same
  // as EngineOptions::stop): a wait in advance_to returns within
  // kInterruptPoll of a change, so the engine sees a drain or a cancel
  // at once instead of at the next arrival. Null: waits are not cut short.
  void set_interrupt(const std::atomic<int>* flag) { interrupt_ = flag; }
  // Cuts a wait in advance_to short at once (rather than at the next
  // kInterruptPoll) when the interrupt flag has changed: a request pushed
  // from an HTTP thread bumps the flag and calls this, so its prefill is
  // not delayed by a poll. Thread-safe; any thread.
  void wake();
  // Wall-clock nanoseconds since construction.
  Nanos now() const override;
  bool wants_plans() const override { return true; }
  Status on_iteration(InstanceId instance, IterationPlan plan) override;
  void drop_iteration(InstanceId instance) override;
  // The runner keeps the sequences' parts of the operators' retained KV
  // caches (still held here) in host memory; Backend's contract.
  Status swap_out(const Gmg& gmg, std::uint32_t tenant, std::span<const OpId> kv,
                  std::span<const std::uint64_t> seqs) override;
  void forget_swapped(std::uint32_t tenant, std::span<const std::uint64_t> seqs) override;

  // Accelerator `a` is lost (Backend's contract, the emulated cluster's
  // rules): queued operators there, and those whose input it held or was
  // sending, fail with Feedback::lost at once (in `out`); an operator or
  // copy running there finishes on its thread and is then reported lost;
  // the values it held are dropped from the accounting; submit() refuses
  // it until restore_accelerator().
  Status fail_accelerator(const Gmg& gmg, AccelId a, std::vector<Feedback>& out) override;
  Status restore_accelerator(AccelId a) override;
  // Any thread (e.g. a remote runner's that sees an executor process die):
  // marks `a` lost now, so what runs there reports lost, and queues it for
  // take_lost(), which wakes advance_to. Call before failing the work
  // running there. Idempotent.
  void lose(AccelId a);
  std::vector<AccelId> take_lost() override;

  // Why nothing can progress although work is queued (empty otherwise).
  std::string stall_reason() const override;
  // Accounting, per accelerator: bytes held now, the most ever held, and
  // the budget. peak <= budget always.
  std::int64_t used(AccelId a) const;
  std::int64_t peak(AccelId a) const;
  std::int64_t budget(AccelId a) const { return budget_[a]; }
  // Receives refused for memory, and operators that had to wait for memory.
  std::size_t refused_receives() const;
  std::size_t memory_waits() const;
  MemoryStats memory_stats() const override;

 private:
  struct Succ {
    std::uint32_t task, slot;
    bool retained;
  };
  struct Task {
    OpId op = kNoOp;
    std::uint64_t seq = 0;
    AccelId accel = kNoAccel;
    std::uint64_t key = 0;
    std::shared_ptr<const void> prepared;
    std::vector<Payload> inputs;
    std::vector<std::int64_t> received;  // bytes charged here for each received slot
    std::uint32_t pending = 0;
    bool input_failed = false, waited = false;
    bool started = false;  // taken by its worker
    bool lost = false;     // failed because an accelerator was lost
    bool dead = false;     // reported already (lost while queued); its slot is never reused
    std::string input_error;
    std::int64_t declared = 0, workspace = 0;  // output + retained, and workspace, bytes
    std::vector<Succ> succs;
  };
  struct Held {  // a finished operator's values, until released
    std::uint64_t seq = 0;
    AccelId accel = kNoAccel;
    Payload output, retained;
    bool failed = false, lost = false;
    std::string error;
  };
  struct Xfer {
    std::uint64_t id = 0;
    std::uint32_t task = 0, slot = 0;
    OpId src = kNoOp;  // the producer
    Payload value;
    AccelId from = kNoAccel, to = kNoAccel;
    Nanos since = 0;
    std::uint64_t refused_epoch = ~0ull;  // memory epoch of the last refusal
  };
  struct Done {
    Feedback feedback;
  };

  void worker(AccelId a);
  void receiver(AccelId a);
  std::ptrdiff_t pick(AccelId a) const;
  std::uint32_t head(AccelId a) const;
  bool can_start(AccelId a) const;
  void make_ready(std::uint32_t task);
  void deliver(std::uint32_t task, std::uint32_t slot, OpId src, const Payload& value, AccelId from, bool failed,
               const std::string& error, bool lost = false);
  void fail_task(std::uint32_t task, std::vector<Feedback>& out);
  void add_intent(std::uint32_t task, std::uint32_t slot, OpId src, const Payload& value, AccelId from);
  void arbitrate();
  void memory_freed();
  void charge(AccelId a, std::int64_t bytes);
  bool stalled() const;
  Nanos clock() const;

  std::vector<std::int64_t> budget_;
  OpRunner& runner_;
  TransferArbiter& arbiter_;
  const std::chrono::steady_clock::time_point start_;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<std::condition_variable>> work_cv_, recv_cv_;
  std::condition_variable engine_cv_;
  const std::atomic<int>* interrupt_ = nullptr;
  bool stop_ = false;

  std::deque<Task> tasks_;  // stable addresses: workers read a running task unlocked
  FreeSlots free_tasks_;
  std::unordered_map<OpId, std::uint32_t> task_of_;  // submitted, not finished
  std::unordered_map<OpId, Held> held_;
  std::vector<std::vector<std::pair<std::uint64_t, std::uint32_t>>> ready_;  // per accelerator (key, task), unordered
  std::vector<std::uint8_t> running_;
  std::deque<Xfer> xfers_;
  FreeSlots free_xfers_;
  std::vector<std::uint32_t> pending_;  // oldest first
  std::vector<std::deque<std::uint32_t>> recv_q_;
  std::vector<std::uint8_t> send_busy_, recv_busy_;
  std::uint64_t next_xfer_id_ = 0, memory_epoch_ = 0;
  std::vector<TransferIntent> intents_;
  std::vector<std::size_t> intent_index_, selected_;
  std::vector<std::uint8_t> take_;  // arbitrate()'s scratch: which pending intents start
  std::vector<std::int64_t> used_, peak_;
  std::vector<Done> done_;
  // Per accelerator: 0 up, 1 found lost (lose()), 2 failed (fail_accelerator()).
  std::vector<std::uint8_t> down_;
  std::vector<AccelId> lost_q_;  // found by lose(), not yet taken
  std::size_t live_ = 0, refused_ = 0, memory_waits_ = 0;
  std::string fault_;  // an internal error to report from advance_to

  Nanos now_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace slicesched
