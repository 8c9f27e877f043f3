// The emulated cluster: offline mode's stand-in for real accelerators. It
// plays ground truth (measured latencies plus noise) on a virtual clock with
// exactly the executor's rules, and reports completions the way the live
// executor will. The scheduler never reads it; it only sees the feedback.
//
// Rules (same as the executor and the global simulator): one operator at a
// time per accelerator; among ready operators the higher priority first,
// then the earlier issue; no preemption; a cross-accelerator input is a
// transfer, started when the TransferArbiter picks it. The arbiter is asked
// at the same points as in the global simulator (see TransferArbiter): after
// the events of a time are applied and the accelerators picked their next
// operators, when an operator or transfer finished or an intent appeared.
//
// Memory, when budgets are set (set_memory): the live executor's rules.
// Each accelerator holds its weights; an operator allocates its output,
// retained state and workspace when it starts, frees its workspace and its
// received copies when it finishes, and its output and retained state when
// the GMG lets go of them (release()); a transfer allocates its copy on
// the destination when it starts. An operator that does not fit waits (a
// later ready one that fits may run meanwhile), counted once; a transfer
// that does not fit is refused and retried when memory frees. Nothing
// ever holds more than its budget.
module;
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

export module slicesched.simulator.emulated_cluster;
import slicesched.core.calibration;
import slicesched.core.plugin;
import slicesched.simulator.profile;
import slicesched.models.model;
import slicesched.simulator.events;
import slicesched.core.slots;
import slicesched.core.backend;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.accel;
import slicesched.core.gmg;

export namespace slicesched {

// How long things really take. Implementations may be stateful (noise), so
// calls must come in a deterministic order; the cluster guarantees that.
class GroundTruth {
 public:
  virtual ~GroundTruth() = default;
  // Seconds that issued operator `op` takes on its accelerator.
  virtual Result<double> op_seconds(const Gmg& gmg, OpId op) = 0;
  virtual double transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) = 0;
};

// Ground truth from measured profiles: operators by their role in their
// model (ModelSet: an embedding, a group of n decoder layers, a head) and
// the iteration's dims from the LLMServingSim table (the head at
// `sequences` positions: it computes logits for each sequence's last token
// only; attention over the cache reads the model's own K and V per layer),
// transfers from the Vidur send/recv table, each scaled by seeded
// multiplicative noise. A template no model registered is costed by its op
// names (embed, layers<g>, head) and the profile's own shape. See
// docs/ground-truth.md.
class ProfileGroundTruth final : public GroundTruth {
 public:
  // What op_seconds costs, before the noise: also what TypedGroundTruth
  // plays on the accelerators of the profile's own type.
  static Result<double> measured_seconds(const LayerProfile& layers, const ModelSet& models, const Gmg& gmg, OpId op);

  ProfileGroundTruth(LayerProfile layers, TransferProfile transfers, std::uint64_t seed, double op_cv = 0.006,
                     double transfer_cv = 0.0163);
  // The models behind the GMG's templates.
  void set_models(ModelSet models) { models_ = std::move(models); }
  Result<double> op_seconds(const Gmg& gmg, OpId op) override;
  double transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) override;

 private:
  ModelSet models_;
  LayerProfile layers_;
  TransferProfile transfers_;
  NoisyClock op_noise_, transfer_noise_;
};

// Ground truth from a calibration profile (what `slicesched calibrate`
// measured on real devices, or what a simulation learned): each operator's
// time is its profile fit applied to its features, each transfer's the
// pair's fit, scaled by seeded multiplicative noise. An operator or pair the
// profile lacks is an error naming it (transfers fall back to a "*" -> "*"
// entry when present).
class CalibratedGroundTruth final : public GroundTruth {
 public:
  CalibratedGroundTruth(CalibrationProfile profile, const AcceleratorSet& accels, std::uint64_t seed,
                        double op_cv = 0.006, double transfer_cv = 0.0163);
  Result<double> op_seconds(const Gmg& gmg, OpId op) override;
  double transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) override;
  // Checks up front that every pair of `accels` has a transfer fit.
  Status check_transfers() const;

 private:
  CalibrationProfile profile_;
  const AcceleratorSet& accels_;
  NoisyClock op_noise_, transfer_noise_;
};

// Not thread-safe: one engine thread drives it.
class EmulatedCluster final : public Backend {
 public:
  // `truth` and `arbiter` must outlive the cluster; the arbiter is this
  // cluster's alone (arbiters are not thread-safe).
  EmulatedCluster(std::size_t accelerators, GroundTruth& truth, TransferArbiter& arbiter);

  // Hands over an operator the scheduler just issued (at the cluster's
  // current time). Its inputs must be done in `gmg` or submitted before.
  // Fails if the op is not issued or was submitted already.
  Status submit(const Gmg& gmg, OpId op) override;

  // Time of the next thing that will happen, or -1 when idle.
  Nanos next_event() const override;
  // Moves the clock to `t`, appending every completion up to and
  // including `t` to `out`.
  Status advance_to(Nanos t, std::vector<Feedback>& out) override;
  Nanos now() const override { return now_; }
  bool idle() const { return live_ == 0; }
  // A lost accelerator (see Backend): what ran or waited there, transfers
  // from or to it, and what waits on data only it held fail now with
  // Feedback::lost; operators submitted later that read such data fail as
  // soon as their other inputs are in. Work cut short counts as busy.
  Status fail_accelerator(const Gmg& gmg, AccelId a, std::vector<Feedback>& out) override;
  Status restore_accelerator(AccelId a) override;
  // Binds memory from now on: `budgets[a]` bytes on accelerator a (its
  // HBM), `resident[a]` of them held by weights. Both as long as the
  // cluster; before the first submit. Without it memory is not accounted.
  Status set_memory(std::vector<std::int64_t> budgets, std::span<const std::int64_t> resident);
  void release(std::span<const Release> released) override;
  std::string stall_reason() const override;
  // How stall_reason() names the arbiter, e.g. "transfer arbiter 'serial'".
  void set_arbiter_name(std::string who) { arbiter_name_ = std::move(who); }
  MemoryStats memory_stats() const override { return {budget_, peak_, memory_waits_, refused_}; }

