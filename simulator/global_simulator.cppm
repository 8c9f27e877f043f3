// The global simulator: predicts, from a GMG snapshot and the estimators,
// how every issued operator and transfer will play out across the cluster.
//
// Snapshot build, from the GMG's dense columns (Gmg::view(): one cache line
// per operator): each accelerator's queue is the set of issued operators
// placed on it; an operator is ready when its local predecessors are done
// and its remote inputs have arrived (GMG-known arrivals are used as they
// are, the others are simulated as transfers). HBM starts from what is
// resident: weights, held retained state, held outputs, landed copies.
//
// Advance rules (the executor's): one operator at a time per accelerator;
// among ready operators the higher priority first, then the earlier issue;
// no preemption. A cross-accelerator input is a transfer on its own lane;
// pending transfers start as the backend's TransferArbiter decides (see
// SimOptions::arbiter): by default the core's default rule (OldestFirstRule),
// inline (oldest intent first, one transfer per source and per destination,
// and while the oldest intent is blocked its source and destination take no
// younger one).
// An operator that has not been reported done cannot finish before the GMG's
// clock (`now`).
//
// Estimators: an EstimatorSet is read inline (the fast path); any other
// Estimator through its virtual predict_* (same results, slower). Callers
// holding an Estimator pass its linear() when it has one.
module;
#include <array>
#include <climits>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

export module slicesched.simulator.global_simulator;
import slicesched.core.estimator;
import slicesched.core.plugin;
import slicesched.simulator.events;
import slicesched.core.ids;
import slicesched.core.gmg;

export namespace slicesched {

// Operators to simulate as if issued at `at`, in this order, onto these
// accelerators, though the GMG has them unscheduled: the scheduler's
// what-if, without a clone. The caller checks them first with
// Gmg::check_issue (the simulator assumes they pass). The result is the one
// for a clone with the same issue() calls made.
struct TentativeIssue {
  std::span<const OpId> ops;
  std::span<const AccelId> accels;  // parallel to ops
  Nanos at = 0;
};

class AccelComponents;

struct SimOptions {
  Nanos horizon = -1;                // simulate until now + horizon; < 0: until everything is done
  bool stop_at_oom = true;           // what-if only needs to know a placement is infeasible
  bool record_hbm_timeline = false;  // per-accelerator (time, bytes) after every change
  bool record_transfers = false;
  // The rule that starts pending transfers: the backend's arbiter (the
  // simulator calls select() where the backend would), or null for the
  // default rule. An arbiter whose uses_default_rule() is true is not
  // called: the simulator applies that rule inline. Not thread-safe, like any
  // arbiter: one per simulator thread. Used only during run().
  TransferArbiter* arbiter = nullptr;
  TentativeIssue tentative{};  // empty: the snapshot as it is
  // A what-if that only has to beat a known placement: stop (and set
  // SimulationResult::dominated) as soon as the tentative ops' summed
  // completion times, sum over them of finish - tentative.at in ns (an op
  // still running at the horizon counts as finishing there), must exceed
  // this. < 0: run to the end.
  std::int64_t dominated_above = -1;
  // The bound is on the tentative ops' latest completion (makespan, max
  // over them of finish - tentative.at) instead of their sum.
  bool dominated_by_makespan = false;
  // Simulate only the operators on these accelerators (and the tentative
  // ones, whose accelerators must be listed). The set must be closed: no
  // issued operator inside reads from or feeds one outside, and no done
  // producer inside feeds an issued operator outside (AccelComponents gives
  // such sets); a set that is not closed throws std::invalid_argument. Per-
  // accelerator results outside it are zero. Empty: the whole cluster.
  // Inside, the result equals the whole cluster's with two exceptions: an
  // OOM outside is not seen, and the default transfer rule reserves the
  // ports of the oldest blocked intent inside (not of the oldest anywhere).
  std::span<const AccelId> scope{};
  // place() only: simulate only the operators on these accelerators, a
  // closed set inside the prepared scope that holds the placement's
  // accelerators and those of the batch's producers (AccelComponents::
  // closure_of gives one; sorted). The placement's result is the one over
  // the prepared scope, except that an OOM elsewhere in it is not seen: a
  // what-if over a cluster-wide round then costs what the candidate's own
  // component holds, not the cluster. Ignored (the whole prepared scope is
  // simulated) with an arbiter plugin, whose select() may tie components
  // together. Empty: the prepared scope.
  std::span<const AccelId> focus{};
  // place() only, instead of `focus`: find the focus itself, as
  // focus_of->closure_of(gmg, accels, batch) (built on the prepared
  // snapshot), and only once the placement is known to need simulating: a
  // placement cut before its first event does not pay for its component.
  const AccelComponents* focus_of = nullptr;
};

// Which accelerators a snapshot ties together: two are joined when an issued
// operator on one reads from an issued or done operator on the other. A
// what-if of a batch needs only the closure of its candidate accelerators
// (and of where its inputs live), not the whole cluster. Not thread-safe.
class AccelComponents {
 public:
  // Recomputes from the snapshot: O(issued operators and their in-edges).
  void build(const Gmg& gmg);
  // The closed set holding `seeds` and the accelerators of the producers of
  // `ops` (a batch about to be issued), in id order, into `out`. Returns how
  // many issued operators it holds (what a what-if over it simulates).
  std::size_t closure(const Gmg& gmg, std::span<const AccelId> seeds, std::span<const OpId> ops,
                      std::vector<AccelId>& out);
  // The same for a few seeds (one candidate's accelerators), without the
  // shared scratch: safe to call from several threads at once after build().
  void closure_of(const Gmg& gmg, std::span<const AccelId> seeds, std::span<const OpId> ops,
                  std::vector<AccelId>& out) const;

