// The Global Mapping Graph: every live operator of every graph instance, its
// state (unscheduled / issued / done), placement, timestamps, byte sizes and
// retained state, plus the Accelerator Set it maps onto.
//
// Storage is flat (vectors of plain records with intrusive edge lists), so a
// clone is a handful of memcpy-like vector copies. Templates and the
// accelerator set are immutable while shared by clones.
//
// Readers see an operator as an OpRecord (op()); the global simulator, which
// visits every issued operator in every what-if, reads the dense columns of
// view() instead: one cache line per operator, kept current by every
// mutation.
//
// Threading: a Gmg is not thread-safe; clones are independent objects and may
// be used on different threads at once.
module;
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

export module slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.slots;
import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.status;

export namespace slicesched {

enum class OpState : std::uint8_t { kUnscheduled, kIssued, kDone };

inline constexpr std::uint32_t kNoEdge = 0xffffffffu;
inline constexpr int kMaxRank = 6;

// A concrete tensor shape, kept per operator for checks at attach time.
struct ConcreteShape {
  std::array<std::int64_t, kMaxRank> dims{};
  std::uint8_t rank = 0;
  DType dtype = DType::kBF16;
  bool operator==(const ConcreteShape&) const = default;
};

// One operator of one instance, read-only (Gmg::op()), valid until the GMG
// changes. Identity (instance, template op, kind), its tenant's priority,
// state and placement with their times, sizes, what it still holds, and
// its dependency counts and edge lists (Gmg::edge()).
struct OpRecord {
  InstanceId instance = 0;
  TemplateId tmpl = 0;
  std::uint32_t tmpl_op = 0;
  OpKindId kind = 0;
  std::int32_t priority = 0;  // higher runs first
  std::uint32_t tenant = 0;
  OpState state = OpState::kUnscheduled;
  bool live = false;               // slot in use
  bool output_held = false;        // output tensor still resident on `accel`
  bool retained_held = false;      // retained state resident on `accel`
  bool retained_attached = false;  // a later instance consumes the retained state
  AccelId accel = kNoAccel;
  std::uint64_t issue_seq = 0;  // global issue order, the queue tie-break
  Nanos issue_t = -1, done_t = -1, measured = -1;
  std::int64_t out_bytes = 0, workspace_bytes = 0, retained_bytes = 0, weight_bytes = 0;
  std::uint32_t first_in = kNoEdge, first_out = kNoEdge;  // edge lists
  std::uint32_t unscheduled_preds = 0;                    // predecessors still unscheduled
  std::uint32_t unscheduled_succs = 0;                    // successors still unscheduled
  std::uint32_t pending_succs = 0;                        // successors not yet done
};

// A data dependency src -> dst. `retained` edges attach dst to src's
// retained state instead of its output.
struct Edge {
  OpId src = kNoOp, dst = kNoOp;
  std::uint32_t next_out = kNoEdge;  // next edge leaving src
  std::uint32_t next_in = kNoEdge;   // next edge entering dst
  std::int64_t bytes = 0;
  bool retained = false;
  Nanos arrived = -1;  // when a cross-accelerator transfer landed, if known
};

// Binds a template port of a new instance to an earlier operator.
struct PortBinding {
  std::string port;
  OpId producer = kNoOp;
  bool retained = false;  // attach to the producer's retained state (and take it over)
};

struct InstanceSpec {
  TemplateId tmpl = 0;
  std::vector<std::pair<std::string, std::int64_t>> dims;
  std::vector<PortBinding> ports;
  std::int32_t priority = 0;  // higher runs first; within [-32768, 32767]
  std::uint32_t tenant = 0;
};

struct InstanceInfo {
  InstanceId id = 0;
  std::vector<OpId> ops;  // in the template's (topological) op order
};

// A value the GMG let go of: an operator's output once every reader is
// done, or its retained state once a reader took it over or it was
// released (release_retained). What a backend that keeps values in device
// memory frees (Backend::release).
struct Release {
  enum class Value : std::uint8_t { kOutput, kRetained };
  OpId op = kNoOp;
  std::uint64_t issue_seq = 0;  // which issue of the slot: a slot is reused once retired
  Value value = Value::kOutput;
  // The operator holds nothing more, and no later instance can attach to
  // it: a backend may forget it.
  bool last = false;
  bool operator==(const Release&) const = default;
};

// Per-accelerator HBM accounting, in bytes.
struct HbmUsage {
  std::int64_t weights = 0;
  std::int64_t retained = 0;
  std::int64_t transient = 0;  // outputs, workspaces and received copies
  inline std::int64_t total() const { return weights + retained + transient; }
};

// What a snapshot build reads of one operator slot, in one cache line: the
// OpRecord's fields it needs, with the queue key precomputed. Zero/empty
// for a free slot.
struct alignas(64) OpRow {
  std::uint64_t queue_key = 0;  // queue_key(priority, issue_seq) once issued, else 0
  Nanos since = -1;             // issue time while issued, done time once done, else -1
  std::int64_t out_bytes = 0, workspace_bytes = 0, retained_bytes = 0;
  AccelId accel = kNoAccel;
  OpKindId kind = 0;
  std::uint32_t first_in = kNoEdge;  // into GmgView::edges, then Edge::next_in
  std::uint32_t unscheduled_succs = 0, pending_succs = 0;
  OpState state = OpState::kUnscheduled;
  bool output_held = false, retained_held = false;
  std::uint8_t feature_count = 0;  // of GmgView::features[op]
  bool operator==(const OpRow&) const = default;
};

// The row an operator's record derives (the GMG keeps rows current field by
// field as it mutates; this is what they must always equal).
inline OpRow row_of(const OpRecord& r, std::uint8_t feature_count) {
  OpRow w;
  w.queue_key = r.state == OpState::kUnscheduled ? 0 : queue_key(r.priority, r.issue_seq);
  w.since = r.state == OpState::kIssued ? r.issue_t : r.done_t;
  w.out_bytes = r.out_bytes;
  w.workspace_bytes = r.workspace_bytes;
  w.retained_bytes = r.retained_bytes;
  w.accel = r.accel;
  w.kind = r.kind;
  w.first_in = r.first_in;
  w.unscheduled_succs = r.unscheduled_succs;
  w.pending_succs = r.pending_succs;
  w.state = r.state;
  w.output_held = r.output_held;
  w.retained_held = r.retained_held;
  w.feature_count = feature_count;
  return w;
}

// The GMG as dense, read-only columns, for the global simulator. Spans into
// the Gmg: valid until it changes or dies; safe for concurrent readers
// while it does not change.
struct GmgView {
  std::span<const OpRow> ops;                                  // by OpId (slot)
  std::span<const std::array<double, kMaxFeatures>> features;  // by OpId
  std::span<const Edge> edges;
  std::span<const OpId> issued;  // the issued operators, in OpId order
  // Per accelerator, as Gmg::hbm(), done_resident() and last_done() give them.
  std::span<const HbmUsage> hbm;
  std::span<const std::int64_t> done_resident;
  std::span<const Nanos> last_done;
  Nanos now = 0;
  std::uint64_t last_issue_seq = 0;  // 0: nothing issued yet
};

// What check_memory needs of the issued operators, per accelerator, in one
// entry: a round checks thousands of placements, each a single lookup per
// accelerator instead of four scattered ones (capacity, account, summed and
// largest workspace).
struct IssuedWorkspaces {
  struct Room {
    std::int64_t free = 0;     // capacity - (what the account holds - the issued operators' workspaces)
    std::int64_t largest = 0;  // the largest workspace of its issued operators
  };
  std::vector<Room> room;
};

// What a batch reserves in the HBM account wherever it goes, read from the
// GMG once (Gmg::batch_memory) for a round that checks it on thousands of
// placements.
struct BatchMemory {
  static constexpr std::uint32_t kOutside = 0xffffffffu;
  struct Input {
    std::uint32_t producer;  // its place in the batch, or kOutside: then it is on `at`
    AccelId at;
    std::int64_t bytes;
  };
  std::vector<OpId> ops;
  // Per op: output + retained state; its output alone (held once per GPU
  // of a tensor-parallel group, Gmg::copies); its workspace.
  std::vector<std::int64_t> bytes, out, workspace;
  std::vector<std::uint32_t> first_input;  // per op and one past the last: its inputs in `inputs`
  std::vector<Input> inputs;
};

class Gmg {
 public:
  Gmg(std::shared_ptr<const TemplateRegistry> templates, std::shared_ptr<const AcceleratorSet> accels);

