// The reference implementation of the global simulator that
// tests/simulator/differential_test.cpp compares it against (see
// reference_simulator.cppm): written for obviousness, not speed, and not
// to be changed along with simulator/global_simulator.cpp.
module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

module slicesched.testing.reference_simulator;
import slicesched.core.accel;
import slicesched.core.ids;

namespace slicesched::testing {

namespace {

struct RefEvent {
  Nanos t = 0;
  std::uint64_t seq = 0;
  std::uint32_t kind = 0;
  std::uint32_t id = 0;
};

class RefEventQueue {
 public:
  void push(Nanos t, std::uint32_t kind, std::uint32_t id) {
    heap_.push_back({t, next_seq_++, kind, id});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  bool empty() const { return heap_.empty(); }
  const RefEvent& top() const { return heap_.front(); }
  RefEvent pop() {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    RefEvent e = heap_.back();
    heap_.pop_back();
    return e;
  }

 private:
  static bool later(const RefEvent& a, const RefEvent& b) { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
  std::vector<RefEvent> heap_;
  std::uint64_t next_seq_ = 0;
};

std::uint64_t ref_queue_key(std::int32_t priority, std::uint64_t seq) {
  const auto rank = static_cast<std::uint64_t>(32767 - std::clamp(priority, -32768, 32767));
  return rank << 48 | (seq & ((std::uint64_t{1} << 48) - 1));
}

Nanos ref_nanos(double seconds) { return seconds > 0 ? static_cast<Nanos>(seconds * 1e9 + 0.5) : 0; }

class RefSimulator {
 public:
  SimulationResult run(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt) {
    *this = RefSimulator{};  // the oracle keeps nothing between runs
    record_hbm_ = opt.record_hbm_timeline;
    record_transfers_ = opt.record_transfers;
    stop_at_oom_ = opt.stop_at_oom;
    build(gmg, est);
    advance(est, opt);
    return r_;
  }

 private:
  enum EventKind : std::uint32_t { kReady, kOpFinish, kTransferReady, kTransferFinish, kWake };
  enum Flag : std::uint8_t { kKeepOutput = 1, kOutputHeld = 2, kRetainedHeld = 4 };
  struct Bytes {
    std::int64_t out, ws, ret;
  };
  struct SimEdge {
    std::uint32_t src, dst;
    std::int64_t bytes;
    bool remote, retained;
  };
  struct ReadyEntry {
    std::uint64_t key;
    std::uint32_t node;
  };
  struct RunsLater {
    bool operator()(const ReadyEntry& a, const ReadyEntry& b) const { return a.key > b.key; }
  };
  struct Transfer {
    std::uint32_t edge;
    Nanos dur;
  };

  void build(const Gmg& gmg, const EstimatorSet& est) {
    const AcceleratorSet& accels = gmg.accels();
    const std::size_t n_acc = accels.size();
    const std::size_t slots = gmg.slot_count();
    now_ = gmg.now();
    r_ = SimulationResult{};
    r_.index_of.assign(slots, kNotSimulated);
    r_.busy.assign(n_acc, 0);
    r_.hbm_timeline.resize(n_acc);
    used_.assign(n_acc, 0);
    cap_.resize(n_acc);
    for (AccelId a = 0; a < n_acc; ++a) {
      cap_[a] = accels.hbm_bytes(a);
      used_[a] = gmg.hbm(a).weights;
    }
    for (OpId id = 0; id < slots; ++id) {
      const OpRecord& op = gmg.op(id);
      if (!op.live) continue;
      if (op.state == OpState::kIssued) {
        r_.index_of[id] = static_cast<std::uint32_t>(r_.ops.size());
        r_.ops.push_back(id);
        accel_.push_back(op.accel);
        key_.push_back(ref_queue_key(op.priority, op.issue_seq));
        dur_.push_back(ref_nanos(est.predict_op(op.kind, accels.type(op.accel), gmg.features(id))));
        ready_t_.push_back(op.issue_t);
        bytes_.push_back({op.out_bytes, op.workspace_bytes, op.retained_bytes});
        flags_.push_back(op.unscheduled_succs > 0 ? kKeepOutput : 0);
      } else if (op.state == OpState::kDone) {
        if (op.output_held) used_[op.accel] += op.out_bytes;
        if (op.retained_held) used_[op.accel] += op.retained_bytes;
      }
    }
    n_sim_ = static_cast<std::uint32_t>(r_.ops.size());
    node_of_ = r_.index_of;
    r_.start.assign(n_sim_, -1);
    r_.finish.assign(n_sim_, -1);
    pending_.assign(n_sim_, 0);
    consumers_.assign(n_sim_, 0);
    in_begin_.resize(n_sim_ + 1);
    for (std::uint32_t i = 0; i < n_sim_; ++i) {
      in_begin_[i] = static_cast<std::uint32_t>(edges_.size());
      const AccelId here = accel_[i];
      for (std::uint32_t e = gmg.op(r_.ops[i]).first_in; e != kNoEdge;) {
        const Edge& ge = gmg.edge(e);
        e = ge.next_in;
        std::uint32_t s = node_of_[ge.src];
        if (s < n_sim_) {
          edges_.push_back({s, i, ge.bytes, accel_[s] != here, ge.retained});
          ++consumers_[s];
          ++pending_[i];
          continue;
        }
        const OpRecord& src = gmg.op(ge.src);
        if (s == kNotSimulated) {
          s = static_cast<std::uint32_t>(accel_.size());
          node_of_[ge.src] = s;
          accel_.push_back(src.accel);
          bytes_.push_back({src.out_bytes, 0, src.retained_bytes});
          flags_.push_back(static_cast<std::uint8_t>((src.unscheduled_succs > 0 ? kKeepOutput : 0) |
                                                     (src.output_held ? kOutputHeld : 0) |
                                                     (src.retained_held ? kRetainedHeld : 0)));
          consumers_.push_back(0);
        }
        const bool remote = src.accel != here;
        edges_.push_back({s, i, ge.bytes, remote, ge.retained});
        ++consumers_[s];
        if (!remote) {
          ready_t_[i] = std::max(ready_t_[i], src.done_t);
        } else if (ge.arrived >= 0) {
          ready_t_[i] = std::max(ready_t_[i], ge.arrived);
          used_[here] += ge.bytes;
        } else {
          ++pending_[i];
          transfers_.push_back({static_cast<std::uint32_t>(edges_.size() - 1),
                                ref_nanos(est.predict_transfer(src.accel, here, ge.bytes))});
          // The intent appears once the producer is done and the consumer issued.
          events_.push(std::max(src.done_t, gmg.op(r_.ops[i]).issue_t), kTransferReady,
                       static_cast<std::uint32_t>(transfers_.size() - 1));
        }
      }
    }
    in_begin_[n_sim_] = static_cast<std::uint32_t>(edges_.size());
    const std::size_t n_nodes = accel_.size();
    out_begin_.assign(n_nodes + 1, 0);
    for (const auto& e : edges_) ++out_begin_[e.src + 1];
    for (std::size_t k = 0; k < n_nodes; ++k) out_begin_[k + 1] += out_begin_[k];
    out_refs_.resize(edges_.size());
    std::vector<std::uint32_t> cursor(out_begin_.begin(), out_begin_.end() - 1);
    for (std::uint32_t e = 0; e < edges_.size(); ++e) out_refs_[cursor[edges_[e].src]++] = e;
    for (std::uint32_t i = 0; i < n_sim_; ++i)
      if (pending_[i] == 0) events_.push(ready_t_[i], kReady, i);
    ready_.resize(n_acc);
    running_.assign(n_acc, kNotSimulated);
    free_at_.resize(n_acc);
    for (AccelId a = 0; a < n_acc; ++a) free_at_[a] = gmg.last_done(a);
    dirty_flag_.assign(n_acc, 0);
    send_busy_.assign(n_acc, 0);
    recv_busy_.assign(n_acc, 0);
    r_.hbm_start = used_;
    r_.hbm_peak = used_;
    if (record_hbm_)
      for (AccelId a = 0; a < n_acc; ++a) r_.hbm_timeline[a].push_back({now_, used_[a]});
  }

  void alloc(AccelId a, std::int64_t bytes, Nanos t) {
    used_[a] += bytes;
    if (used_[a] > r_.hbm_peak[a]) r_.hbm_peak[a] = used_[a];
    if (record_hbm_) r_.hbm_timeline[a].push_back({t, used_[a]});
  }
  void free(AccelId a, std::int64_t bytes, Nanos t) {
    used_[a] -= bytes;
    if (record_hbm_) r_.hbm_timeline[a].push_back({t, used_[a]});
  }
  void mark_dirty(AccelId a) {
    if (!dirty_flag_[a]) {
      dirty_flag_[a] = 1;
      dirty_.push_back(a);
    }
  }
  void release_input(std::uint32_t e, Nanos t) {
    const SimEdge& edge = edges_[e];
    const std::uint32_t p = edge.src;
    if (edge.remote) free(accel_[edge.dst], edge.bytes, t);
    if (edge.retained && (flags_[p] & kRetainedHeld)) {
      flags_[p] &= static_cast<std::uint8_t>(~kRetainedHeld);
      free(accel_[p], bytes_[p].ret, t);
    }
    if (--consumers_[p] == 0 && (flags_[p] & (kKeepOutput | kOutputHeld)) == kOutputHeld) {
      flags_[p] &= static_cast<std::uint8_t>(~kOutputHeld);
      free(accel_[p], bytes_[p].out, t);
    }
  }
  void make_ready(std::uint32_t i) {
    auto& heap = ready_[accel_[i]];
    heap.push_back({key_[i], i});
    std::push_heap(heap.begin(), heap.end(), RunsLater{});
    mark_dirty(accel_[i]);
  }
  void on_input_ready(std::uint32_t i, Nanos t) {
    if (--pending_[i] != 0) return;
    if (ready_t_[i] > t) {
      events_.push(ready_t_[i], kReady, i);
      return;
    }
    make_ready(i);
  }
  void on_op_finish(std::uint32_t i, Nanos t) {
    const AccelId a = accel_[i];
    running_[a] = kNotSimulated;
    mark_dirty(a);
    r_.finish[i] = t;
    r_.busy[a] += t - r_.start[i];
    ++r_.finished;
    free(a, bytes_[i].ws, t);
    for (std::uint32_t e = in_begin_[i]; e < in_begin_[i + 1]; ++e) release_input(e, t);
    if (consumers_[i] == 0 && !(flags_[i] & kKeepOutput)) {
      flags_[i] &= static_cast<std::uint8_t>(~kOutputHeld);
      free(a, bytes_[i].out, t);
    }
    for (std::uint32_t k = out_begin_[i]; k < out_begin_[i + 1]; ++k) {
      const std::uint32_t e = out_refs_[k];
      if (edges_[e].remote) {
        transfers_.push_back({e, -1});
        pending_transfers_.push_back(static_cast<std::uint32_t>(transfers_.size() - 1));
      } else {
        on_input_ready(edges_[e].dst, t);
      }
    }
  }
  void start_transfer(std::uint32_t x, Nanos t) {
    const SimEdge& edge = edges_[transfers_[x].edge];
    const AccelId from = accel_[edge.src], to = accel_[edge.dst];
    if (used_[to] + edge.bytes > cap_[to] && !r_.oom) {
      r_.oom = OomEvent{t, to, r_.ops[edge.dst], true, used_[to] + edge.bytes, cap_[to]};
      if (stop_at_oom_) stopped_ = true;
    }
    alloc(to, edge.bytes, t);
    send_busy_[from] = 1;
    recv_busy_[to] = 1;
    const Nanos finish = std::max(t + transfers_[x].dur, now_);
    events_.push(finish, kTransferFinish, x);
    if (record_transfers_) {
      OpId src_op = edge.src < n_sim_ ? r_.ops[edge.src] : kNoOp;
      if (src_op == kNoOp)
        for (OpId id = 0; id < node_of_.size(); ++id)
          if (node_of_[id] == edge.src) src_op = id;
      r_.transfers.push_back({src_op, r_.ops[edge.dst], from, to, edge.bytes, t, finish});
    }
  }
  void dispatch(Nanos t) {
    for (AccelId a : dirty_) {
      dirty_flag_[a] = 0;
      if (running_[a] != kNotSimulated || ready_[a].empty()) continue;
      if (t < free_at_[a]) {
        events_.push(free_at_[a], kWake, a);
        continue;
      }
      auto& heap = ready_[a];
      std::pop_heap(heap.begin(), heap.end(), RunsLater{});
      const std::uint32_t i = heap.back().node;
      heap.pop_back();
      const std::int64_t need = bytes_[i].out + bytes_[i].ws + bytes_[i].ret;
      if (used_[a] + need > cap_[a] && !r_.oom) {
        r_.oom = OomEvent{t, a, r_.ops[i], false, used_[a] + need, cap_[a]};
        if (stop_at_oom_) stopped_ = true;
      }
      alloc(a, need, t);
      flags_[i] |= static_cast<std::uint8_t>(kOutputHeld | (bytes_[i].ret > 0 ? kRetainedHeld : 0));
      running_[a] = i;
      r_.start[i] = t;
      // (started before now_ and not done then: it ends after now_)
      events_.push(t < now_ ? std::max(t + dur_[i], now_ + 1) : t + dur_[i], kOpFinish, i);
    }
    dirty_.clear();
  }
  void arbitrate(const EstimatorSet& est, Nanos t) {
    // Greedy with reserve_oldest: the blocked oldest intent's ports are
    // taken by no younger one.
    std::size_t keep = 0;
    AccelId held_from = kNoAccel, held_to = kNoAccel;
    for (std::size_t k = 0; k < pending_transfers_.size(); ++k) {
      const std::uint32_t x = pending_transfers_[k];
      const SimEdge& edge = edges_[transfers_[x].edge];
      const AccelId from = accel_[edge.src], to = accel_[edge.dst];
      if (send_busy_[from] || recv_busy_[to] || from == held_from || to == held_to) {
        if (k == 0) {
          held_from = from;
          held_to = to;
        }
        pending_transfers_[keep++] = x;
        continue;
      }
      if (transfers_[x].dur < 0) transfers_[x].dur = ref_nanos(est.predict_transfer(from, to, edge.bytes));
      start_transfer(x, t);
    }
    pending_transfers_.resize(keep);
  }
  void advance(const EstimatorSet& est, const SimOptions& opt) {
    const Nanos horizon_end = opt.horizon >= 0 ? now_ + opt.horizon : -1;
    bool first = true;
    while (!events_.empty() && !stopped_) {
      const Nanos t = events_.top().t;
      if (horizon_end >= 0 && t > horizon_end) break;
      if (first) {
        r_.begin = t;
        first = false;
      }
      r_.end = t;
      bool transfers_changed = false;
      while (!events_.empty() && events_.top().t == t) {
        const RefEvent ev = events_.pop();
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
            const SimEdge& edge = edges_[transfers_[ev.id].edge];
            send_busy_[accel_[edge.src]] = 0;
            recv_busy_[accel_[edge.dst]] = 0;
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
      if (transfers_changed && !pending_transfers_.empty()) arbitrate(est, t);
    }
    r_.hbm_end = used_;
  }

  SimulationResult r_;
  std::uint32_t n_sim_ = 0;
  std::vector<AccelId> accel_;
  std::vector<std::uint64_t> key_;
  std::vector<Nanos> dur_, ready_t_;
  std::vector<std::uint32_t> pending_, consumers_, in_begin_, out_begin_, node_of_, out_refs_;
  std::vector<Bytes> bytes_;
  std::vector<std::uint8_t> flags_;
  std::vector<SimEdge> edges_;
  std::vector<std::vector<ReadyEntry>> ready_;
  std::vector<std::uint32_t> running_;
  std::vector<Nanos> free_at_;
  std::vector<std::uint8_t> dirty_flag_;
  std::vector<AccelId> dirty_;
  std::vector<std::int64_t> used_, cap_;
  std::vector<Transfer> transfers_;
  std::vector<std::uint32_t> pending_transfers_;
  std::vector<std::uint8_t> send_busy_, recv_busy_;
  RefEventQueue events_;
  Nanos now_ = 0;
  bool record_hbm_ = false, record_transfers_ = false, stop_at_oom_ = true, stopped_ = false;
};

}  // namespace

SimulationResult reference_simulate(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt) {
  return RefSimulator{}.run(gmg, est, opt);
}

}  // namespace slicesched::testing