 private:
  AccelId find(AccelId a);
  void join(AccelId a, AccelId b);
  std::vector<AccelId> parent_;
  std::vector<std::uint32_t> size_;
  std::vector<AccelId> root_of_;             // per accelerator, after build()
  std::vector<std::uint32_t> first_, fill_;  // members_[first_[r], first_[r + 1]): root r's component
  std::vector<AccelId> members_;
  std::vector<std::uint32_t> ops_of_;  // per root: issued operators in its component
  std::vector<AccelId> roots_;         // closure's scratch
  std::vector<std::uint8_t> mark_;     // closure's scratch, per root
};

struct OomEvent {
  Nanos t = 0;
  AccelId accel = kNoAccel;
  OpId op = kNoOp;           // the operator whose allocation did not fit
  bool at_transfer = false;  // the receive buffer of an input of `op`
  std::int64_t needed = 0, capacity = 0;
};

struct TransferRecord {
  OpId src = kNoOp, dst = kNoOp;
  AccelId from = kNoAccel, to = kNoAccel;
  std::int64_t bytes = 0;
  Nanos start = -1, finish = -1;
};

struct HbmPoint {
  Nanos t;
  std::int64_t bytes;
};

inline constexpr std::uint32_t kNotSimulated = 0xffffffffu;

struct SimulationResult {
  std::vector<OpId> ops;                                   // every simulated (issued) operator
  std::vector<Nanos> start, finish;                        // parallel to ops; -1 when past the horizon
  std::vector<std::uint32_t> index_of;                     // OpId -> index into ops, or kNotSimulated
  std::vector<Nanos> busy;                                 // per accelerator, ns of operator execution
  std::vector<std::int64_t> hbm_start, hbm_peak, hbm_end;  // per accelerator
  std::vector<std::vector<HbmPoint>> hbm_timeline;         // when recorded
  std::vector<TransferRecord> transfers;                   // when recorded
  std::optional<OomEvent> oom;                             // the first OOM, if any
  Nanos begin = 0, end = 0;                                // first and last event time
  std::size_t finished = 0;                                // operators finished within the horizon
  // Stopped early: the tentative ops' summed completion must exceed
  // SimOptions::dominated_above. Nothing else in the result is complete.
  bool dominated = false;

  inline bool feasible() const { return !oom.has_value(); }
  inline Nanos start_of(OpId op) const { return index_of[op] == kNotSimulated ? -1 : start[index_of[op]]; }
  inline Nanos finish_of(OpId op) const { return index_of[op] == kNotSimulated ? -1 : finish[index_of[op]]; }
};

// Reusable simulator: keeps its scratch buffers between runs, so a what-if
// loop allocates nothing after warm-up. Not thread-safe: one per thread.
class GlobalSimulator {
 public:
  // Builds from the snapshot and runs. The GMG and the estimators are only
  // read, and only during the call.
  const SimulationResult& run(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt = {});
  // The same through an Estimator's virtual predict_* (for one whose
  // linear() is null; otherwise pass the set, it is faster).
  const SimulationResult& run(const Gmg& gmg, const Estimator& est, const SimOptions& opt = {});

