module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

module slicesched.simulator.global;

namespace slicesched {

namespace {

enum EventKind : std::uint32_t { kReady, kOpFinish, kTransferReady, kTransferFinish, kWake };

// Higher priority first, then earlier issue: "less" for a max-heap means
// "runs later".
struct RunsLater {
  template <typename E>
  bool operator()(const E& a, const E& b) const {
    return a.neg_priority != b.neg_priority ? a.neg_priority > b.neg_priority : a.seq > b.seq;
  }
};

Nanos to_nanos(double seconds) { return seconds > 0 ? static_cast<Nanos>(std::llround(seconds * 1e9)) : 0; }

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
  advance(gmg, est, opt);
  return r_;
}

void GlobalSimulator::build(const Gmg& gmg, const EstimatorSet& est) {
  const AcceleratorSet& accels = gmg.accels();
  const std::size_t n_acc = accels.size();
  const std::size_t slots = gmg.slot_count();
  now_ = gmg.now();
  stopped_ = false;

  r_.ops.clear();
  r_.start.clear();
  r_.finish.clear();
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

  // Pass 1: simulated nodes (issued ops) first, so node index == result index.
  node_of_.assign(slots, kNotSimulated);
  nodes_.clear();
  for (OpId id = 0; id < slots; ++id) {
    const OpRecord& op = gmg.op(id);
    if (!op.live) continue;
    if (op.state == OpState::kIssued) {
      node_of_[id] = static_cast<std::uint32_t>(nodes_.size());
      r_.index_of[id] = node_of_[id];
      r_.ops.push_back(id);
      Node nd{};
      nd.accel = op.accel;
      nd.neg_priority = -op.priority;
      nd.seq = op.issue_seq;
      nd.dur = to_nanos(est.predict_op(op.kind, accels.type(op.accel), gmg.features(id)));
      nd.ready = op.issue_t;
      nd.out_bytes = op.out_bytes;
      nd.ws_bytes = op.workspace_bytes;
      nd.ret_bytes = op.retained_bytes;
      nd.keep_output = op.unscheduled_succs > 0;
      nodes_.push_back(nd);
    } else if (op.state == OpState::kDone) {
      // Resident at the snapshot: held outputs and retained state.
      if (op.output_held) used_[op.accel] += op.out_bytes;
      if (op.retained_held) used_[op.accel] += op.retained_bytes;
    }
  }
  const std::uint32_t n_sim = static_cast<std::uint32_t>(nodes_.size());
  r_.start.assign(n_sim, -1);
  r_.finish.assign(n_sim, -1);

  // Pass 2: in-edges of simulated nodes, grouped by destination; done
  // producers become ghost nodes (memory bookkeeping only).
  edges_.clear();
  transfers_.clear();
  pending_transfers_.clear();
  events_.clear();
  for (std::uint32_t i = 0; i < n_sim; ++i) {
    const OpRecord& op = gmg.op(r_.ops[i]);
    nodes_[i].in_begin = static_cast<std::uint32_t>(edges_.size());
    for (std::uint32_t e = op.first_in; e != kNoEdge; e = gmg.edge(e).next_in) {
      const Edge& ge = gmg.edge(e);
      const OpRecord& src = gmg.op(ge.src);
      std::uint32_t s = node_of_[ge.src];
      if (s == kNotSimulated) {  // a done producer, first seen
        s = static_cast<std::uint32_t>(nodes_.size());
        node_of_[ge.src] = s;
        Node g{};
        g.accel = src.accel;
        g.out_bytes = src.out_bytes;
        g.ret_bytes = src.retained_bytes;
        g.keep_output = src.unscheduled_succs > 0;
        g.output_held = src.output_held;
        g.retained_held = src.retained_held;
        g.ghost = true;
        nodes_.push_back(g);
      }
      const bool remote = src.accel != op.accel;
      edges_.push_back({s, i, ge.bytes, remote, ge.retained});
      ++nodes_[s].consumers;
      Node& dst = nodes_[i];
      if (s < n_sim) {
        ++dst.pending;  // finishes inside the simulation
      } else if (!remote) {
        dst.ready = std::max(dst.ready, src.done_t);
      } else if (ge.arrived >= 0) {
        dst.ready = std::max(dst.ready, ge.arrived);
        used_[op.accel] += ge.bytes;  // the landed copy is resident
      } else {
        ++dst.pending;  // a transfer from a done producer, still to simulate
        auto edge_index = static_cast<std::uint32_t>(edges_.size() - 1);
        transfers_.push_back({edge_index, to_nanos(est.predict_transfer(src.accel, op.accel, ge.bytes))});
        events_.push(src.done_t, kTransferReady, static_cast<std::uint32_t>(transfers_.size() - 1));
      }
    }
    nodes_[i].in_end = static_cast<std::uint32_t>(edges_.size());
  }

  // Out-edge CSR over all nodes.
  for (auto& nd : nodes_) nd.out_begin = nd.out_end = 0;
  for (const auto& e : edges_) ++nodes_[e.src].out_end;  // counts first
  std::uint32_t acc = 0;
  for (auto& nd : nodes_) {
    nd.out_begin = acc;
    acc += nd.out_end;
    nd.out_end = nd.out_begin;
  }
  out_refs_.resize(edges_.size());
  for (std::uint32_t e = 0; e < edges_.size(); ++e) out_refs_[nodes_[edges_[e].src].out_end++] = e;

  for (std::uint32_t i = 0; i < n_sim; ++i)
    if (nodes_[i].pending == 0) events_.push(nodes_[i].ready, kReady, i);

  ready_.resize(n_acc);
  for (auto& h : ready_) h.clear();
  running_.assign(n_acc, kNotSimulated);
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

void GlobalSimulator::alloc(AccelId a, std::int64_t bytes, Nanos t) {
  used_[a] += bytes;
  if (used_[a] > r_.hbm_peak[a]) r_.hbm_peak[a] = used_[a];
  if (record_hbm_) r_.hbm_timeline[a].push_back({t, used_[a]});
}

void GlobalSimulator::free(AccelId a, std::int64_t bytes, Nanos t) {
  used_[a] -= bytes;
  if (record_hbm_) r_.hbm_timeline[a].push_back({t, used_[a]});
}

void GlobalSimulator::release_input(std::uint32_t e, Nanos t) {
  const SimEdge& edge = edges_[e];
  Node& p = nodes_[edge.src];
  if (edge.remote) free(nodes_[edge.dst].accel, edge.bytes, t);
  if (edge.retained && p.retained_held) {
    p.retained_held = false;  // taken over by the consumer
    free(p.accel, p.ret_bytes, t);
  }
  if (--p.consumers == 0 && !p.keep_output && p.output_held) {
    p.output_held = false;
    free(p.accel, p.out_bytes, t);
  }
}

void GlobalSimulator::on_input_ready(std::uint32_t i, Nanos t) {
  Node& nd = nodes_[i];
  if (--nd.pending != 0) return;
  if (nd.ready > t) {  // issued after its inputs were done
    events_.push(nd.ready, kReady, i);
    return;
  }
  ready_[nd.accel].push_back({nd.neg_priority, nd.seq, i});
  std::push_heap(ready_[nd.accel].begin(), ready_[nd.accel].end(), RunsLater{});
  if (!dirty_flag_[nd.accel]) {
    dirty_flag_[nd.accel] = 1;
    dirty_.push_back(nd.accel);
  }
}

void GlobalSimulator::on_op_finish(std::uint32_t i, Nanos t) {
  Node& nd = nodes_[i];
  const AccelId a = nd.accel;
  running_[a] = kNotSimulated;
  if (!dirty_flag_[a]) {
    dirty_flag_[a] = 1;
    dirty_.push_back(a);
  }
  r_.finish[i] = t;
  r_.busy[a] += t - r_.start[i];
  ++r_.finished;
  free(a, nd.ws_bytes, t);
  for (std::uint32_t e = nd.in_begin; e < nd.in_end; ++e) release_input(e, t);
  if (nd.consumers == 0 && !nd.keep_output) {
    nd.output_held = false;
    free(a, nd.out_bytes, t);
  }
  for (std::uint32_t k = nd.out_begin; k < nd.out_end; ++k) {
    std::uint32_t e = out_refs_[k];
    const SimEdge& edge = edges_[e];
    if (edge.remote) {
      transfers_.push_back({e, 0});  // duration set when it starts
      pending_transfers_.push_back(static_cast<std::uint32_t>(transfers_.size() - 1));
    } else {
      on_input_ready(edge.dst, t);
    }
  }
}

void GlobalSimulator::start_transfer(std::uint32_t x, Nanos t) {
  const SimEdge& edge = edges_[transfers_[x].edge];
  const AccelId from = nodes_[edge.src].accel, to = nodes_[edge.dst].accel;
  if (used_[to] + edge.bytes > cap_[to] && !r_.oom) {
    r_.oom = OomEvent{t, to, r_.ops[edge.dst], true, used_[to] + edge.bytes, cap_[to]};
    if (stop_at_oom_) stopped_ = true;
  }
  alloc(to, edge.bytes, t);  // Recv allocates before Send moves
  send_busy_[from] = 1;
  recv_busy_[to] = 1;
  Nanos finish = std::max(t + transfers_[x].dur, now_);
  events_.push(finish, kTransferFinish, x);
  if (record_transfers_) {
    OpId src_op = edge.src < r_.ops.size() ? r_.ops[edge.src] : kNoOp;
    r_.transfers.push_back({src_op, r_.ops[edge.dst], from, to, edge.bytes, t, finish});
  }
}

void GlobalSimulator::advance(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt) {
  const Nanos horizon_end = opt.horizon >= 0 ? now_ + opt.horizon : -1;
  bool first = true;
  bool transfers_dirty = false;
  while (!events_.empty() && !stopped_) {
    const Nanos t = events_.top().t;
    if (horizon_end >= 0 && t > horizon_end) break;
    if (first) {
      r_.begin = t;
      first = false;
    }
    r_.end = t;
    while (!events_.empty() && events_.top().t == t) {
      Event ev = events_.pop();
      switch (ev.kind) {
        case kReady: {
          Node& nd = nodes_[ev.id];
          ready_[nd.accel].push_back({nd.neg_priority, nd.seq, ev.id});
          std::push_heap(ready_[nd.accel].begin(), ready_[nd.accel].end(), RunsLater{});
          if (!dirty_flag_[nd.accel]) {
            dirty_flag_[nd.accel] = 1;
            dirty_.push_back(nd.accel);
          }
          break;
        }
        case kOpFinish:
          on_op_finish(ev.id, t);
          transfers_dirty = true;
          break;
        case kTransferReady:
          pending_transfers_.push_back(ev.id);
          transfers_dirty = true;
          break;
        case kTransferFinish: {
          const SimEdge& edge = edges_[transfers_[ev.id].edge];
          send_busy_[nodes_[edge.src].accel] = 0;
          recv_busy_[nodes_[edge.dst].accel] = 0;
          transfers_dirty = true;
          on_input_ready(edge.dst, t);
          break;
        }
        case kWake:
          if (!dirty_flag_[ev.id]) {
            dirty_flag_[ev.id] = 1;
            dirty_.push_back(ev.id);
          }
          break;
      }
    }

    // Start work on every accelerator whose queue changed.
    for (AccelId a : dirty_) {
      dirty_flag_[a] = 0;
      if (running_[a] != kNotSimulated || ready_[a].empty()) continue;
      if (t < free_at_[a]) {  // still busy with work the GMG already saw finish
        events_.push(free_at_[a], kWake, a);
        continue;
      }
      std::pop_heap(ready_[a].begin(), ready_[a].end(), RunsLater{});
      const std::uint32_t i = ready_[a].back().node;
      ready_[a].pop_back();
      Node& nd = nodes_[i];
      const std::int64_t need = nd.out_bytes + nd.ws_bytes + nd.ret_bytes;
      if (used_[a] + need > cap_[a] && !r_.oom) {
        r_.oom = OomEvent{t, a, r_.ops[i], false, used_[a] + need, cap_[a]};
        if (stop_at_oom_) stopped_ = true;
      }
      alloc(a, need, t);
      nd.output_held = true;
      nd.retained_held = nd.ret_bytes > 0;
      running_[a] = i;
      r_.start[i] = t;
      events_.push(std::max(t + nd.dur, now_), kOpFinish, i);
    }
    dirty_.clear();

    // Arbitration: oldest intent first, one transfer per source and per
    // destination at a time.
    if (transfers_dirty && !pending_transfers_.empty()) {
      std::size_t keep = 0;
      for (std::size_t k = 0; k < pending_transfers_.size(); ++k) {
        std::uint32_t x = pending_transfers_[k];
        const SimEdge& edge = edges_[transfers_[x].edge];
        const AccelId from = nodes_[edge.src].accel, to = nodes_[edge.dst].accel;
        if (send_busy_[from] || recv_busy_[to]) {
          pending_transfers_[keep++] = x;
          continue;
        }
        if (transfers_[x].dur == 0) transfers_[x].dur = to_nanos(est.predict_transfer(from, to, edge.bytes));
        start_transfer(x, t);
      }
      pending_transfers_.resize(keep);
    }
    transfers_dirty = false;
  }
  r_.hbm_end = used_;
  (void)gmg;
}

}  // namespace slicesched