  inline const TemplateRegistry& templates() const { return *templates_; }
  inline const AcceleratorSet& accels() const { return *accels_; }
  // How many copies of an operator's output, and of each input it
  // receives, `accel` holds: every GPU of a tensor-parallel group holds the
  // whole rows (1 on a plain accelerator), as the executors allocate them.
  inline std::int64_t copies(AccelId accel) const {
    return accel < accels_->size() ? accels_->type_tp(accels_->type(accel)) : 1;
  }

  // Makes the weights of every operator of `tmpl` resident on `accel` (or of
  // one operator, by name). Issuing an operator that has weights onto an
  // accelerator without them fails.
  Status place_weights(TemplateId tmpl, AccelId accel);
  Status place_weights(TemplateId tmpl, std::string_view op, AccelId accel);
  // Inline: a cluster-wide round asks it for every operator of thousands
  // of candidates (the partition set's split and the placeable check).
  inline bool weights_on(OpKindId kind, AccelId accel) const {
    const std::size_t i = static_cast<std::size_t>(kind) * accels_->size() + accel;
    return i < weights_.size() && weights_[i];
  }

  // Infers shapes and sizes and inserts the instance as unscheduled. Fails,
  // naming the template and operator, on unknown or unbound dims, unknown or
  // missing ports, a producer that is gone, a retained state that does not
  // exist or is already attached, and shape or dtype mismatches.
  Result<InstanceInfo> instantiate(const InstanceSpec& spec);