  // A what-if over many placements of one batch (the scheduler's round):
  // prepare() builds what every placement shares (the snapshot, scoped,
  // with the batch's ops issued at `at` wherever they go), then each
  // place() simulates the batch on `accels` (one per batch op, inside the
  // scope; it throws std::invalid_argument otherwise). place() gives what
  // run() gives with the same tentative issue and scope; opt.tentative and
  // opt.scope are ignored there. The GMG and the estimator must stay alive
  // and unchanged from prepare() to the last place().
  void prepare(const Gmg& gmg, const EstimatorSet& est, std::span<const OpId> batch, Nanos at,
               std::span<const AccelId> scope = {});
  void prepare(const Gmg& gmg, const Estimator& est, std::span<const OpId> batch, Nanos at,
               std::span<const AccelId> scope = {});
  const SimulationResult& place(std::span<const AccelId> accels, const SimOptions& opt = {});
  // Whether place(accels, {.dominated_above = above}) would stop before
  // simulating anything: even alone on its accelerators the batch's summed
  // completion must exceed `above` (>= 0). Cheap (the batch's own ops only).
  // With `by_makespan`, the batch's latest completion instead.
  bool dominated_alone(std::span<const AccelId> accels, std::int64_t above, Nanos horizon = -1,
                       bool by_makespan = false);
  // A floor for a round's pruning, over every placement that splits the
  // batch across accelerators as `accels` does (which of its operators
  // share one) and puts none of them on an accelerator holding one of its
  // inputs from done producers (so it transfers every one of them): the
  // batch's summed completion past `at` (with `by_makespan`, its latest
  // completion past `at`), in ns, is at least this whatever the
  // accelerators' types, queues and links are. Each op takes at least its
  // fastest type's predicted time and starts no earlier than `at`, its
  // batch predecessors' finishes (plus the estimator's least transfer time,
  // EstimatorSet::transfer_floor, from another accelerator) and its inputs'
  // earliest landing (ready plus that least time). Cheap: one value per
  // split, kept until the next prepare(). < 0: no floor (not prepared, a
  // horizon, or a batch too large to prune).
  // A placement whose summed completion exceeds a bound is one place()
  // would end as dominated (or out of memory), so a candidate away from the
  // holders whose floor exceeds it need not be tried at all.
  Nanos away_floor(std::span<const AccelId> accels, Nanos horizon, bool by_makespan);
  // How many place() calls since construction ended as dominated before
  // their first event because the batch's inputs from done producers on
  // other accelerators (transfers at their predicted times) make it lose,
  // with nothing able to run out of HBM first: the placements the
  // simulation would have ended as dominated, found without simulating.
  std::size_t cut_by_inputs() const { return cut_by_inputs_; }
  // How many placements since construction were found dominated before
  // their first event only once the work surely queued ahead of the
  // batch's operators on their accelerators was counted (busy_floor()).
  std::size_t cut_by_queues() const { return cut_by_queues_; }