 private:
  struct Succ {
    std::uint32_t task;
    std::int64_t bytes;
    bool remote;
  };
  struct Task {
    OpId op = kNoOp;
    AccelId accel = kNoAccel;
    std::uint64_t key = 0;  // priority, then issue order
    Nanos dur = 0, start = -1;
    std::uint32_t pending = 0;
    std::vector<Succ> succs;
    bool lost = false;           // an input died with its accelerator: it fails once its inputs are in
    bool dead = false;           // failed and reported; the slot waits for its inputs and finish event
    bool event_pending = false;  // its finish event is queued
    std::int64_t alloc = 0;      // output, retained state and workspace, allocated when it starts
    std::int64_t out = 0, retained = 0, workspace = 0;
    std::int64_t received = 0;  // copies landed for it, freed when it finishes
    std::uint64_t issue_seq = 0;
    bool waited = false;  // counted as waiting for memory
  };
  // An operator's output and retained state held after it finished, until
  // the GMG releases them.
  struct Held {
    std::uint64_t issue_seq = 0;
    AccelId accel = kNoAccel;
    std::uint32_t epoch = 0;  // the accelerator's loss count when allocated
    std::int64_t out = 0, retained = 0;
  };
  struct Xfer {
    OpId src = kNoOp;
    std::uint32_t dst_task = 0;
    AccelId from = kNoAccel, to = kNoAccel;
    std::int64_t bytes = 0;
    Nanos dur = 0, start = -1;
    Nanos since = 0;         // when the intent appeared
    std::uint64_t seq = 0;   // intent number: the age tie-break
    bool active = false;     // waiting or moving
    bool cancelled = false;  // its accelerator was lost while it moved: the finish event is void
  };
  Status start_ready();
  Status arbitrate();
  void on_op_finish(std::uint32_t task, std::vector<Feedback>& out);
  void on_transfer_finish(std::uint32_t x, std::vector<Feedback>& out);
  void add_intent(OpId src, AccelId from, std::uint32_t dst_task, std::int64_t bytes);
  void input_ready(std::uint32_t task);
  void input_arrived(std::uint32_t task);
  void fail_task(std::uint32_t task, std::vector<Feedback>& out);
  void fail_pending(std::vector<Feedback>& out);
  void free_dead(std::uint32_t task);
  bool output_lost(const Gmg& gmg, OpId src) const;
  void mark_dirty(AccelId a);
  bool fits(AccelId a, std::int64_t bytes) const { return budget_.empty() || used_[a] + bytes <= budget_[a]; }
  void charge(AccelId a, std::int64_t bytes);
  void uncharge(AccelId a, std::int64_t bytes) {
    if (!budget_.empty()) used_[a] -= bytes;
  }
  std::uint32_t pop_runnable(AccelId a);

  static constexpr std::uint32_t kNoTask = 0xffffffffu, kNotRunning = 0xffffffffu;
  GroundTruth& truth_;
  TransferArbiter& arbiter_;
  bool arbitrate_ = false;  // something changed that the arbiter has not seen
  std::uint64_t next_intent_ = 0;
  std::vector<TransferIntent> pending_;  // the arbiter's view of intents_
  std::vector<std::size_t> picked_;
  std::vector<Task> tasks_;
  FreeSlots free_tasks_;
  std::vector<std::uint32_t> task_of_;  // OpId -> task while it lives
  std::vector<Xfer> xfers_;
  FreeSlots free_xfers_;
  std::vector<std::uint32_t> intents_;                                       // pending transfers, oldest first
  std::vector<std::vector<std::pair<std::uint64_t, std::uint32_t>>> ready_;  // per accel heap of (key, task)
  std::vector<std::uint32_t> running_;
  std::vector<std::uint8_t> send_busy_, recv_busy_, dirty_flag_;
  std::vector<AccelId> dirty_;
  EventQueue events_;
  Nanos now_ = 0;
  std::size_t live_ = 0;
  std::vector<std::uint8_t> down_;  // per accelerator: lost now
  std::vector<Nanos> lost_at_;      // per accelerator: its last loss (-1: never)
  // Per accelerator: the GPUs that each hold a whole copy of an operator's
  // output and of what it receives (a tensor-parallel group's N; 1 for a
  // GPU). Its weights, KV caches and workspaces are sharded, held once.
  std::vector<int> copies_;
  std::vector<std::uint8_t> lost_op_;    // per OpId: failed as lost (its output is garbage)
  std::vector<std::uint32_t> fail_now_;  // lost tasks whose inputs are all in: they fail at now_
  // Memory (empty budget_: not accounted).
  std::vector<std::int64_t> budget_, used_, peak_, resident_;
  std::vector<std::uint32_t> epoch_;  // per accelerator: losses so far
  std::vector<Held> held_;            // per OpId
  std::size_t memory_waits_ = 0, refused_ = 0;
  bool refused_pending_ = false;
  std::string arbiter_name_ = "the transfer arbiter";  // a receive was refused since memory last freed
};

}  // namespace slicesched