  // Places an unscheduled operator whose predecessors are all issued or done.
  Status issue(OpId op, AccelId accel, Nanos t);
  // Whether issuing ops[k] onto accels[k], in order, would succeed: the
  // checks issue() makes, without changing anything (the scheduler's
  // what-if simulates such a batch as an overlay instead of a clone).
  // accels must be as long as ops.
  Status check_issue(std::span<const OpId> ops, std::span<const AccelId> accels) const;
  // The same checks split for a round that tries one batch on many
  // placements: what does not depend on where the ops go, once, then per
  // op and accelerator whether it may go there (the accelerator exists and
  // holds the op's weights). check_issue(ops, accels).ok() is
  // check_batch(ops).ok() and placeable(ops[k], accels[k]) for every k.
  Status check_batch(std::span<const OpId> ops) const;
  inline bool placeable(OpId op, AccelId accel) const { return holds_weights(op, accel) && !down_[accel]; }
  // The same but for the accelerator being up: whether op may ever go there
  // (a lost accelerator may come back; one without the weights never holds
  // them).
  inline bool holds_weights(OpId op, AccelId accel) const {
    return accels_->contains(accel) && (ops_[op].weight_bytes == 0 || weights_on(ops_[op].kind, accel));
  }
  // Whether the GMG's HBM account holds the batch: what issuing ops[k]
  // onto accels[k] reserves (outputs, retained state and a receive buffer
  // per remote input, as issue() does, and a workspace) added to what each
  // accelerator already holds or reserved stays within its HBM. Operators
  // run one at a time per accelerator, so of the workspaces of the issued
  // operators and the batch only the largest counts. The rule
  // every policy's picks obey, whatever its what-if predicted: a batch
  // that does not fit waits. Fails with ResourceExhausted naming the
  // first accelerator over, the operator and the bytes. Requires
  // check_issue(ops, accels) to pass.
  // `over`, when given, is set to that accelerator. With `alone`, against
  // an otherwise empty cluster instead: each accelerator holding only its
  // weights and the retained state the batch itself takes over. A batch
  // that fails that never fits there, whatever is preempted.
  // `issued`, when given, is issued_workspaces() of this snapshot: a
  // caller checking many placements of one batch builds it once (the check
  // is then a handful of lookups, not a pass over every issued operator).
  // `kept`, when given (indexed by accelerator; shorter: 0 past its end),
  // is memory the batch may not take there besides what is held: the
  // scheduler keeps it for higher-priority sequences' next iterations.
  Status check_memory(std::span<const OpId> ops, std::span<const AccelId> accels, AccelId* over = nullptr,
                      bool alone = false, const struct IssuedWorkspaces* issued = nullptr,
                      std::span<const std::int64_t> kept = {}) const;
  // The same check (not `alone`) from the batch's reservations read once:
  // the same result, status message and `over` as check_memory(m.ops,
  // accels, over, false, issued), without reading the GMG's operators
  // and edges again for every placement.
  BatchMemory batch_memory(std::span<const OpId> ops) const;
  Status check_memory(const BatchMemory& m, std::span<const AccelId> accels, AccelId* over = nullptr,
                      const struct IssuedWorkspaces* issued = nullptr) const;
  // Per accelerator, its HBM left besides the issued operators' workspaces
  // and the largest of those: O(issued operators + accelerators). The
  // second form writes over `w`, reusing its buffer.
  IssuedWorkspaces issued_workspaces() const;
  void issued_workspaces_into(IssuedWorkspaces& w) const;
  // Takes back an unscheduled instance's operators (all of `ops`, none
  // issued, none read by an operator outside `ops`): they leave the GMG,
  // and the producers they read from forget them (a retained state they
  // attached to is free to release again). What a tenant calls when it
  // preempts an iteration that has not started. Checks everything first;
  // on failure nothing changed.
  Status cancel(std::span<const OpId> ops);
  // A lost accelerator (a fault): nothing is issued onto it until it is
  // back. What ran or waited there is the backend's to fail; its weights
  // count as resident again when it comes back.
  inline void set_down(AccelId a, bool down) {
    down_count_ += (down ? 1 : 0) - down_[a];
    down_[a] = down ? 1 : 0;
  }
  inline bool is_down(AccelId a) const { return down_[a] != 0; }
  inline bool any_down() const { return down_count_ > 0; }
  inline std::size_t down_count() const { return down_count_; }
  // Marks an issued operator done at `t` after running `measured` ns.
  Status complete(OpId op, Nanos t, Nanos measured);
  // Records that the cross-accelerator copy src -> dst landed at `t`.
  Status complete_transfer(OpId src, OpId dst, Nanos t);
  // Frees a retained state nobody attached to (e.g. a request ended).
  Status release_retained(OpId op);
  // Removes done operators nobody references any more; returns how many.
  std::size_t retire();