 private:
  template <typename Est>
  const SimulationResult& run_with(const Gmg& gmg, const Est& est, const SimOptions& opt);
  template <typename Est>
  void prepare_with(const Gmg& gmg, const Est& est, std::span<const OpId> batch, Nanos at,
                    std::span<const AccelId> scope);
  // `last`: no placement follows before the next prepare (run()), so the
  // state prepare() built needs no copy to restore.
  template <typename Est>
  const SimulationResult& place_with(const Est& est, std::span<const AccelId> accels, const SimOptions& opt, bool last);
  // The snapshot build's steps (snapshot.cpp), in prepare_with's order.
  struct PendingTransfer;  // below
  void mark(std::span<const AccelId> scope);
  void reset_accelerators(std::span<const AccelId> scope);
  void select_nodes();
  template <typename Est>
  std::uint32_t add_nodes(const Est& est);
  bool add_inputs(std::uint32_t out_total);
  bool add_simulated_input(std::uint32_t i, std::uint32_t s, const Edge& ge);
  bool add_done_input(std::uint32_t i, std::uint32_t s, const Edge& ge, std::uint32_t& out_total);
  std::uint32_t add_ghost(OpId id, const OpRow& op, std::uint32_t& out_total);
  [[noreturn]] void throw_not_closed(std::uint32_t i, OpId src);
  void unmark();
  void lay_out_out_refs();
  void locate_deferred();
  void collect_batch_edges();
  void order_queues();
  void size_bitsets();
  // The batch's predicted times on `accels` and the bound that cuts a
  // dominated placement short (pruning_, dominated_at_; see below).
  template <typename Est>
  void set_bound(const Est& est, std::span<const AccelId> accels, std::int64_t dominated_above, Nanos horizon,
                 bool by_makespan);
  void index_ghosts();
  // Calls f(a) for every accelerator of the scope (scope_), or of the
  // cluster when there is none.
  template <typename F>
  void each_accel(std::size_t n_acc, F&& f) const {
    if (!scope_.empty())
      for (AccelId a : scope_) f(a);
    else
      for (AccelId a = 0; a < n_acc; ++a) f(a);
  }
  // The event loop, compiled once per estimator kind and combination of
  // what it records.
  template <typename Est, bool kHbm, bool kTransfers>
  void advance(const Est& est, const SimOptions& opt);
  template <bool kHbm>
  void alloc(AccelId a, std::int64_t bytes, Nanos t);
  template <bool kHbm>
  void free(AccelId a, std::int64_t bytes, Nanos t);
  template <bool kHbm>
  void on_op_finish(std::uint32_t i, Nanos t);
  template <typename Est, bool kHbm, bool kTransfers>
  void start_transfer(const Est& est, const PendingTransfer& pt, Nanos t);
  template <bool kHbm>
  void dispatch(Nanos t);
  template <typename Est, bool kHbm, bool kTransfers>
  void arbitrate(const Est& est, Nanos t);
  template <typename Est, bool kHbm, bool kTransfers>
  void arbitrate_with_plugin(const Est& est, Nanos t);
  void on_input_ready(std::uint32_t i, Nanos t);
  void make_ready(std::uint32_t i);
  std::uint32_t pop_ready(AccelId a);  // the first ready node of `a` in queue order; `a` must have one
  OpId op_of(std::uint32_t node) const;
  void note_intent(std::uint32_t edge, Nanos since);
  inline void mark_dirty(AccelId a) {
    if (!dirty_flag_[a]) {
      dirty_flag_[a] = 1;
      dirty_.push_back(a);
    }
  }

  SimulationResult r_;

  enum EventKind : std::uint32_t { kReady, kOpFinish, kTransferReady, kTransferFinish, kWake };
  // An op's successors still unscheduled once the batch is issued.
  inline std::uint32_t open_succs(OpId id, const OpRow& op) const {
    return batch_.empty() ? op.unscheduled_succs : op.unscheduled_succs - tent_succs_[id];
  }

  // Per-node memory state.
  enum Flag : std::uint8_t { kKeepOutput = 1, kOutputHeld = 2, kRetainedHeld = 4, kBatchOp = 8 };
  // Nodes [0, n_sim) are issued operators (simulated), in OpId order, so
  // node index == result index; the rest are done producers they read
  // ("ghosts", memory bookkeeping only). What the event loop reads per
  // operator sits in one 64-byte record. Node indices stay below 2^30 (the
  // top bits of an edge's source are flags).
  struct alignas(64) Node {
    Nanos dur;                  // predicted once, at build
    std::int64_t out, ws, ret;  // bytes: output, workspace, retained state
    AccelId accel;
    std::uint32_t in_begin, in_end;    // in-edges: edges_[in_begin, in_end)
    std::uint32_t out_begin, out_end;  // out-edges: out_refs_[out_begin, out_end)
    std::uint32_t consumers;           // readers not yet finished
    Flag flags;
  };
  // What an input arriving touches, kept apart from the 64-byte records so
  // it stays in cache: where the node queues (accelerator, rank in its
  // queue order) and how many inputs are not yet available. Simulated
  // nodes only.
  struct Arrival {
    AccelId accel;
    std::uint32_t rank;
    std::uint32_t pending;
  };
  std::vector<Arrival> arrival_;
  // A transfer intent waiting for the arbiter, with its ports at hand so a
  // scan over the waiting ones touches nothing else.
  struct PendingTransfer {
    std::uint32_t edge;
    AccelId from, to;
  };
  // An input edge src -> dst (node indices); src carries the flags. A
  // remote edge is a transfer, named by the edge's index.
  static constexpr std::uint32_t kRemote = 0x80000000u, kRetained = 0x40000000u, kNodeMask = 0x3fffffffu;
  struct SimEdge {
    std::uint32_t src;  // node | kRemote | kRetained
    std::uint32_t dst;
    std::int64_t bytes;
  };
  // Out-edges grouped by source: the reader, and the edge with kRemote set
  // when it is a transfer (a local reader needs no look at the edge).
  struct OutRef {
    std::uint32_t dst, edge;
  };
  static constexpr std::uint32_t kGhost = 0x80000000u;  // in r_.index_of during the build: a ghost's node

