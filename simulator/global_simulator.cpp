module;
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <vector>

module slicesched.simulator.global;

namespace slicesched {

namespace {

enum EventKind : std::uint32_t { kReady, kOpFinish, kTransferReady, kTransferFinish, kWake };

}  // namespace

SimulationResult simulate(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt) {
  GlobalSimulator sim;
  return sim.run(gmg, est, opt);
}

const SimulationResult& GlobalSimulator::run(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt) {
  record_hbm_ = opt.record_hbm_timeline;
  record_transfers_ = opt.record_transfers;
  stop_at_oom_ = opt.stop_at_oom;
  build(gmg, est);
  advance(opt);
  return r_;
}

void GlobalSimulator::build(const Gmg& gmg, const EstimatorSet& est) {
  const AcceleratorSet& accels = gmg.accels();
  const std::size_t n_acc = accels.size();
  const std::size_t slots = gmg.slot_count();
  now_ = gmg.now();
  stopped_ = false;

  r_.index_of.assign(slots, kNotSimulated);
  r_.busy.assign(n_acc, 0);
  r_.transfers.clear();
  r_.oom.reset();
  r_.finished = 0;
  r_.begin = r_.end = 0;
  r_.hbm_timeline.resize(n_acc);
  for (auto& tl : r_.hbm_timeline) tl.clear();

  used_.assign(n_acc, 0);
  cap_.resize(n_acc);
  for (AccelId a = 0; a < n_acc; ++a) {
    cap_[a] = accels.hbm_bytes(a);
    used_[a] = gmg.hbm(a).weights;
  }

  // Pass 1, over the GMG's operator records in OpId order: simulated nodes
  // (issued ops) first, so node index == result index. Each op's time is
  // predicted here, once; its rank is its place on its accelerator in OpId
  // order (re-ranked below where that is not queue order). in_end holds
  // the GMG's first in-edge until pass 2.
  n_sim_ = static_cast<std::uint32_t>(gmg.issued_count());
  r_.ops.resize(n_sim_);
  nodes_.resize(n_sim_);
  key_.resize(n_sim_);
  ready_t_.resize(n_sim_);
  flags_.resize(n_sim_);
  queue_.resize(n_acc);
  for (auto& q : queue_) q.clear();
  std::uint32_t n = 0;
  for (OpId id = 0; id < slots; ++id) {
    const OpRecord& op = gmg.op(id);
    if (!op.live) continue;
    if (op.state == OpState::kIssued) {
      const std::uint32_t i = n++;
      r_.index_of[id] = i;
      r_.ops[i] = id;
      auto& q = queue_[op.accel];
      nodes_[i] = {to_nanos(est.predict_op(op.kind, accels.type(op.accel), gmg.features(id))),
                   op.out_bytes,
                   op.workspace_bytes,
                   op.retained_bytes,
                   op.accel,
                   static_cast<std::uint32_t>(q.size()),
                   0,
                   op.first_in,
                   0,
                   0,
                   0,
                   0};
      q.push_back(i);
      key_[i] = queue_key(op.priority, op.issue_seq);
      ready_t_[i] = op.issue_t;
      flags_[i] = op.unscheduled_succs > 0 ? kKeepOutput : 0;
    } else if (op.state == OpState::kDone) {
      // Resident at the snapshot: held outputs and retained state.
      if (op.output_held) used_[op.accel] += op.out_bytes;
      if (op.retained_held) used_[op.accel] += op.retained_bytes;
    }
  }
  node_of_ = r_.index_of;  // ghosts are added below
  r_.start.assign(n_sim_, -1);
  r_.finish.assign(n_sim_, -1);

  // Pass 2: in-edges of simulated nodes, grouped by destination; done
  // producers become ghost nodes (memory bookkeeping only). Transfers are
  // predicted here, once. A node with every input available is ready at
  // its ready time.
  edges_.clear();
  ghost_op_.clear();
  pending_transfers_.clear();
  events_.clear();
  for (std::uint32_t i = 0; i < n_sim_; ++i) {
    const AccelId here = nodes_[i].accel;
    const std::uint32_t first_in = nodes_[i].in_end;
    nodes_[i].in_begin = static_cast<std::uint32_t>(edges_.size());
    for (std::uint32_t e = first_in; e != kNoEdge;) {
      const Edge& ge = gmg.edge(e);
      e = ge.next_in;
      std::uint32_t s = node_of_[ge.src];
      if (s < n_sim_) {  // finishes inside the simulation
        const AccelId there = nodes_[s].accel;
        const bool remote = there != here;
        edges_.push_back({s, i, ge.bytes, remote ? to_nanos(est.predict_transfer(there, here, ge.bytes)) : 0, remote,
                          ge.retained});
        ++nodes_[s].consumers;
        ++nodes_[s].out_end;
        ++nodes_[i].pending;
        continue;
      }
      const OpRecord& src = gmg.op(ge.src);  // a done producer
      if (s == kNotSimulated) {
        s = static_cast<std::uint32_t>(nodes_.size());
        node_of_[ge.src] = s;
        nodes_.push_back({0, src.out_bytes, 0, src.retained_bytes, src.accel, 0, 0, 0, 0, 0, 0, 0});
        flags_.push_back(static_cast<std::uint8_t>((src.unscheduled_succs > 0 ? kKeepOutput : 0) |
                                                   (src.output_held ? kOutputHeld : 0) |
                                                   (src.retained_held ? kRetainedHeld : 0)));
        ghost_op_.push_back(ge.src);
      }
      const bool remote = src.accel != here;
      const bool moves = remote && ge.arrived < 0;  // a transfer from a done producer, still to simulate
      edges_.push_back(
          {s, i, ge.bytes, moves ? to_nanos(est.predict_transfer(src.accel, here, ge.bytes)) : 0, remote, ge.retained});
      ++nodes_[s].consumers;
      ++nodes_[s].out_end;
      if (!remote) {
        ready_t_[i] = std::max(ready_t_[i], src.done_t);
      } else if (!moves) {
        ready_t_[i] = std::max(ready_t_[i], ge.arrived);
        used_[here] += ge.bytes;  // the landed copy is resident
      } else {
        ++nodes_[i].pending;
        events_.push(src.done_t, kTransferReady, static_cast<std::uint32_t>(edges_.size() - 1));
      }
    }
    nodes_[i].in_end = static_cast<std::uint32_t>(edges_.size());
    // Events of equal time keep push order; a ready event only marks its
    // accelerator and a transfer-ready one only queues an intent, so
    // interleaving the two kinds here changes neither order.
    if (nodes_[i].pending == 0) events_.push(ready_t_[i], kReady, i);
  }

  // Out-edge CSR over all nodes (counting sort by source; out_end counted
  // the out-degree, then serves as the cursor and ends where it should).
  {
    std::uint32_t next = 0;
    for (Node& nd : nodes_) {
      nd.out_begin = next;
      next += nd.out_end;
      nd.out_end = nd.out_begin;
    }
  }
  out_refs_.resize(edges_.size());
  for (std::uint32_t e = 0; e < edges_.size(); ++e) {
    const SimEdge& edge = edges_[e];
    out_refs_[nodes_[edge.src].out_end++] = {edge.dst, edge.remote ? (e | kRemote) : e};
  }

  running_.assign(n_acc, kNotSimulated);
  order_queues();
  free_at_.resize(n_acc);
  for (AccelId a = 0; a < n_acc; ++a) free_at_[a] = gmg.last_done(a);
  dirty_flag_.assign(n_acc, 0);
  dirty_.clear();
  send_busy_.assign(n_acc, 0);
  recv_busy_.assign(n_acc, 0);
  r_.hbm_start = used_;
  r_.hbm_peak = used_;
  if (record_hbm_)
    for (AccelId a = 0; a < n_acc; ++a) r_.hbm_timeline[a].push_back({now_, used_[a]});
}

// Puts every accelerator's queue in queue order (OpId order usually is
// already: it is issue order unless slots were reused or priorities differ)
// and sizes the ready bitsets.
void GlobalSimulator::order_queues() {
  const std::size_t n_acc = queue_.size();
  std::size_t most = 0;
  for (auto& q : queue_) {
    most = std::max(most, q.size());
    const auto by_key = [this](std::uint32_t x, std::uint32_t y) { return key_[x] < key_[y]; };
    if (std::is_sorted(q.begin(), q.end(), by_key)) continue;
    std::sort(q.begin(), q.end(), by_key);
    for (std::uint32_t rank = 0; rank < q.size(); ++rank) nodes_[q[rank]].rank = rank;
  }
  // Bitset levels: 64^levels_ >= the longest queue.
  levels_ = 1;
  for (std::uint64_t span = 64; span < most; span *= 64) ++levels_;
  bits_off_.resize(n_acc * levels_);
  std::uint32_t words = 0;
  for (std::size_t a = 0; a < n_acc; ++a) {
    std::uint64_t count = queue_[a].size();
    for (unsigned l = 0; l < levels_; ++l) {
      count = (count + 63) / 64;
      bits_off_[a * levels_ + l] = words;
      words += static_cast<std::uint32_t>(std::max<std::uint64_t>(count, 1));
    }
  }
  bits_.assign(words, 0);
}

inline void GlobalSimulator::alloc(AccelId a, std::int64_t bytes, Nanos t) {
  used_[a] += bytes;
  if (used_[a] > r_.hbm_peak[a]) r_.hbm_peak[a] = used_[a];
  if (record_hbm_) r_.hbm_timeline[a].push_back({t, used_[a]});
}

inline void GlobalSimulator::free(AccelId a, std::int64_t bytes, Nanos t) {
  used_[a] -= bytes;
  if (record_hbm_) r_.hbm_timeline[a].push_back({t, used_[a]});
}

inline void GlobalSimulator::make_ready(std::uint32_t i) {
  const AccelId a = nodes_[i].accel;
  const std::uint32_t* off = &bits_off_[a * levels_];
  for (std::uint32_t r = nodes_[i].rank, l = 0; l < levels_; ++l, r >>= 6) {
    std::uint64_t& w = bits_[off[l] + (r >> 6)];
    const bool had = w != 0;
    w |= std::uint64_t{1} << (r & 63);
    if (had) break;  // the levels above already say this word has some
  }
  mark_dirty(a);
}

inline std::uint32_t GlobalSimulator::pop_ready(AccelId a) {
  const std::uint32_t* off = &bits_off_[a * levels_];
  std::uint32_t rank = 0;
  for (unsigned l = levels_; l-- > 0;) rank = rank * 64 + static_cast<std::uint32_t>(std::countr_zero(bits_[off[l] + rank]));
  for (std::uint32_t r = rank, l = 0; l < levels_; ++l, r >>= 6) {
    std::uint64_t& w = bits_[off[l] + (r >> 6)];
    w &= ~(std::uint64_t{1} << (r & 63));
    if (w != 0) break;
  }
  return queue_[a][rank];
}

inline void GlobalSimulator::release_input(std::uint32_t e, Nanos t) {
  const SimEdge& edge = edges_[e];
  const std::uint32_t p = edge.src;
  Node& pn = nodes_[p];
  if (edge.remote) free(nodes_[edge.dst].accel, edge.bytes, t);
  if (edge.retained && (flags_[p] & kRetainedHeld)) {
    flags_[p] &= static_cast<std::uint8_t>(~kRetainedHeld);  // taken over by the consumer
    free(pn.accel, pn.ret, t);
  }
  if (--pn.consumers == 0 && (flags_[p] & (kKeepOutput | kOutputHeld)) == kOutputHeld) {
    flags_[p] &= static_cast<std::uint8_t>(~kOutputHeld);
    free(pn.accel, pn.out, t);
  }
}

inline void GlobalSimulator::on_input_ready(std::uint32_t i, Nanos t) {
  if (--nodes_[i].pending != 0) return;
  if (ready_t_[i] > t) {  // issued after its inputs were done
    events_.push(ready_t_[i], kReady, i);
    return;
  }
  make_ready(i);
}

inline void GlobalSimulator::on_op_finish(std::uint32_t i, Nanos t) {
  const Node& n = nodes_[i];
  const AccelId a = n.accel;
  running_[a] = kNotSimulated;
  mark_dirty(a);
  r_.finish[i] = t;
  r_.busy[a] += t - r_.start[i];
  ++r_.finished;
  free(a, n.ws, t);
  for (std::uint32_t e = n.in_begin; e < n.in_end; ++e) release_input(e, t);
  if (n.consumers == 0 && !(flags_[i] & kKeepOutput)) {
    flags_[i] &= static_cast<std::uint8_t>(~kOutputHeld);
    free(a, n.out, t);
  }
  for (std::uint32_t k = n.out_begin; k < n.out_end; ++k) {
    const OutRef ref = out_refs_[k];
    if (ref.edge & kRemote)
      pending_transfers_.push_back(ref.edge & ~kRemote);  // an intent: the arbiter starts it
    else
      on_input_ready(ref.dst, t);
  }
}

OpId GlobalSimulator::op_of(std::uint32_t node) const {
  return node < n_sim_ ? r_.ops[node] : ghost_op_[node - n_sim_];
}

inline void GlobalSimulator::start_transfer(std::uint32_t x, Nanos t) {
  const SimEdge& edge = edges_[x];
  const AccelId from = nodes_[edge.src].accel, to = nodes_[edge.dst].accel;
  if (used_[to] + edge.bytes > cap_[to] && !r_.oom) {
    r_.oom = OomEvent{t, to, r_.ops[edge.dst], true, used_[to] + edge.bytes, cap_[to]};
    if (stop_at_oom_) stopped_ = true;
  }
  alloc(to, edge.bytes, t);  // Recv allocates before Send moves
  send_busy_[from] = 1;
  recv_busy_[to] = 1;
  const Nanos finish = std::max(t + edge.xdur, now_);
  events_.push(finish, kTransferFinish, x);
  if (record_transfers_) r_.transfers.push_back({op_of(edge.src), r_.ops[edge.dst], from, to, edge.bytes, t, finish});
}

// Starts the next operator on every accelerator whose queue changed.
inline void GlobalSimulator::dispatch(Nanos t) {
  for (AccelId a : dirty_) {
    dirty_flag_[a] = 0;
    if (running_[a] != kNotSimulated || bits_[bits_off_[a * levels_ + levels_ - 1]] == 0) continue;
    if (t < free_at_[a]) {  // still busy with work the GMG already saw finish
      events_.push(free_at_[a], kWake, a);
      continue;
    }
    const std::uint32_t i = pop_ready(a);
    const Node& n = nodes_[i];
    const std::int64_t need = n.out + n.ws + n.ret;
    if (used_[a] + need > cap_[a] && !r_.oom) {
      r_.oom = OomEvent{t, a, r_.ops[i], false, used_[a] + need, cap_[a]};
      if (stop_at_oom_) stopped_ = true;
    }
    alloc(a, need, t);
    flags_[i] |= static_cast<std::uint8_t>(kOutputHeld | (n.ret > 0 ? kRetainedHeld : 0));
    running_[a] = i;
    r_.start[i] = t;
    events_.push(std::max(t + n.dur, now_), kOpFinish, i);
  }
  dirty_.clear();
}

// The arbiter's rule: oldest intent first, one transfer per source and per
// destination at a time.
inline void GlobalSimulator::arbitrate(Nanos t) {
  std::size_t keep = 0;
  for (std::size_t k = 0; k < pending_transfers_.size(); ++k) {
    const std::uint32_t x = pending_transfers_[k];
    const SimEdge& edge = edges_[x];
    const AccelId from = nodes_[edge.src].accel, to = nodes_[edge.dst].accel;
    if (send_busy_[from] || recv_busy_[to]) {
      pending_transfers_[keep++] = x;
      continue;
    }
    start_transfer(x, t);
  }
  pending_transfers_.resize(keep);
}

void GlobalSimulator::advance(const SimOptions& opt) {
  const Nanos horizon_end = opt.horizon >= 0 ? now_ + opt.horizon : -1;
  bool first = true;
  while (!events_.empty() && !stopped_) {
    const Nanos t = events_.next_time();
    if (horizon_end >= 0 && t > horizon_end) break;
    if (first) {
      r_.begin = t;
      first = false;
    }
    r_.end = t;
    bool transfers_changed = false;
    // Every event at time t is applied before anything starts at t, so a
    // queue choosing its next operator sees everything that became ready.
    for (Event ev; events_.pop_at(t, ev);) {
      switch (ev.kind) {
        case kReady:
          make_ready(ev.id);
          break;
        case kOpFinish:
          on_op_finish(ev.id, t);
          transfers_changed = true;
          break;
        case kTransferReady:
          pending_transfers_.push_back(ev.id);
          transfers_changed = true;
          break;
        case kTransferFinish: {
          const SimEdge& edge = edges_[ev.id];
          send_busy_[nodes_[edge.src].accel] = 0;
          recv_busy_[nodes_[edge.dst].accel] = 0;
          transfers_changed = true;
          on_input_ready(edge.dst, t);
          break;
        }
        case kWake:
          mark_dirty(ev.id);
          break;
      }
    }
    dispatch(t);
    if (transfers_changed && !pending_transfers_.empty()) arbitrate(t);
  }
  r_.hbm_end = used_;
}

}  // namespace slicesched