  // The values let go of since the last clear_releases(), in the order the
  // mutations above let go of them. The engine hands them to its backend
  // and clears them once per step; whoever drives a GMG without an engine
  // may ignore them (they are kept until cleared, 24 bytes each).
  inline std::span<const Release> releases() const { return releases_; }
  inline void clear_releases() { releases_.clear(); }

  inline Gmg clone() const { return *this; }

  // The dense columns a snapshot build reads (OpRow and the rest of
  // GmgView), kept current by every mutation above.
  inline GmgView view() const {
    return {rows_, features_, edges_, issued_ops_, hbm_, done_resident_, last_done_, now_, issue_seq_};
  }

  // ---- read access ----
  inline Nanos now() const { return now_; }
  inline void advance_clock(Nanos t) {
    if (t > now_) now_ = t;
  }
  inline bool contains(OpId op) const { return op < ops_.size() && ops_[op].live; }
  inline const OpRecord& op(OpId id) const { return ops_[id]; }
  inline std::span<const double> features(OpId id) const { return {features_[id].data(), rows_[id].feature_count}; }
  // The instance's dim values by DimId of its template (e.g. tokens, context).
  inline std::span<const std::int64_t> dims(OpId id) const {
    return {dims_[id].data(), templates_->get(ops_[id].tmpl).dims().size()};
  }
  inline const Edge& edge(std::uint32_t e) const { return edges_[e]; }
  inline std::size_t slot_count() const { return ops_.size(); }  // OpIds are < slot_count()
  inline std::size_t live_count() const { return live_; }
  inline std::size_t issued_count() const { return issued_; }
  // The issued operators, in OpId order.
  inline std::span<const OpId> issued_ops() const { return issued_ops_; }
  // Bytes that done operators still hold on `a` (outputs not yet read by
  // every successor, retained state not yet taken over or released).
  inline std::int64_t done_resident(AccelId a) const { return done_resident_[a]; }
  // The issue sequence number of the latest issue (0: none yet).
  inline std::uint64_t last_issue_seq() const { return issue_seq_; }
  inline std::span<const OpId> unscheduled_frontier() const { return frontier_u_; }
  inline std::span<const OpId> scheduled_frontier() const { return frontier_s_; }
  inline const HbmUsage& hbm(AccelId a) const { return hbm_[a]; }
  // Latest completion time seen on each accelerator (-1: none yet).
  inline Nanos last_done(AccelId a) const { return last_done_[a]; }
  std::string op_name(OpId id) const;