  std::uint32_t n_sim_ = 0;
  std::vector<Node> nodes_;
  std::vector<Nanos> ready_t_;  // per simulated node: not before (issue, local inputs, landed copies)
  std::vector<OpId> ghost_op_;  // per ghost node
  std::vector<SimEdge> edges_;  // in-edges grouped by destination
  std::vector<OutRef> out_refs_;
  std::vector<std::uint32_t> out_limit_;  // per node, during the build: end of its reserved out_refs_ region
  std::vector<std::uint64_t> key_;        // per simulated node, during the build: its queue key
  // A tentative issue, during the build: per GMG slot, 1 + its place in the
  // batch (0: not in it), and how many of its successors the batch issues.
  // Zero outside a build.
  std::vector<std::uint32_t> tent_, tent_succs_;
  std::vector<OpId> tent_sorted_;
  // Between prepare() and place(): the snapshot, the estimator (one of the
  // two), the batch, and what every placement starts from.
  const Gmg* gmg_ = nullptr;
  GmgView view_;  // gmg_'s
  const EstimatorSet* est_set_ = nullptr;
  const Estimator* est_virtual_ = nullptr;
  std::vector<OpId> batch_;
  Nanos at_ = 0;
  std::vector<AccelId> scope_;              // sorted; empty: the cluster
  std::vector<AccelId> focus_;              // the placement's (SimOptions::focus); empty: scope_
  std::vector<std::uint32_t> focus_nodes_;  // the simulated nodes on focus_ and the batch's, ascending
  bool focused_ = false;                    // the placement being simulated has a focus
  // r_.start and r_.finish are sized for this prepare and -1 except at the
  // nodes listed in results_set_ (the last focused placement's): the next
  // focused placement resets those, not every node (on a cluster-wide round
  // the whole cluster's issued operators, once per simulated candidate).
  bool results_partial_ = false;
  std::vector<std::uint32_t> results_set_;
  // Per batch op and accelerator type: its predicted time (kNoDur: not
  // yet asked), so a round's thousands of bound checks ask the estimator
  // once per type, not once per candidate. Reset by every prepare().
  static constexpr Nanos kNoDur = INT64_MIN;
  std::vector<Nanos> dur_of_type_;
  // Ghost nodes by accelerator (ghost_off_[a], ghost_off_[a + 1]) into
  // ghost_list_, built at the first focused placement after a prepare().
  std::vector<std::uint32_t> ghost_off_, ghost_list_;
  bool ghosts_indexed_ = false;
  std::vector<std::uint32_t> tnode_;   // per batch op: its node
  std::vector<std::uint8_t> is_tent_;  // per simulated node: a batch op
  std::vector<AccelId> tent_accels_;   // accelerators whose queues hold batch ops now
  struct Deferred {                    // an in-edge of a batch op: remote or not is the placement's
    std::uint32_t edge, out_ref;
    Nanos done_t, arrived;  // of a ghost source
    std::uint8_t ghost;
  };
  std::vector<Deferred> deferred_;
  std::vector<Event> node_events_, tent_events_;  // issued ops' events by node; a placement's batch transfers
  std::vector<std::uint32_t> ev_begin_;           // node_events_[ev_begin_[i], ev_begin_[i + 1]): node i's
  // What prepare() left, saved node by node as placements touch them:
  // node i is saved when saved_at_[i] == epoch_ (bumped by every prepare);
  // base_saved_: every node is; some_saved_: any is.
  std::vector<Node> base_nodes_;
  std::vector<Arrival> base_arrival_;
  std::vector<std::uint64_t> saved_at_;
  std::uint64_t epoch_ = 0;
  bool base_saved_ = false, some_saved_ = false;
  std::vector<std::int64_t> base_used_;
  std::vector<std::uint8_t> in_scope_;  // per accelerator, during a scoped build
  std::vector<OpId> scoped_ops_;        // the issued ops inside the scope, during a scoped build
  bool timelines_dirty_ = false;        // a run recorded timelines: the next placement clears them all

