// Where issued operators run: the emulated cluster (offline) or the live
// executors. The engine drives either through this interface, so scheduling,
// feedback and metrics are the same code in both modes. A backend reports
// what happened only as Feedback; what is recorded for users (intervals,
// utilization, traces) is the engine observers' business, not the backend's.
module;
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

export module slicesched.core.backend;
import slicesched.core.gmg;
import slicesched.core.sampling;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched {

// A completion, reported in completion order.
struct Feedback {
  enum class Kind : std::uint8_t { kOp, kTransfer };
  Kind kind = Kind::kOp;
  OpId op = kNoOp;   // the operator that finished, or the transfer's consumer
  OpId src = kNoOp;  // the transfer's producer
  AccelId from = kNoAccel, to = kNoAccel;
  std::int64_t bytes = 0;
  Nanos t = 0;         // when it finished
  Nanos measured = 0;  // how long it ran
  // Live mode only: the tokens a model head sampled, one per sequence of
  // its iteration, in plan order; and why an operator failed (it still
  // counts as finished, so its instance drains; `measured` is then not a
  // measurement and must not be learned from).
  std::vector<std::int64_t> tokens;
  bool failed = false;
  std::string error;
  // Failed because an accelerator was lost (Backend::fail_accelerator): its
  // input or its accelerator is gone. The work is to be redone elsewhere,
  // not given up.
  bool lost = false;
  // When it started on the backend's clock (an operator on `from`, a
  // transfer on the link from -> to), so [start, t] is the interval it
  // occupied; -1 when it never ran (lost while queued). In live mode
  // `measured` is timed inside the worker and may be shorter.
  Nanos start = -1;
  // Parallel to `tokens` when a sequence of the iteration asked for
  // log-probabilities (empty otherwise; a sequence that did not ask has an
  // entry with no alternatives).
  // (Last, so that positional initializers of the fields above stand.)
  std::vector<TokenLogprob> logprobs;
};

// What one iteration of a tenant computes, for backends that run real
// models: the sequences it advances, each with the tokens already in its KV
// cache and its new token ids (a prompt, or the last sampled token).
struct IterationPlan {
  struct Seq {
    std::uint64_t seq = 0;  // unique within the tenant
    std::int64_t position = 0;
    std::vector<std::int64_t> tokens;
    // How its next token is chosen (null: greedy, no log-probabilities).
    std::shared_ptr<const SamplingParams> sampling;
    // What penalties count (only when sampling->penalized()): the prompt's
    // tokens, then the output's from history[prompt_tokens] on.
    std::vector<std::int64_t> history;
    std::int64_t prompt_tokens = 0;
    // Its cache (`position` tokens) comes back from host memory, where
    // Backend::swap_out put it, instead of from the lane's last iteration.
    bool from_host = false;
  };
  std::uint32_t tenant = 0;
  std::vector<Seq> seqs;
};

// What a backend's memory accounting saw (ground truth offline, the
// devices' budgets live): per accelerator its budget and the most it held
// at once, weights included; operators that waited for memory to free
// before they could start (each counted once); receives refused for memory
// and retried. Empty vectors: the backend does not account memory.
struct MemoryStats {
  std::vector<std::int64_t> budget, peak;
  std::size_t waits = 0, refused_receives = 0;
};

// Called from the engine thread only.
class Backend {
 public:
  virtual ~Backend() = default;
  // Hands over an operator just issued at the backend's current time; its
  // inputs are done in `gmg` or were submitted before.
  virtual Status submit(const Gmg& gmg, OpId op) = 0;
  // Time of the next completion or start, or -1 when nothing is pending.
  virtual Nanos next_event() const = 0;
  // Moves to `t`, appending every completion up to and including `t`.
  virtual Status advance_to(Nanos t, std::vector<Feedback>& out) = 0;
  virtual Nanos now() const = 0;
  // The values the GMG let go of (Gmg::releases(), in order): a backend
  // that keeps operators' values in device memory frees them here; one
  // that only keeps time ignores them (the default). The engine calls it
  // once per step, after applying feedback and before submitting anything
  // new, so a value is released before the GMG can reuse its operator's
  // slot. An entry naming an operator the backend does not hold, or holds
  // from another issue, is ignored. `released` is read only during the
  // call. Cannot fail.
  virtual void release(std::span<const Release> /*released*/) {}
  // Whether the backend computes real values and so needs on_iteration()
  // (and the tenants need token ids). Timing-only backends say false.
  virtual bool wants_plans() const { return false; }
  // What instance `instance` computes; called before any of its operators
  // is submitted.
  virtual Status on_iteration(InstanceId /*instance*/, IterationPlan /*plan*/) { return Status::Ok(); }
  // Instance `instance` was taken back before any of its operators was
  // submitted (preempted, or failed out of memory): forget its plan. An
  // instance the backend has no plan for is ignored. Cannot fail.
  virtual void drop_iteration(InstanceId /*instance*/) {}
  // Swap to host memory (preemption_mode = "swap"): sequences `seqs` of
  // tenant `tenant` were preempted, and their parts of the KV caches that
  // operators `kv` retained (done, released by the GMG in this step but
  // not yet by release()) go to host memory until a plan brings them back
  // (IterationPlan::Seq::from_host). A sequence already there (back, then
  // preempted before its iteration ran) stays as it is. Backends that keep
  // no values keep nothing (the default). Fails naming the sequence or
  // operator it cannot keep.
  virtual Status swap_out(const Gmg& /*gmg*/, std::uint32_t /*tenant*/, std::span<const OpId> /*kv*/,
                          std::span<const std::uint64_t> /*seqs*/) {
    return Status::Ok();
  }
  // Sequences of `tenant` that will not come back (their requests were
  // abandoned): forget what swap_out kept of them. Cannot fail.
  virtual void forget_swapped(std::uint32_t /*tenant*/, std::span<const std::uint64_t> /*seqs*/) {}
  // Why nothing can progress although work is queued (e.g. every queued
  // operator waits for memory), or empty.
  virtual std::string stall_reason() const { return {}; }
  // What its memory accounting saw so far (see MemoryStats).
  virtual MemoryStats memory_stats() const { return {}; }
  // A fault at now(): accelerator `a` is lost with everything on it. Every
  // operator running or queued there, every transfer from or to it, and
  // every operator whose input only it held (now, or when it is submitted
  // later) fails with Feedback::lost, in completion order. `gmg` is the
  // engine's, with `a` already marked down. Backends that cannot lose an
  // accelerator refuse.
  virtual Status fail_accelerator(const Gmg& /*gmg*/, AccelId /*a*/, std::vector<Feedback>& /*out*/) {
    return FailedPrecondition("this backend cannot lose an accelerator ([[faults]] are simulated only)");
  }
  // The lost accelerator is back, empty (what it held before stays lost).
  virtual Status restore_accelerator(AccelId /*a*/) {
    return FailedPrecondition("this backend cannot lose an accelerator ([[faults]] are simulated only)");
  }
  // Accelerators the backend found lost on its own since the last call (a
  // live executor process that exited or stopped answering), in the order
  // found. The engine treats each as a [[faults]] entry due now: it marks
  // it down and calls fail_accelerator, so a discovered loss and a
  // configured one follow the same rules. Backends that cannot discover a
  // loss return nothing (the default).
  virtual std::vector<AccelId> take_lost() { return {}; }
};

}  // namespace slicesched
