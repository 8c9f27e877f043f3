// The global simulator's snapshot build (prepare()): what every placement of
// a batch shares, read from the GMG's dense columns (Gmg::view()). The event
// loop and place() are in global_simulator.cpp.
module;
#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

module slicesched.simulator.global_simulator;
import slicesched.core.accel;

namespace slicesched {

namespace {

enum EventKind : std::uint32_t { kReady, kOpFinish, kTransferReady, kTransferFinish, kWake };

}  // namespace

// What every placement of the batch shares: the simulated nodes (issued
// ops and the batch's, in OpId order), their edges and ghosts, the base
// queues (without the batch), the resident bytes, and the events of the
// issued ops. Where the batch's ops go is left to place().
template <typename Est>
void GlobalSimulator::prepare_with(const Gmg& gmg, const Est& est, std::span<const OpId> batch, Nanos at,
                                   std::span<const AccelId> scope) {
  if (gmg.slot_count() > kNodeMask) throw std::length_error("global simulator: a GMG of more than 2^30 operator slots");
  if constexpr (std::is_same_v<Est, EstimatorSet>) {
    est_set_ = &est;
    est_virtual_ = nullptr;
  } else {
    est_set_ = nullptr;
    est_virtual_ = &est;
  }
  gmg_ = &gmg;
  view_ = gmg.view();
  batch_.assign(batch.begin(), batch.end());
  at_ = at;
  now_ = batch.empty() ? view_.now : std::max(view_.now, at);
  base_saved_ = some_saved_ = false;
  ++epoch_;  // nothing saved of this build yet
  ghosts_indexed_ = false;
  results_partial_ = false;  // node indices change
  dur_of_type_.assign(batch_.size() * gmg.accels().type_count(), kNoDur);
  mark(scope);
  reset_accelerators(scope);
  select_nodes();
  const std::uint32_t out_total = add_nodes(est);
  const bool out_overflow = add_inputs(out_total);
  unmark();
  if (out_overflow) [[unlikely]]
    lay_out_out_refs();
  locate_deferred();
  collect_batch_edges();
  collect_ext_inputs();
  order_queues();
  base_used_.assign(used_.begin(), used_.end());
  oom_free_ = -1;
  bound_set_ = false;
  for (BoundMemo& m : bound_memo_) m.valid = false;
  floor_memo_.clear();
}

template void GlobalSimulator::prepare_with(const Gmg&, const EstimatorSet&, std::span<const OpId>, Nanos,
                                            std::span<const AccelId>);
template void GlobalSimulator::prepare_with(const Gmg&, const Estimator&, std::span<const OpId>, Nanos,
                                            std::span<const AccelId>);

// Per-slot and per-accelerator marks for the build: the batch's ops (1 +
// their place in it) and how many of each op's successors the batch issues;
// the scope's accelerators. Zero outside a build (unmark()), so a build
// touches only what it marks.
void GlobalSimulator::mark(std::span<const AccelId> scope) {
  const std::size_t slots = view_.ops.size();
  if (!batch_.empty() && tent_.size() < slots) {
    tent_.resize(slots, 0);
    tent_succs_.resize(slots, 0);
  }
  for (std::size_t k = 0; k < batch_.size(); ++k) {
    tent_[batch_[k]] = static_cast<std::uint32_t>(k + 1);
    for (std::uint32_t e = view_.ops[batch_[k]].first_in; e != kNoEdge; e = view_.edges[e].next_in)
      ++tent_succs_[view_.edges[e].src];
  }
  if (!scope.empty()) {
    in_scope_.resize(gmg_->accels().size(), 0);
    for (AccelId a : scope) in_scope_[a] = 1;
  }
}

// Undoes mark() and the ghosts' index_of entries (so the simulator stays
// usable even when a build throws).
void GlobalSimulator::unmark() {
  for (OpId id : ghost_op_) r_.index_of[id] = kNotSimulated;
  for (OpId id : batch_) {
    tent_[id] = 0;
    for (std::uint32_t e = view_.ops[id].first_in; e != kNoEdge; e = view_.edges[e].next_in)
      tent_succs_[view_.edges[e].src] = 0;
  }
  for (AccelId a : scope_) in_scope_[a] = 0;
}

// Per-accelerator state for a build over `scope`. Per-accelerator work is
// plain fills over the cluster and logic over the scope only, so a what-if
// on a large cluster costs what its scope holds: the whole cluster is reset
// when unscoped or when the previous build was; otherwise only the previous
// scope is cleared, so results outside the scope read zero.
void GlobalSimulator::reset_accelerators(std::span<const AccelId> scope) {
  const AcceleratorSet& accels = gmg_->accels();
  const std::size_t n_acc = accels.size();
  // Only the last run's index_of entries are set: reset those, not every slot.
  if (r_.index_of.size() != view_.ops.size()) {
    r_.index_of.assign(view_.ops.size(), kNotSimulated);
  } else {
    for (OpId id : r_.ops) r_.index_of[id] = kNotSimulated;
  }
  if (r_.busy.size() != n_acc || scope.empty() || scope_.empty()) {
    r_.busy.assign(n_acc, 0);
    r_.hbm_start.assign(n_acc, 0);
    r_.hbm_peak.assign(n_acc, 0);
    r_.hbm_end.assign(n_acc, 0);
    used_.assign(n_acc, 0);
    cap_.assign(n_acc, 0);
    running_.assign(n_acc, kNotSimulated);
    free_at_.assign(n_acc, -1);
    dirty_flag_.assign(n_acc, 0);
    send_busy_.assign(n_acc, 0);
    recv_busy_.assign(n_acc, 0);
  } else {
    for (AccelId a : scope_) {  // the previous build's scope
      r_.busy[a] = r_.hbm_start[a] = r_.hbm_peak[a] = r_.hbm_end[a] = 0;
      used_[a] = cap_[a] = 0;
      running_[a] = kNotSimulated;
      free_at_[a] = -1;
      dirty_flag_[a] = send_busy_[a] = recv_busy_[a] = 0;
    }
  }
  r_.hbm_timeline.resize(n_acc);
  scope_.assign(scope.begin(), scope.end());
  if (!std::is_sorted(scope_.begin(), scope_.end())) std::sort(scope_.begin(), scope_.end());  // (the scheduler's is)
  each_accel(n_acc, [&](AccelId a) {
    cap_[a] = accels.hbm_bytes(a);
    used_[a] = view_.hbm[a].weights + view_.done_resident[a];  // and, in add_inputs(), landed copies
    free_at_[a] = view_.last_done[a];
  });
}

// The simulated nodes: the issued ops inside the scope and the batch's, in
// OpId order (r_.ops), so node index == result index; the per-node arrays
// sized for them and the scope's queues emptied.
void GlobalSimulator::select_nodes() {
  std::span<const OpId> base = view_.issued;
  if (!scope_.empty()) {
    scoped_ops_.clear();
    for (OpId id : view_.issued)
      if (in_scope_[view_.ops[id].accel]) scoped_ops_.push_back(id);
    base = scoped_ops_;
  }
  n_sim_ = static_cast<std::uint32_t>(base.size() + batch_.size());
  if (!batch_.empty()) {  // merge the batch (a few ops, sorted here) into the issued ones
    tent_sorted_.assign(batch_.begin(), batch_.end());
    for (std::size_t k = 1; k < tent_sorted_.size(); ++k)
      for (std::size_t j = k; j > 0 && tent_sorted_[j] < tent_sorted_[j - 1]; --j)
        std::swap(tent_sorted_[j], tent_sorted_[j - 1]);
    r_.ops.resize(n_sim_);
    std::merge(base.begin(), base.end(), tent_sorted_.begin(), tent_sorted_.end(), r_.ops.begin());
  } else {
    r_.ops.assign(base.begin(), base.end());
  }
  key_.resize(n_sim_);
  nodes_.resize(n_sim_);
  arrival_.resize(n_sim_);
  ready_t_.resize(n_sim_);
  is_tent_.assign(n_sim_, 0);
  tnode_.resize(batch_.size());
  out_limit_.resize(n_sim_);
  const std::size_t n_acc = gmg_->accels().size();
  queue_.resize(n_acc);
  last_key_.resize(n_acc);
  out_of_order_.resize(n_acc);
  each_accel(n_acc, [&](AccelId a) {
    queue_[a].clear();
    last_key_[a] = 0;
    out_of_order_[a] = 0;
  });
  tent_accels_.clear();  // no batch op sits in a queue yet
}

// Pass 1, over the simulated nodes: each issued op's predicted time (once,
// here), its place at the end of its accelerator's queue in OpId order
// (re-ranked in order_queues() where that is not queue order), and a region
// of out_refs_ for its readers. The batch's ops join no queue here (place()
// puts them in). in_end holds the op's first GMG in-edge until add_inputs().
// Returns the out_refs_ reserved.
template <typename Est>
std::uint32_t GlobalSimulator::add_nodes(const Est& est) {
  const AcceleratorSet& accels = gmg_->accels();
  const GmgView& v = view_;
  const bool overlay = !batch_.empty();
  std::uint32_t out_total = 0;
  const OpId* ops = r_.ops.data();
  Node* nodes = nodes_.data();
  Arrival* arrival = arrival_.data();
  std::uint32_t* index_of = r_.index_of.data();
  for (std::uint32_t i = 0; i < n_sim_; ++i) {
    const OpId id = ops[i];
    const OpRow& op = v.ops[id];
    const std::uint32_t k = overlay ? tent_[id] : 0;
    index_of[id] = i;
    const std::uint32_t unscheduled = open_succs(id, op);
    const Flag keep = unscheduled > 0 ? kKeepOutput : Flag{};
    if (k > 0) {  // a batch op: its accelerator and time come with the placement
      const auto flags = static_cast<Flag>(keep | kBatchOp);
      nodes[i] = {0, op.out_bytes, op.workspace_bytes, op.retained_bytes, kNoAccel, 0, op.first_in, 0, 0, 0, flags};
      arrival[i] = {kNoAccel, 0, 0};
      key_[i] = queue_key(gmg_->op(id).priority, v.last_issue_seq + k);
      ready_t_[i] = at_;
      is_tent_[i] = 1;
      tnode_[k - 1] = i;
    } else {
      const AccelId a = op.accel;
      auto& q = queue_[a];
      nodes[i] = {to_nanos(est.predict_op(op.kind, accels.type(a), {v.features[id].data(), op.feature_count})),
                  op.out_bytes,
                  op.workspace_bytes,
                  op.retained_bytes,
                  a,
                  0,
                  op.first_in,
                  0,
                  0,
                  0,
                  keep};
      arrival[i] = {a, static_cast<std::uint32_t>(q.size()), 0};
      q.push_back(i);
      out_of_order_[a] |= op.queue_key < last_key_[a];
      last_key_[a] = op.queue_key;
      key_[i] = op.queue_key;
      ready_t_[i] = op.since;  // its issue
    }
    // Its readers here: successors neither done nor unscheduled, i.e. issued.
    nodes[i].out_begin = nodes[i].out_end = out_total;
    out_total += op.pending_succs > unscheduled ? op.pending_succs - unscheduled : 0;
    out_limit_[i] = out_total;
  }
  return out_total;
}

// Pass 2: every simulated node's in-edges, grouped by destination (edges_),
// each also listed among its source's out-edges (out_refs_). A done
// producer becomes a ghost node (memory bookkeeping only). An issued op's
// events are recorded (place() pushes them, in node order); a batch op's
// in-edges are left to place(), which knows which are remote (deferred_).
// Returns whether a source had more readers than its region holds (a GMG
// whose successor counts disagree with its edges).
bool GlobalSimulator::add_inputs(std::uint32_t out_total) {
  out_refs_.resize(out_total);
  edges_.clear();
  ghost_op_.clear();
  deferred_.clear();
  node_events_.clear();
  ev_begin_.resize(n_sim_ + 1);
  bool overflow = false;
  for (std::uint32_t i = 0; i < n_sim_; ++i) {
    // (nodes_ grows by ghosts in this loop: no references into it.)
    ev_begin_[i] = static_cast<std::uint32_t>(node_events_.size());
    const std::uint32_t first_in = nodes_[i].in_end;
    nodes_[i].in_begin = static_cast<std::uint32_t>(edges_.size());
    for (std::uint32_t e = first_in; e != kNoEdge;) {
      const Edge& ge = view_.edges[e];
      e = ge.next_in;
      const std::uint32_t s = r_.index_of[ge.src];
      overflow |= s < n_sim_ ? add_simulated_input(i, s, ge) : add_done_input(i, s, ge, out_total);
    }
    nodes_[i].in_end = static_cast<std::uint32_t>(edges_.size());
    if (!is_tent_[i] && arrival_[i].pending == 0) node_events_.push_back({ready_t_[i], kReady, i});
  }
  ev_begin_[n_sim_] = static_cast<std::uint32_t>(node_events_.size());
  return overflow;
}

// An input of node i from simulated node s: it becomes available when s
// finishes (and, when remote, its transfer lands). An edge touching a batch
// op is remote or not by the placement. Returns whether s's region was full.
// (Inlined: it runs once per simulated edge.)
[[gnu::always_inline]] inline bool GlobalSimulator::add_simulated_input(std::uint32_t i, std::uint32_t s,
                                                                        const Edge& ge) {
  const bool tentative = is_tent_[i];
  const auto edge = static_cast<std::uint32_t>(edges_.size());
  Node& src = nodes_[s];
  const std::uint32_t remote = !tentative && !is_tent_[s] && src.accel != nodes_[i].accel ? kRemote : 0;
  edges_.push_back({s | remote | (ge.retained ? kRetained : 0), i, ge.bytes});
  ++src.consumers;
  const bool full = src.out_end >= out_limit_[s];
  if (!full) out_refs_[src.out_end++] = {i, edge | remote};
  if (tentative)
    deferred_.push_back({edge, 0, -1, -1, 0});
  else
    ++arrival_[i].pending;
  return full;
}

// An input of node i from a producer outside the simulation (s: its
// index_of entry), which must be done: its ghost node (made on first use)
// holds its resident bytes. A local input is there since it finished, a
// landed copy since it landed (and takes memory here), any other becomes a
// transfer that starts once both ends allow. Throws std::invalid_argument
// when the producer is issued: the scope is not closed. Returns whether
// the ghost's region was full. (Inlined: a scoped what-if reads many done
// producers.)
[[gnu::always_inline]] inline bool GlobalSimulator::add_done_input(std::uint32_t i, std::uint32_t s, const Edge& ge,
                                                                   std::uint32_t& out_total) {
  const OpRow& src = view_.ops[ge.src];
  if (src.state != OpState::kDone) [[unlikely]]
    throw_not_closed(i, ge.src);
  s = s != kNotSimulated ? s & ~kGhost : add_ghost(ge.src, src, out_total);
  const bool tentative = is_tent_[i];
  const AccelId here = nodes_[i].accel;
  const auto edge = static_cast<std::uint32_t>(edges_.size());
  const bool remote = !tentative && src.accel != here;
  edges_.push_back({s | (remote ? kRemote : 0) | (ge.retained ? kRetained : 0), i, ge.bytes});
  ++nodes_[s].consumers;
  const bool full = nodes_[s].out_end >= out_limit_[s];
  if (!full) out_refs_[nodes_[s].out_end++] = {i, edge | (remote ? kRemote : 0)};
  if (tentative) {
    deferred_.push_back({edge, 0, src.since, ge.arrived, 1});
  } else if (!remote) {
    ready_t_[i] = std::max(ready_t_[i], src.since);
  } else if (ge.arrived >= 0) {
    ready_t_[i] = std::max(ready_t_[i], ge.arrived);
    used_[here] += ge.bytes;  // the landed copy is resident
  } else {
    ++arrival_[i].pending;
    // Its intent appears once the producer is done and the consumer issued
    // (the backend is handed the consumer at its issue).
    node_events_.push_back({std::max(src.since, view_.ops[r_.ops[i]].since), kTransferReady, edge});
  }
  return full;
}

// Node i reads `src`, which is issued but outside the scope.
void GlobalSimulator::throw_not_closed(std::uint32_t i, OpId src) {
  unmark();  // the simulator stays usable
  const Gmg& gmg = *gmg_;
  gmg_ = nullptr;
  throw std::invalid_argument("global simulator: the scope is not closed: " + gmg.op_name(r_.ops[i]) + " reads " +
                              gmg.op_name(src) + ", issued outside it");
}

// A ghost node for done producer `id`, with a region of out_refs_ for its
// readers; index_of marks it (kGhost) until unmark().
inline std::uint32_t GlobalSimulator::add_ghost(OpId id, const OpRow& op, std::uint32_t& out_total) {
  const auto s = static_cast<std::uint32_t>(nodes_.size());
  r_.index_of[id] = s | kGhost;
  const std::uint32_t unscheduled = open_succs(id, op);
  nodes_.push_back({0, op.out_bytes, 0, op.retained_bytes, op.accel, 0, 0, out_total, out_total, 0,
                    static_cast<Flag>((unscheduled > 0 ? kKeepOutput : 0) | (op.output_held ? kOutputHeld : 0) |
                                      (op.retained_held ? kRetainedHeld : 0))});
  out_total += op.pending_succs > unscheduled ? op.pending_succs - unscheduled : 0;
  out_limit_.push_back(out_total);
  out_refs_.resize(out_total);
  ghost_op_.push_back(id);
  return s;
}

// After an overflow: the out-edges laid out again by counting sort, in the
// same order.
void GlobalSimulator::lay_out_out_refs() {
  for (Node& nd : nodes_) nd.out_end = 0;
  for (const SimEdge& edge : edges_) ++nodes_[edge.src & kNodeMask].out_end;
  std::uint32_t next = 0;
  for (Node& nd : nodes_) {
    nd.out_begin = next;
    next += nd.out_end;
    nd.out_end = nd.out_begin;
  }
  out_refs_.resize(edges_.size());
  for (std::uint32_t e = 0; e < edges_.size(); ++e) {
    const SimEdge& edge = edges_[e];
    out_refs_[nodes_[edge.src & kNodeMask].out_end++] = {edge.dst, e | (edge.src & kRemote)};
  }
}

// Where each deferred edge sits among its source's out-edges, for place()
// to mark it remote or not.
void GlobalSimulator::locate_deferred() {
  for (Deferred& d : deferred_) {
    const Node& src = nodes_[edges_[d.edge].src & kNodeMask];
    for (std::uint32_t k = src.out_begin; k < src.out_end; ++k)
      if ((out_refs_[k].edge & ~kRemote) == d.edge) d.out_ref = k;
  }
}

// The batch's edges among its own ops, for dominated_from().
void GlobalSimulator::collect_batch_edges() {
  batch_edges_.clear();
  for (std::uint32_t k = 0; k < tnode_.size(); ++k) {
    const Node& n = nodes_[tnode_[k]];
    for (std::uint32_t e = n.in_begin; e < n.in_end; ++e) {
      const std::uint32_t s = edges_[e].src & kNodeMask;
      if (s >= n_sim_ || !is_tent_[s]) continue;
      std::uint32_t p = 0;
      while (tnode_[p] != s) ++p;
      if (p < k) batch_edges_.push_back({k, p, edges_[e].bytes, 0});  // (a later p: left out, the bound stays valid)
    }
  }
}

// The batch's inputs from done producers that have not landed anywhere,
// for dominated_by_inputs(): each is a transfer wherever its reader goes
// but to the producer's accelerator.
void GlobalSimulator::collect_ext_inputs() {
  ext_inputs_.clear();
  for (const Deferred& d : deferred_) {
    if (!d.ghost || d.arrived >= 0) continue;
    const SimEdge& edge = edges_[d.edge];
    std::uint32_t k = 0;
    while (tnode_[k] != edge.dst) ++k;
    ext_inputs_.push_back({k, nodes_[edge.src & kNodeMask].accel, edge.bytes, std::max(d.done_t, at_)});
  }
}

// Puts every accelerator's queue in queue order where OpId order is not
// (reused slots, priorities).
void GlobalSimulator::order_queues() {
  each_accel(queue_.size(), [&](AccelId a) {
    auto& q = queue_[a];
    if (!out_of_order_[a]) return;
    sort_scratch_.clear();
    for (std::uint32_t i : q) sort_scratch_.push_back({key_[i], i});
    std::sort(sort_scratch_.begin(), sort_scratch_.end());
    for (std::uint32_t rank = 0; rank < q.size(); ++rank) {
      q[rank] = sort_scratch_[rank].second;
      arrival_[q[rank]].rank = rank;
    }
  });
}

}  // namespace slicesched