  // Ready queues. Each accelerator's simulated nodes are ranked once by
  // queue order (queue_[a][rank] is the node); the ready ones are a bitset
  // over ranks with summary levels (64-ary), so the first ready one is
  // found with one countr_zero per level and no heap.
  std::vector<std::vector<std::uint32_t>> queue_;
  std::vector<std::uint64_t> last_key_;     // per accelerator, during the build
  std::vector<std::uint8_t> out_of_order_;  // per accelerator: OpId order is not queue order
  std::vector<std::uint32_t> bits_off_;     // [a * levels_ + l]: first word of level l of a's bitset
  std::vector<std::uint64_t> bits_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> sort_scratch_;
  unsigned levels_ = 1;

  std::vector<std::uint32_t> running_;  // per accelerator, node or kNotSimulated
  std::vector<Nanos> free_at_;          // per accelerator: not before its last known completion
  std::vector<std::uint32_t> dirty_flag_;
  std::vector<AccelId> dirty_;
  std::vector<std::int64_t> used_, cap_;
  std::vector<PendingTransfer> pending_transfers_;  // in intent order
  std::vector<std::uint8_t> send_busy_, recv_busy_;
  TransferArbiter* arbiter_ = nullptr;  // null: the default rule, inline
  struct IntentInfo {
    Nanos since;
    std::uint64_t number;
  };
  std::vector<IntentInfo> intents_of_;  // per edge, only with an arbiter_
  std::uint64_t intent_count_ = 0;
  std::vector<TransferIntent> intents_;  // the arbiter's view of pending_transfers_
  std::vector<std::size_t> picked_;
  EventQueue events_;
  Nanos now_ = 0;
  bool stop_at_oom_ = true, stopped_ = false;

  // Cutting a dominated placement short (SimOptions::dominated_above).
  // Each batch op's finish is bounded below by the batch's own structure:
  // it starts no earlier than the current time, at_, its batch
  // predecessors' finishes plus their transfers' predicted times, and the
  // issued work certainly ahead of it on its accelerator. That
  // bound is recomputed when a batch op starts (a started op's finish is
  // known) and gives the first event time at which the summed completion
  // must exceed the bound, dominated_at_.
  static constexpr Nanos kNever = INT64_MAX;
  static constexpr Nanos kBeforeAll = INT64_MIN / 4;  // before any event
  static constexpr std::size_t kMaxPrunedBatch = 64;  // larger batches run to the end
  struct BatchEdge {
    std::uint32_t k, p;  // batch op k reads batch op p (p < k)
    std::int64_t bytes;
    Nanos x;  // its predicted transfer time in this placement (0: local)
  };
  // `ext`, when given: per batch op, the earliest its inputs from done
  // producers elsewhere can land (dominated_by_inputs()).
  Nanos dominated_from(Nanos t, const Nanos* ext = nullptr) const;
  std::vector<BatchEdge> batch_edges_;  // from prepare(), grouped by k ascending
  std::vector<Nanos> batch_dur_;        // per batch op, in this placement
  // Per batch op, in this placement: busy_floor() of its accelerator.
  std::vector<Nanos> batch_floor_;
  bool floored_ = false;  // some batch_floor_ entry is set (past at_)
  // The soonest a batch op of priority rank `rank` (its queue key >> 48)
  // can start on accelerator a: the issued ops queued ahead of it there
  // that are sure to be ready whenever it could be picked (ready by at_, or
  // fed only by such ops on a) all run first, one at a time, from the
  // accelerator's last known completion (or the earliest of their ready
  // times, if later). Other work only delays them, so it is a floor for
  // every placement. The batch's keys are the newest of its priority, so
  // what is ahead depends on the rank alone: memoized per accelerator and
  // rank until the next prepare(). kBeforeAll: nothing is sure to be ahead.
  Nanos busy_floor(AccelId a, std::uint64_t rank);
  struct BusyFloor {
    std::uint64_t epoch = 0, rank = 0;  // valid while epoch == epoch_
    Nanos floor = 0;
  };
  std::vector<BusyFloor> busy_floor_;    // per accelerator
  std::vector<std::uint64_t> in_ahead_;  // per simulated node: == ahead_stamp_ when busy_floor() counted it
  std::uint64_t ahead_stamp_ = 0;
  std::vector<Nanos> batch_finish_;  // per batch op: its finish once started, else -1
  bool pruning_ = false;
  Nanos bound_sum_ = 0;     // dominated_above + batch size * at_: a bound on the summed finishes
  bool bound_max_ = false;  // bound_sum_ is dominated_above + at_, a bound on the latest finish
  Nanos horizon_end_ = kNever;
  Nanos dominated_at_ = kNever;

