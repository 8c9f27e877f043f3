// The global simulator: predicts, from a GMG snapshot and the estimators,
// how every issued operator and transfer will play out across the cluster.
//
// Snapshot build: each accelerator's queue is the set of issued operators
// placed on it; an operator is ready when its local predecessors are done
// and its remote inputs have arrived (GMG-known arrivals are used as they
// are, the others are simulated as transfers). HBM starts from what is
// resident: weights, held retained state, held outputs, landed copies.
//
// Advance rules (the executor's): one operator at a time per accelerator;
// among ready operators the higher priority first, then the earlier issue;
// no preemption. A cross-accelerator input is a transfer on its own lane;
// pending transfers start as the backend's TransferArbiter decides (see
// SimOptions::arbiter): by default the built-in "greedy" rule, inline (oldest
// intent first, one transfer per source and per destination, and while the
// oldest intent is blocked its source and destination take no younger one).
// An operator that has not been reported done cannot finish before the GMG's
// clock (`now`).
//
// Estimators: an EstimatorSet is read inline (the fast path); any other
// Estimator through its virtual predict_* (same results, slower). Callers
// holding an Estimator pass its linear() when it has one.
module;
#include <cstdint>
#include <optional>
#include <vector>

export module slicesched.simulator.global;
export import slicesched.core;
export import slicesched.core.estimator;
export import slicesched.core.plugin;
import slicesched.simulator.events;

export namespace slicesched {

struct SimOptions {
  Nanos horizon = -1;                // simulate until now + horizon; < 0: until everything is done
  bool stop_at_oom = true;           // what-if only needs to know a placement is infeasible
  bool record_hbm_timeline = false;  // per-accelerator (time, bytes) after every change
  bool record_transfers = false;
  // The rule that starts pending transfers: the backend's arbiter (the
  // simulator calls select() where the backend would), or null for the
  // default rule. An arbiter whose is_default_greedy() is true is not called:
  // the simulator applies that rule inline. Not thread-safe, like any
  // arbiter: one per simulator thread. Used only during run().
  TransferArbiter* arbiter = nullptr;
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

  bool feasible() const { return !oom.has_value(); }
  Nanos start_of(OpId op) const { return index_of[op] == kNotSimulated ? -1 : start[index_of[op]]; }
  Nanos finish_of(OpId op) const { return index_of[op] == kNotSimulated ? -1 : finish[index_of[op]]; }
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

 private:
  template <typename Est>
  const SimulationResult& run_with(const Gmg& gmg, const Est& est, const SimOptions& opt);
  template <typename Est>
  void build(const Gmg& gmg, const Est& est);
  template <typename Est>
  void advance(const Est& est, const SimOptions& opt);
  void alloc(AccelId a, std::int64_t bytes, Nanos t);
  void free(AccelId a, std::int64_t bytes, Nanos t);
  void release_input(std::uint32_t edge, Nanos t);
  void on_op_finish(std::uint32_t i, Nanos t);
  void on_input_ready(std::uint32_t i, Nanos t);
  void start_transfer(std::uint32_t x, Nanos t);
  void dispatch(Nanos t);
  template <typename Est>
  void arbitrate(const Est& est, Nanos t);
  template <typename Est>
  void arbitrate_with_plugin(const Est& est, Nanos t);

  SimulationResult r_;

  // Structure of arrays over nodes: the event loop touches only the hot
  // columns. Nodes [0, n_sim) are issued operators (simulated); the rest are
  // done producers they read ("ghosts", memory bookkeeping only).
  enum Flag : std::uint8_t { kKeepOutput = 1, kOutputHeld = 2, kRetainedHeld = 4 };
  struct Bytes {
    std::int64_t out, ws, ret;
  };
  struct SimEdge {
    std::uint32_t src, dst;  // node indices
    std::int64_t bytes;
    bool remote, retained;
  };
  struct ReadyEntry {
    std::uint64_t key;  // queue order: priority, then issue order
    std::uint32_t node;
  };
  struct Transfer {
    std::uint32_t edge;
    Nanos dur;
    Nanos since;  // when the intent appeared
  };
  inline void mark_dirty(AccelId a) {
    if (!dirty_flag_[a]) {
      dirty_flag_[a] = 1;
      dirty_.push_back(a);
    }
  }
  void make_ready(std::uint32_t i);

  std::uint32_t n_sim_ = 0;
  std::vector<AccelId> accel_;
  std::vector<std::uint64_t> key_;
  std::vector<Nanos> dur_, ready_t_;
  std::vector<std::uint32_t> pending_, consumers_;
  std::vector<std::uint32_t> in_begin_;   // n_sim + 1: in-edges of node i are [in_begin_[i], in_begin_[i+1])
  std::vector<std::uint32_t> out_begin_;  // nodes + 1, into out_refs_
  std::vector<Bytes> bytes_;
  std::vector<std::uint8_t> flags_;
  std::vector<std::uint32_t> node_of_;          // OpId -> node
  std::vector<SimEdge> edges_;                  // in-edges grouped by destination
  std::vector<std::uint32_t> out_refs_;         // out-edges grouped by source: indices into edges_
  std::vector<std::vector<ReadyEntry>> ready_;  // per accelerator, a heap
  std::vector<std::uint32_t> running_;          // per accelerator, node or kNotSimulated
  std::vector<Nanos> free_at_;                  // per accelerator: not before its last known completion
  std::vector<std::uint8_t> dirty_flag_;
  std::vector<AccelId> dirty_;
  std::vector<std::int64_t> used_, cap_;
  std::vector<Transfer> transfers_;
  std::vector<std::uint32_t> pending_transfers_;  // in intent order
  std::vector<std::uint8_t> send_busy_, recv_busy_;
  TransferArbiter* arbiter_ = nullptr;   // null: the default rule, inline
  std::vector<TransferIntent> intents_;  // the arbiter's view of pending_transfers_
  std::vector<std::size_t> picked_;
  EventQueue events_;
  Nanos now_ = 0;
  bool record_hbm_ = false, record_transfers_ = false, stop_at_oom_ = true, stopped_ = false;
};

// One-shot convenience over GlobalSimulator.
SimulationResult simulate(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt = {});
SimulationResult simulate(const Gmg& gmg, const Estimator& est, const SimOptions& opt = {});

}  // namespace slicesched