 private:
  // instantiate()'s steps, in order: nothing changes before insert_ops().
  struct OpEval {
    ConcreteShape out, ret;
    std::int64_t out_bytes = 0, ws = 0, ret_bytes = 0;
    std::array<double, kMaxFeatures> feat{};
  };
  static std::string where(const GraphTemplate& t);
  static Result<Binding> bind_dims(const GraphTemplate& t, const InstanceSpec& spec);
  Result<std::vector<const PortBinding*>> resolve_ports(const GraphTemplate& t, const InstanceSpec& spec) const;
  const ConcreteShape& bound_shape(const PortBinding& pb) const;
  Status check_ports(const GraphTemplate& t, const Binding& binding, std::span<const PortBinding* const> ports) const;
  Result<std::vector<OpEval>> evaluate_ops(const GraphTemplate& t, const Binding& binding,
                                           std::span<const PortBinding* const> ports) const;
  InstanceInfo insert_ops(const InstanceSpec& spec, const Binding& binding, std::span<const OpEval> ev);
  void link_inputs(const GraphTemplate& t, const InstanceInfo& info, std::span<const PortBinding* const> ports);

  Status check_one(OpId id, AccelId accel, std::uint32_t unscheduled_preds) const;
  // check_memory's per-accelerator needs (on the stack for the usual
  // handful: a round checks thousands of candidates; more spill into a
  // vector) and its verdict on them.
  struct MemoryNeed {
    AccelId a;
    std::int64_t bytes = 0, workspace = 0;
  };
  struct MemoryNeeds {
    std::array<MemoryNeed, 16> few;
    std::size_t n_few = 0;
    std::vector<MemoryNeed> more;
    MemoryNeed& at(AccelId a);
  };
  Status memory_verdict(const MemoryNeeds& needs, std::span<const OpId> ops, std::span<const AccelId> accels,
                        AccelId* over, bool alone, const IssuedWorkspaces* issued,
                        std::span<const std::int64_t> kept = {}) const;
  OpId alloc_op();
  std::uint32_t add_edge(OpId src, OpId dst, std::int64_t bytes, bool retained);
  // An operator's place in each frontier (kNoEdge: not in it).
  struct FrontierPos {
    std::uint32_t u = kNoEdge, s = kNoEdge;
  };
  using FrontierField = std::uint32_t FrontierPos::*;  // which frontier
  void frontier_add(std::vector<OpId>& f, FrontierField pos, OpId id);
  void frontier_remove(std::vector<OpId>& f, FrontierField pos, OpId id);
  void sync_row(OpId id);
  void maybe_free_output(OpId id);
  void note_retire_candidate(OpId id);
  void note_release(OpId id, Release::Value value);

  std::shared_ptr<const TemplateRegistry> templates_;
  std::shared_ptr<const AcceleratorSet> accels_;
  std::vector<OpRecord> ops_;
  std::vector<OpRow> rows_;  // ops_'s hot part, dense (view())
  std::vector<FrontierPos> frontier_pos_;
  std::vector<std::array<double, kMaxFeatures>> features_;
  struct OpShapes {
    ConcreteShape output, retained;
  };
  std::vector<OpShapes> shapes_;
  std::vector<std::array<std::int64_t, kMaxDims>> dims_;
  FreeSlots free_ops_;
  std::vector<Edge> edges_;
  FreeSlots free_edges_;
  std::vector<OpId> frontier_u_, frontier_s_, issued_ops_;
  std::vector<OpId> retire_candidates_;
  std::vector<Release> releases_;
  std::vector<HbmUsage> hbm_;
  std::vector<Nanos> last_done_;
  std::vector<std::uint8_t> down_;  // per accelerator: lost (set_down)
  std::size_t down_count_ = 0;      // of down_ set
  std::vector<std::int64_t> done_resident_;
  std::vector<std::uint8_t> weights_;  // [kind * accels + accel]
  std::size_t live_ = 0, issued_ = 0;
  std::uint64_t issue_seq_ = 0;
  InstanceId next_instance_ = 1;
  Nanos now_ = 0;
};

}  // namespace slicesched