  // The same bound with what the batch-alone one leaves out: an input from
  // a done producer on another accelerator than its reader's (a KV cache
  // where the previous iteration ran) is a transfer that starts no earlier
  // than max(producer done, at_) and takes its predicted time, so its
  // reader starts no earlier than that. A placement that loses even so is
  // cut before its first event, but only when no OOM can happen in the
  // prepared scope before the simulation would have cut it (cannot_oom()):
  // then it is exactly the placement the simulation ends as dominated.
  struct ExtInput {
    std::uint32_t k;  // the reading batch op
    AccelId from;     // where the producer's output is
    std::int64_t bytes;
    Nanos ready;  // max(producer done, at_): when the transfer may start
  };
  void collect_ext_inputs();
  template <typename Est>
  bool dominated_by_inputs(const Est& est, std::span<const AccelId> accels);
  template <typename Est>
  Nanos away_floor_with(const Est& est, std::uint64_t crossing, bool by_makespan);
  // Batch op k's predicted time on `type`, in ns, through dur_of_type_
  // (sized by prepare()): what set_bound() and away_floor() both read.
  template <typename Est>
  Nanos batch_op_nanos(const Est& est, std::size_t k, AccelTypeId type);
  struct FloorMemo {
    std::uint64_t crossing = 0;  // bit e: batch edge e joins two accelerators
    bool by_makespan = false;
    Nanos floor = -1;
  };
  std::vector<FloorMemo> floor_memo_;  // away_floor()'s, cleared by prepare()
  bool cannot_oom();
  // set_bound()'s last few results before anything runs, by what they
  // depend on (the batch's times and transfers in the placement, the bound,
  // the horizon): a round's thousands of candidates share a handful of
  // layouts and bounds. Cleared by prepare().
  struct BoundMemo {
    std::vector<Nanos> key;
    Nanos at = kNever;
    bool valid = false;
  };
  std::array<BoundMemo, 4> bound_memo_;
  std::size_t bound_memo_next_ = 0;
  std::vector<ExtInput> ext_inputs_;     // from prepare(): inputs of the batch from done producers not yet landed
  std::vector<Nanos> ext_ready_;         // per batch op, in this placement
  std::int8_t oom_free_ = -1;            // cannot_oom() for this prepare; < 0: not yet known
  std::vector<std::int64_t> most_used_;  // cannot_oom()'s, per accelerator
  std::size_t cut_by_inputs_ = 0, cut_by_queues_ = 0;
  // set_bound() as dominated_alone() last left it, so place() right after
  // it with the same arguments does not compute it again.
  bool bound_set_ = false;
  std::vector<AccelId> bound_accels_;
  std::int64_t bound_above_ = -1;
  Nanos bound_horizon_ = -1;
  bool bound_by_makespan_ = false;
};

// One-shot convenience over GlobalSimulator.
SimulationResult simulate(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt = {});
SimulationResult simulate(const Gmg& gmg, const Estimator& est, const SimOptions& opt = {});

}  // namespace slicesched
