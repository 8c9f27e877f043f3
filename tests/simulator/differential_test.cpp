// Differential test: the global simulator against a frozen copy of its
// straightforward implementation (binary heaps for events and ready queues,
// one event per operator and transfer), kept here as the oracle. Every
// output must agree exactly over random snapshots: mid-run GMGs with done
// producers, landed and pending transfers, retained state, priorities,
// issue times after the inputs were done, zero-time operators, small HBM
// (OOM, with and without stop), horizons, and a reused simulator.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

import slicesched.core;
import slicesched.simulator.global;
import slicesched.simulator.llama;
import slicesched.testing;

using namespace slicesched;
using namespace slicesched::testing;

namespace {

// ---- the oracle: the simulator as it was before the fast event loop ----

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
      events_.push(std::max(t + dur_[i], now_), kOpFinish, i);
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

// ---- random snapshots ----

// A random DAG template; op 0 may read a retained state ("kv"), one op
// retains one. Durations are whole microseconds, or zero.
GraphTemplate random_template(std::mt19937_64& rng, const std::string& name, std::int64_t kv_bytes) {
  TemplateBuilder b(name);
  b.port("kv", {{Expr::constant(kv_bytes)}, DType::kI8}, /*optional=*/true);
  const int n = std::uniform_int_distribution<int>(1, 8)(rng);
  const int retainer = std::uniform_int_distribution<int>(0, n - 1)(rng);
  for (int i = 0; i < n; ++i) {
    auto op = b.op("op" + std::to_string(i));
    if (i == 0) op.input("kv");
    for (int j = 0; j < i; ++j)
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0 || j == i - 1) op.input("op" + std::to_string(j));
    const std::int64_t out = std::uniform_int_distribution<std::int64_t>(1, 3'000'000)(rng);
    // Few distinct durations, so ties (simultaneous events) are common.
    const int pick = std::uniform_int_distribution<int>(0, 9)(rng);
    const double seconds = pick == 0 ? 0.0 : pick * 250e-6;
    op.output({{Expr::constant(out)}, DType::kI8})
        .workspace(Expr::constant(std::uniform_int_distribution<std::int64_t>(0, 100'000)(rng)))
        .features({Expr::constant(1)})
        .prior({seconds})
        .weights(std::uniform_int_distribution<std::int64_t>(0, 1 << 16)(rng));
    if (i == retainer) op.retain("kv", {{Expr::constant(kv_bytes)}, DType::kI8});
  }
  return std::move(b).build().value();
}

void require_same(const SimulationResult& want, const SimulationResult& got) {
  REQUIRE(got.ops == want.ops);
  REQUIRE(got.start == want.start);
  REQUIRE(got.finish == want.finish);
  REQUIRE(got.index_of == want.index_of);
  REQUIRE(got.busy == want.busy);
  REQUIRE(got.hbm_start == want.hbm_start);
  REQUIRE(got.hbm_peak == want.hbm_peak);
  REQUIRE(got.hbm_end == want.hbm_end);
  REQUIRE(got.finished == want.finished);
  REQUIRE(got.begin == want.begin);
  REQUIRE(got.end == want.end);
  REQUIRE(got.oom.has_value() == want.oom.has_value());
  if (want.oom) {
    REQUIRE(got.oom->t == want.oom->t);
    REQUIRE(got.oom->accel == want.oom->accel);
    REQUIRE(got.oom->op == want.oom->op);
    REQUIRE(got.oom->at_transfer == want.oom->at_transfer);
    REQUIRE(got.oom->needed == want.oom->needed);
    REQUIRE(got.oom->capacity == want.oom->capacity);
  }
  REQUIRE(got.transfers.size() == want.transfers.size());
  for (std::size_t k = 0; k < want.transfers.size(); ++k) {
    INFO("transfer " << k);
    const TransferRecord &a = want.transfers[k], &b = got.transfers[k];
    REQUIRE(b.src == a.src);
    REQUIRE(b.dst == a.dst);
    REQUIRE(b.from == a.from);
    REQUIRE(b.to == a.to);
    REQUIRE(b.bytes == a.bytes);
    REQUIRE(b.start == a.start);
    REQUIRE(b.finish == a.finish);
  }
  // Timelines are compared only for the accelerators the result has.
  for (std::size_t a = 0; a < want.busy.size(); ++a) {
    INFO("hbm timeline of accelerator " << a);
    REQUIRE(got.hbm_timeline[a].size() == want.hbm_timeline[a].size());
    for (std::size_t k = 0; k < want.hbm_timeline[a].size(); ++k) {
      REQUIRE(got.hbm_timeline[a][k].t == want.hbm_timeline[a][k].t);
      REQUIRE(got.hbm_timeline[a][k].bytes == want.hbm_timeline[a][k].bytes);
    }
  }
}

}  // namespace

TEST_CASE("the global simulator agrees exactly with its reference implementation", "[simulator][differential]") {
  std::mt19937_64 rng(20261123);
  GlobalSimulator reused;  // scratch buffers carried across very different snapshots
  int compared_ops = 0, with_oom = 0, with_ghosts = 0, tentative_trials = 0, scoped_trials = 0, dominated_trials = 0;
  for (int trial = 0; trial < 600; ++trial) {
    INFO("trial " << trial);
    const int n_acc = std::uniform_int_distribution<int>(1, 5)(rng);
    const std::int64_t kv_bytes = std::uniform_int_distribution<std::int64_t>(1, 2'000'000)(rng);
    const bool small_hbm = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    const std::int64_t hbm =
        small_hbm ? std::uniform_int_distribution<std::int64_t>(2'000'000, 30'000'000)(rng) : 64 * kGiB;
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId ta = reg->add(random_template(rng, "a", kv_bytes)).value();
    TemplateId tb = reg->add(random_template(rng, "b", kv_bytes)).value();
    Gmg gmg(reg, cluster(n_acc, hbm));
    for (AccelId acc = 0; acc < static_cast<AccelId>(n_acc); ++acc) {
      REQUIRE(gmg.place_weights(ta, acc).ok());
      REQUIRE(gmg.place_weights(tb, acc).ok());
    }
    EstimatorSet est = estimators(*reg, std::uniform_int_distribution<int>(0, 1)(rng) ? 1e-9 : 1e-10);
    std::uniform_int_distribution<int> pick_acc(0, n_acc - 1);
    Nanos clock = 0;

    // Issues a few instances (decode-like chains through "kv"); the last
    // one may be issued only in part, so some outputs must be kept.
    OpId retainer = kNoOp;
    auto issue_some = [&](int count) {
      for (int k = 0; k < count; ++k) {
        TemplateId t = std::uniform_int_distribution<int>(0, 1)(rng) ? ta : tb;
        InstanceSpec spec{t, {}, {}, std::uniform_int_distribution<int>(0, 3)(rng), 0};
        if (retainer != kNoOp && gmg.contains(retainer) && !gmg.op(retainer).retained_attached &&
            (gmg.op(retainer).state != OpState::kDone || gmg.op(retainer).retained_held) &&
            std::uniform_int_distribution<int>(0, 2)(rng))
          spec.ports.push_back({"kv", retainer, true});
        auto inst = gmg.instantiate(spec);
        REQUIRE(inst.ok());
        const bool partial = k == count - 1 && std::uniform_int_distribution<int>(0, 3)(rng) == 0;
        const std::size_t n_issue =
            partial ? std::uniform_int_distribution<std::size_t>(0, inst->ops.size())(rng) : inst->ops.size();
        for (std::size_t i = 0; i < n_issue; ++i) {
          REQUIRE(gmg.issue(inst->ops[i], static_cast<AccelId>(pick_acc(rng)), clock).ok());
          if (std::uniform_int_distribution<int>(0, 3)(rng) == 0)
            clock += std::uniform_int_distribution<Nanos>(0, 3)(rng) * 250'000;
        }
        for (OpId op : inst->ops)
          if (gmg.op(op).retained_bytes > 0 && gmg.op(op).state != OpState::kUnscheduled) retainer = op;
      }
    };
    issue_some(std::uniform_int_distribution<int>(1, 4)(rng));

    // Sometimes replay part of the predicted timeline into the GMG (done
    // ops, landed transfers, a later clock) and issue more on top of it.
    if (std::uniform_int_distribution<int>(0, 1)(rng)) {
      RefSimulator ref;
      auto full = ref.run(gmg, est, {.stop_at_oom = false, .record_transfers = true});
      if (full.end > 0) {
        const Nanos cut = std::uniform_int_distribution<Nanos>(0, full.end)(rng);
        std::vector<std::size_t> order;
        for (std::size_t i = 0; i < full.ops.size(); ++i)
          if (full.finish[i] >= 0 && full.finish[i] <= cut) order.push_back(i);
        std::sort(order.begin(), order.end(), [&](auto x, auto y) { return full.finish[x] < full.finish[y]; });
        for (std::size_t i : order)
          REQUIRE(gmg.complete(full.ops[i], full.finish[i], full.finish[i] - full.start[i]).ok());
        for (const auto& x : full.transfers)
          if (x.finish <= cut && gmg.op(x.src).state == OpState::kDone && std::uniform_int_distribution<int>(0, 3)(rng))
            REQUIRE(gmg.complete_transfer(x.src, x.dst, x.finish).ok());
        gmg.advance_clock(cut);
        clock = gmg.now();
        if (std::uniform_int_distribution<int>(0, 2)(rng)) gmg.retire();
        issue_some(std::uniform_int_distribution<int>(0, 3)(rng));
      }
    }
    if (gmg.issued_count() == 0) continue;

    SimOptions opt;
    opt.stop_at_oom = std::uniform_int_distribution<int>(0, 1)(rng);
    opt.record_hbm_timeline = std::uniform_int_distribution<int>(0, 1)(rng);
    opt.record_transfers = std::uniform_int_distribution<int>(0, 1)(rng);
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0)
      opt.horizon = std::uniform_int_distribution<Nanos>(0, 8)(rng) * 250'000;

    RefSimulator ref;
    const SimulationResult want = ref.run(gmg, est, opt);
    with_oom += want.oom.has_value();
    for (std::size_t i = 0; i < gmg.slot_count(); ++i)
      with_ghosts += gmg.contains(static_cast<OpId>(i)) && gmg.op(static_cast<OpId>(i)).state == OpState::kDone;
    {
      INFO("a fresh simulator");
      require_same(want, simulate(gmg, est, opt));
    }
    {
      INFO("the reused simulator");
      require_same(want, reused.run(gmg, est, opt));
    }
    compared_ops += static_cast<int>(want.ops.size());

    // A tentative batch (the scheduler's what-if) gives exactly what a
    // clone with the batch issued gives.
    std::vector<OpId> batch;
    std::vector<AccelId> where;
    if (std::uniform_int_distribution<int>(0, 2)(rng)) {  // work that is not yet issued at all
      InstanceSpec spec{std::uniform_int_distribution<int>(0, 1)(rng) ? ta : tb,
                        {},
                        {},
                        std::uniform_int_distribution<int>(0, 3)(rng),
                        0};
      REQUIRE(gmg.instantiate(spec).ok());
    }
    for (bool grew = true; grew && batch.size() < 6;) {
      grew = false;
      for (OpId id = 0; id < gmg.slot_count() && batch.size() < 6; ++id) {
        if (!gmg.contains(id) || gmg.op(id).state != OpState::kUnscheduled) continue;
        if (std::find(batch.begin(), batch.end(), id) != batch.end()) continue;
        bool ready = true;
        for (std::uint32_t e = gmg.op(id).first_in; e != kNoEdge && ready; e = gmg.edge(e).next_in) {
          const OpId p = gmg.edge(e).src;
          ready = gmg.op(p).state != OpState::kUnscheduled || std::find(batch.begin(), batch.end(), p) != batch.end();
        }
        if (!ready || std::uniform_int_distribution<int>(0, 2)(rng) == 0) continue;
        batch.push_back(id);
        where.push_back(static_cast<AccelId>(pick_acc(rng)));
        grew = true;
      }
    }
    if (batch.empty()) continue;
    ++tentative_trials;
    REQUIRE(gmg.check_issue(batch, where).ok());
    const Nanos at = gmg.now() + std::uniform_int_distribution<int>(0, 1)(rng) * 250'000;
    Gmg copy = gmg.clone();
    for (std::size_t k = 0; k < batch.size(); ++k) REQUIRE(copy.issue(batch[k], where[k], at).ok());
    const SimulationResult with_clone = simulate(copy, est, opt);
    SimOptions overlay = opt;
    overlay.tentative = {.ops = batch, .accels = where, .at = at};
    {
      INFO("a tentative batch of " << batch.size());
      require_same(with_clone, reused.run(gmg, est, overlay));
      // and the snapshot itself is untouched, marks and all
      require_same(simulate(gmg, est, opt), reused.run(gmg, est, opt));
    }
    // Prepared once, placed many times (the scheduler's round): each
    // placement gives what a clone with that placement issued gives.
    {
      GlobalSimulator round;
      round.prepare(gmg, est, batch, at);
      for (int p = 0; p < 3; ++p) {
        std::vector<AccelId> there;
        for (std::size_t k = 0; k < batch.size(); ++k) there.push_back(static_cast<AccelId>(pick_acc(rng)));
        Gmg placed = gmg.clone();
        for (std::size_t k = 0; k < batch.size(); ++k) REQUIRE(placed.issue(batch[k], there[k], at).ok());
        INFO("placement " << p);
        const SimulationResult want_placed = simulate(placed, est, opt);
        require_same(want_placed, round.place(there, opt));
        // Given a bound on the batch's summed completion, a placement that
        // beats or ties it runs to the end exactly as without; one that
        // is stopped as dominated really is worse.
        if (!want_placed.feasible() || opt.horizon >= 0) continue;
        Nanos sum = 0;
        for (OpId op : batch) sum += want_placed.finish_of(op) - at;
        for (const Nanos slack : {Nanos{0}, Nanos{1}, std::uniform_int_distribution<Nanos>(2, 1'000'000)(rng)}) {
          SimOptions bounded = opt;
          bounded.dominated_above = sum + slack;
          const SimulationResult& kept = round.place(there, bounded);
          REQUIRE_FALSE(kept.dominated);
          require_same(want_placed, kept);
          bounded.dominated_above = std::max<Nanos>(0, sum - 1 - slack);
          if (bounded.dominated_above >= sum) continue;
          const SimulationResult& cut = round.place(there, bounded);
          if (cut.dominated)
            ++dominated_trials;
          else
            require_same(want_placed, cut);  // (it ran to the end: nothing to cut)
        }
      }
      CHECK_THROWS_AS(round.place(std::vector<AccelId>(batch.size() + 1, 0), opt), std::invalid_argument);
    }
    // Scoped to the closure of the batch's accelerators, the simulation
    // agrees with the whole cluster's inside the scope whenever nothing
    // outside could reach in: no transfer outside (the default rule
    // reserves the ports of the oldest intent anywhere) and no OOM outside.
    {
      AccelComponents comps;
      comps.build(gmg);
      std::vector<AccelId> scope;
      comps.closure(gmg, where, batch, scope);
      REQUIRE(std::is_sorted(scope.begin(), scope.end()));
      for (AccelId a : where) REQUIRE(std::find(scope.begin(), scope.end(), a) != scope.end());
      SimOptions scoped = overlay;
      scoped.record_transfers = true;
      scoped.record_hbm_timeline = false;
      const SimulationResult full = simulate(gmg, est,
                                             {.horizon = scoped.horizon,
                                              .stop_at_oom = scoped.stop_at_oom,
                                              .record_transfers = true,
                                              .tentative = overlay.tentative});
      auto inside = [&](AccelId a) { return std::find(scope.begin(), scope.end(), a) != scope.end(); };
      bool outside_reaches = full.oom && !inside(full.oom->accel);
      for (const TransferRecord& x : full.transfers) outside_reaches |= !inside(x.from) || !inside(x.to);
      if (scope.size() < static_cast<std::size_t>(n_acc) && !outside_reaches) {
        scoped.scope = scope;
        const SimulationResult& part = reused.run(gmg, est, scoped);
        ++scoped_trials;
        std::size_t in_scope_ops = 0;
        for (std::size_t i = 0; i < full.ops.size(); ++i) {
          const OpId op = full.ops[i];
          const AccelId a = copy.op(op).accel;
          if (!inside(a)) {
            REQUIRE(part.index_of[op] == kNotSimulated);
            continue;
          }
          ++in_scope_ops;
          INFO("op " << op);
          REQUIRE(part.start_of(op) == full.start[i]);
          REQUIRE(part.finish_of(op) == full.finish[i]);
        }
        REQUIRE(part.ops.size() == in_scope_ops);
        for (AccelId a : scope) {
          REQUIRE(part.busy[a] == full.busy[a]);
          REQUIRE(part.hbm_peak[a] == full.hbm_peak[a]);
          REQUIRE(part.hbm_end[a] == full.hbm_end[a]);
        }
        REQUIRE(part.oom.has_value() == full.oom.has_value());
        REQUIRE(part.transfers.size() == full.transfers.size());
        // Scoped runs back to back (as the scheduler makes them) reset what
        // the last one left: another scope, then this one again, agree.
        const SimulationResult first = part;
        std::vector<AccelId> other;
        for (AccelId a = 0; a < static_cast<AccelId>(n_acc); ++a)
          if (!inside(a)) other.push_back(a);
        comps.closure(gmg, std::vector<AccelId>{other.front()}, {}, other);
        SimOptions elsewhere = opt;
        elsewhere.scope = other;
        (void)reused.run(gmg, est, elsewhere);
        require_same(first, reused.run(gmg, est, scoped));
        // and the simulator is left as it was: a whole-cluster run after it agrees
        require_same(with_clone, reused.run(gmg, est, overlay));
      }
    }
    // Out of order, a batch is refused as issue() would refuse it.
    if (batch.size() > 1 && gmg.op(batch[1]).unscheduled_preds > 0) {
      std::vector<OpId> swapped{batch[1], batch[0]};
      std::vector<AccelId> swapped_where{where[1], where[0]};
      CHECK_FALSE(gmg.check_issue(swapped, swapped_where).ok());
    }
    CHECK_FALSE(gmg.check_issue(std::vector<OpId>{batch[0], batch[0]}, std::vector<AccelId>{0, 0}).ok());
  }
  CHECK(tentative_trials > 200);
  CHECK(scoped_trials > 25);
  CHECK(dominated_trials > 100);
  CHECK(compared_ops > 3000);
  CHECK(with_oom > 20);
  CHECK(with_ghosts > 100);
}

TEST_CASE("the global simulator agrees with its reference on the benchmark's Llama pipelines",
          "[simulator][differential]") {
  for (int n : {1, 3, 8, 64}) {
    INFO(n << " accelerators");
    auto reg = std::make_shared<TemplateRegistry>();
    TemplateId t = reg->add(llama::make_template("llama3-8b")).value();
    auto accels = std::make_shared<AcceleratorSet>();
    (void)accels->add_link_class("nvlink", 300e9, 5e-6);
    for (int i = 0; i < n; ++i) (void)accels->add("gpu" + std::to_string(i), "H100", 80ll << 30);
    Gmg gmg(reg, accels);
    for (AccelId a = 0; a < static_cast<AccelId>(n); ++a) REQUIRE(gmg.place_weights(t, a).ok());
    REQUIRE(llama::issue_pipelines(gmg, t, 4000, 2048, 15).ok());
    EstimatorSet est;
    REQUIRE(seed_priors(est, *reg, *accels).ok());
    RefSimulator ref;
    const SimOptions opt{.stop_at_oom = false, .record_hbm_timeline = true, .record_transfers = true};
    require_same(ref.run(gmg, est, opt), simulate(gmg, est, opt));
    require_same(ref.run(gmg, est, {.horizon = 50'000'000}), simulate(gmg, est, {.horizon = 50'000'000}));
  }
}
