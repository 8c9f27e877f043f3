module;
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

module slicesched.simulator.global_simulator;
import slicesched.core.accel;

namespace slicesched {

SimulationResult simulate(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt) {
  GlobalSimulator sim;
  return sim.run(gmg, est, opt);
}

SimulationResult simulate(const Gmg& gmg, const Estimator& est, const SimOptions& opt) {
  GlobalSimulator sim;
  return sim.run(gmg, est, opt);
}

const SimulationResult& GlobalSimulator::run(const Gmg& gmg, const EstimatorSet& est, const SimOptions& opt) {
  return run_with(gmg, est, opt);
}

const SimulationResult& GlobalSimulator::run(const Gmg& gmg, const Estimator& est, const SimOptions& opt) {
  return run_with(gmg, est, opt);
}

template <typename Est>
const SimulationResult& GlobalSimulator::run_with(const Gmg& gmg, const Est& est, const SimOptions& opt) {
  prepare_with(gmg, est, opt.tentative.ops, opt.tentative.at, opt.scope);
  return place_with(est, opt.tentative.accels, opt, /*last=*/true);
}

void GlobalSimulator::prepare(const Gmg& gmg, const EstimatorSet& est, std::span<const OpId> batch, Nanos at,
                              std::span<const AccelId> scope) {
  prepare_with(gmg, est, batch, at, scope);
}

void GlobalSimulator::prepare(const Gmg& gmg, const Estimator& est, std::span<const OpId> batch, Nanos at,
                              std::span<const AccelId> scope) {
  prepare_with(gmg, est, batch, at, scope);
}

const SimulationResult& GlobalSimulator::place(std::span<const AccelId> accels, const SimOptions& opt) {
  if (!gmg_) throw std::logic_error("global simulator: place() before prepare()");
  return est_set_ ? place_with(*est_set_, accels, opt, false) : place_with(*est_virtual_, accels, opt, false);
}

// Simulates one placement of the prepared batch: restores the shared state,
// puts the batch's ops on their accelerators (time, queue, remote inputs),
// pushes every node's events in node order, and runs.
template <typename Est>
const SimulationResult& GlobalSimulator::place_with(const Est& est, std::span<const AccelId> accels,
                                                    const SimOptions& opt, bool last) {
  const Gmg& gmg = *gmg_;
  const std::size_t n_acc = gmg.accels().size();
  if (accels.size() != batch_.size())
    throw std::invalid_argument("global simulator: a placement of " + std::to_string(accels.size()) +
                                " accelerator(s) for a batch of " + std::to_string(batch_.size()));
  for (AccelId a : accels)
    if (a >= n_acc || (!scope_.empty() && !std::binary_search(scope_.begin(), scope_.end(), a)))
      throw std::invalid_argument("global simulator: a batch operator's accelerator is outside the scope");
  stop_at_oom_ = opt.stop_at_oom;
  stopped_ = false;

  // The batch's predicted times on these accelerators, and whether the
  // placement is dominated before anything runs (then nothing is touched).
  // dominated_alone() may have just computed them.
  if (!bound_set_ || opt.dominated_above != bound_above_ || opt.horizon != bound_horizon_ ||
      opt.dominated_by_makespan != bound_by_makespan_ ||
      !std::equal(accels.begin(), accels.end(), bound_accels_.begin(), bound_accels_.end()))
    set_bound(est, accels, opt.dominated_above, opt.horizon, opt.dominated_by_makespan);
  bound_set_ = false;  // the run below moves the bound on
  r_.dominated = false;
  if (pruning_ && dominated_at_ == kBeforeAll) {  // even alone on its accelerators it loses
    r_.dominated = true;
    return r_;
  }
  arbiter_ = opt.arbiter && !opt.arbiter->uses_default_rule() ? opt.arbiter : nullptr;
  // Its inputs' transfers make it lose and nothing can run out of memory
  // first: the simulation would end it as dominated.
  if (pruning_ && opt.horizon < 0 && !ext_inputs_.empty() && dominated_by_inputs(est, accels)) {
    arbiter_ = nullptr;
    ++cut_by_inputs_;
    r_.dominated = true;
    return r_;
  }
  // A focus: only its accelerators' operators are touched and simulated.
  focused_ = (!opt.focus.empty() || opt.focus_of) && arbiter_ == nullptr;
  if (focused_) {
    if (opt.focus_of)
      opt.focus_of->closure_of(gmg, accels, batch_, focus_);
    else
      focus_.assign(opt.focus.begin(), opt.focus.end());
    for (AccelId a : accels)
      if (!std::binary_search(focus_.begin(), focus_.end(), a))
        throw std::invalid_argument("global simulator: a batch operator's accelerator is outside the focus");
    for (AccelId a : focus_)
      if (a >= n_acc || (!scope_.empty() && !std::binary_search(scope_.begin(), scope_.end(), a)))
        throw std::invalid_argument("global simulator: the focus reaches outside the prepared scope");
  }
  auto each_placed = [&](auto&& f) {
    if (focused_)
      for (AccelId a : focus_) f(a);
    else
      each_accel(n_acc, f);
  };

  // The last placement's batch ops leave their queues (ranks come back
  // with arrival_).
  for (AccelId a : tent_accels_) std::erase_if(queue_[a], [&](std::uint32_t i) { return is_tent_[i] != 0; });
  tent_accels_.clear();
  if (focused_) {
    focus_nodes_.clear();
    for (AccelId a : focus_) focus_nodes_.insert(focus_nodes_.end(), queue_[a].begin(), queue_[a].end());
    focus_nodes_.insert(focus_nodes_.end(), tnode_.begin(), tnode_.end());
    std::sort(focus_nodes_.begin(), focus_nodes_.end());
  }

  // Shared state back to what prepare() left. A node is saved (its record
  // and arrival, into base_nodes_ and base_arrival_) the first time a
  // placement touches it after a prepare and restored at every later one,
  // unless the placement is the last, which needs no copy. A focused
  // placement touches only its nodes and the ghosts (done producers) on its
  // accelerators, so a cluster-wide round copies what its few simulated
  // candidates touch, not every issued operator.
  if (base_nodes_.size() < nodes_.size()) {
    base_nodes_.resize(nodes_.size());
    saved_at_.resize(nodes_.size(), 0);
  }
  if (base_arrival_.size() < arrival_.size()) base_arrival_.resize(arrival_.size());
  auto touch = [&](std::uint32_t i) {
    if (saved_at_[i] == epoch_) {
      nodes_[i] = base_nodes_[i];
      if (i < n_sim_) arrival_[i] = base_arrival_[i];
    } else if (!last) {
      base_nodes_[i] = nodes_[i];
      if (i < n_sim_) base_arrival_[i] = arrival_[i];
      saved_at_[i] = epoch_;
      some_saved_ = true;
    }
  };
  if (focused_) {
    if (!ghosts_indexed_) index_ghosts();
    for (std::uint32_t i : focus_nodes_) touch(i);
    for (AccelId a : focus_)
      for (std::uint32_t g = ghost_off_[a]; g < ghost_off_[a + 1]; ++g) touch(ghost_list_[g]);
  } else if (base_saved_) {
    std::copy_n(base_nodes_.begin(), nodes_.size(), nodes_.begin());
    std::copy_n(base_arrival_.begin(), arrival_.size(), arrival_.begin());
  } else if (some_saved_ || !last) {
    for (std::uint32_t i = 0; i < nodes_.size(); ++i) touch(i);
    base_saved_ = !last;  // every node saved
  }
  each_placed([&](AccelId a) {
    used_[a] = base_used_[a];
    r_.busy[a] = 0;
    running_[a] = kNotSimulated;
    dirty_flag_[a] = send_busy_[a] = recv_busy_[a] = 0;
  });

  // The batch's ops: accelerator, time, queue place.
  for (std::size_t k = 0; k < batch_.size(); ++k) {
    const std::uint32_t i = tnode_[k];
    const AccelId a = accels[k];
    nodes_[i].accel = a;
    nodes_[i].dur = batch_dur_[k];
    arrival_[i].accel = a;
    ready_t_[i] = at_;
    auto& q = queue_[a];
    // After every op of higher or equal key (its key is the newest of its
    // priority), before the lower ones.
    q.insert(std::upper_bound(q.begin(), q.end(), key_[i],
                              [&](std::uint64_t key, std::uint32_t node) { return key < key_[node]; }),
             i);
    if (std::find(tent_accels_.begin(), tent_accels_.end(), a) == tent_accels_.end()) tent_accels_.push_back(a);
  }
  for (AccelId a : tent_accels_)
    for (std::uint32_t rank = 0; rank < queue_[a].size(); ++rank) arrival_[queue_[a][rank]].rank = rank;
  size_bitsets();

  // The batch's inputs: which are remote, which wait for a transfer.
  tent_events_.clear();
  for (const Deferred& d : deferred_) {
    SimEdge& edge = edges_[d.edge];
    const std::uint32_t s = edge.src & kNodeMask;
    const std::uint32_t i = edge.dst;
    const bool remote = nodes_[s].accel != nodes_[i].accel;
    edge.src = remote ? edge.src | kRemote : edge.src & ~kRemote;
    out_refs_[d.out_ref].edge = remote ? d.edge | kRemote : d.edge;
    if (!d.ghost) {
      ++arrival_[i].pending;
    } else if (!remote) {
      ready_t_[i] = std::max(ready_t_[i], d.done_t);
    } else if (d.arrived >= 0) {  // (a batch op has no landed copies; kept for symmetry)
      ready_t_[i] = std::max(ready_t_[i], d.arrived);
      used_[nodes_[i].accel] += edge.bytes;
    } else {
      ++arrival_[i].pending;
      tent_events_.push_back({std::max(d.done_t, at_), kTransferReady, d.edge});
    }
  }

  // Events, in node order (equal times leave in push order): an issued
  // op's recorded ones, a batch op's transfers then its ready event.
  events_.clear();
  pending_transfers_.clear();
  intents_of_.clear();
  intent_count_ = 0;
  auto push = [&](const Event& ev) {
    if (ev.kind == kTransferReady && arbiter_) note_intent(ev.id, ev.t);
    events_.push(ev.t, ev.kind, ev.id);
  };
  std::size_t next_tent_event = 0;
  auto push_node = [&](std::uint32_t i) {
    if (!is_tent_[i]) {
      for (std::uint32_t x = ev_begin_[i]; x < ev_begin_[i + 1]; ++x) push(node_events_[x]);
      return;
    }
    while (next_tent_event < tent_events_.size() && edges_[tent_events_[next_tent_event].id].dst == i)
      push(tent_events_[next_tent_event++]);
    if (arrival_[i].pending == 0) push({ready_t_[i], kReady, i});
  };
  if (focused_)
    for (std::uint32_t i : focus_nodes_) push_node(i);
  else
    for (std::uint32_t i = 0; i < n_sim_; ++i) push_node(i);

  if (focused_ && results_partial_) {
    for (std::uint32_t i : results_set_) r_.start[i] = r_.finish[i] = -1;
  } else {
    r_.start.assign(n_sim_, -1);
    r_.finish.assign(n_sim_, -1);
  }
  // Only the focus's nodes are simulated: the next focused placement finds
  // every other entry still -1.
  results_partial_ = focused_;
  if (focused_) results_set_.assign(focus_nodes_.begin(), focus_nodes_.end());
  r_.transfers.clear();
  r_.oom.reset();
  r_.finished = 0;
  r_.begin = r_.end = 0;
  dirty_.clear();
  each_placed([&](AccelId a) { r_.hbm_start[a] = r_.hbm_peak[a] = used_[a]; });
  if (timelines_dirty_)
    for (auto& tl : r_.hbm_timeline) tl.clear();
  timelines_dirty_ = opt.record_hbm_timeline;
  if (opt.record_hbm_timeline)
    opt.record_transfers ? advance<Est, true, true>(est, opt) : advance<Est, true, false>(est, opt);
  else
    opt.record_transfers ? advance<Est, false, true>(est, opt) : advance<Est, false, false>(est, opt);
  arbiter_ = nullptr;
  return r_;
}

template <typename Est>
Nanos GlobalSimulator::batch_op_nanos(const Est& est, std::size_t k, AccelTypeId type) {
  Nanos& dur = dur_of_type_[k * gmg_->accels().type_count() + type];
  if (dur == kNoDur) {
    const OpRow& op = view_.ops[batch_[k]];
    dur = to_nanos(est.predict_op(op.kind, type, {view_.features[batch_[k]].data(), op.feature_count}));
  }
  return dur;
}

template <typename Est>
void GlobalSimulator::set_bound(const Est& est, std::span<const AccelId> accels, std::int64_t dominated_above,
                                Nanos horizon, bool by_makespan) {
  const AcceleratorSet& set = gmg_->accels();
  const std::size_t nb = batch_.size();
  batch_dur_.resize(nb);
  const std::size_t n_types = set.type_count();
  if (dur_of_type_.size() != nb * n_types) dur_of_type_.assign(nb * n_types, kNoDur);
  for (std::size_t k = 0; k < nb; ++k) batch_dur_[k] = batch_op_nanos(est, k, set.type(accels[k]));
  pruning_ = dominated_above >= 0 && dominated_above < INT64_MAX / 4 && nb > 0 && nb <= kMaxPrunedBatch;
  dominated_at_ = kNever;
  floored_ = false;  // (batch_floor_ is read only when set)
  if (!pruning_) return;
  batch_finish_.assign(nb, -1);
  for (BatchEdge& be : batch_edges_)
    be.x = accels[be.p] == accels[be.k] ? 0 : to_nanos(est.predict_transfer(accels[be.p], accels[be.k], be.bytes));
  bound_max_ = by_makespan;
  bound_sum_ = dominated_above + (by_makespan ? 1 : static_cast<Nanos>(nb)) * at_;
  horizon_end_ = horizon >= 0 ? now_ + horizon : kNever;
  // A memo's key: the batch's times, its edges' transfers, the bound, the
  // horizon's end and the objective, compared in place (most candidates
  // hit, and building the key first cost as much as the compare).
  const std::size_t n_key = nb + batch_edges_.size() + 3;
  auto same_key = [&](const std::vector<Nanos>& key) {
    if (key.size() != n_key || !std::equal(batch_dur_.begin(), batch_dur_.end(), key.begin())) return false;
    for (std::size_t e = 0; e < batch_edges_.size(); ++e)
      if (key[nb + e] != batch_edges_[e].x) return false;
    return key[n_key - 3] == bound_sum_ && key[n_key - 2] == horizon_end_ && key[n_key - 1] == bound_max_;
  };
  bool hit = false;
  for (const BoundMemo& m : bound_memo_)
    if (m.valid && same_key(m.key)) {
      dominated_at_ = m.at;
      hit = true;
      break;
    }
  if (!hit) {
    dominated_at_ = dominated_from(kBeforeAll);
    BoundMemo& m = bound_memo_[bound_memo_next_];
    bound_memo_next_ = (bound_memo_next_ + 1) % bound_memo_.size();
    m.key.assign(batch_dur_.begin(), batch_dur_.end());
    for (const BatchEdge& be : batch_edges_) m.key.push_back(be.x);
    m.key.push_back(bound_sum_);
    m.key.push_back(horizon_end_);
    m.key.push_back(bound_max_);
    m.at = dominated_at_;
    m.valid = true;
  }
  // Not lost on its own: the work surely ahead of it on its accelerators
  // (busy_floor()) may make it so, or end its simulation sooner. (Most of a
  // big cluster's candidates are lost on their own: they skip these scans.)
  // A floor at or before at_ bounds nothing at_ does not.
  if (dominated_at_ == kBeforeAll) return;
  batch_floor_.resize(nb);
  for (std::size_t k = 0; k < nb; ++k) {
    const Nanos floor = busy_floor(accels[k], key_[tnode_[k]] >> 48);
    batch_floor_[k] = floor > at_ ? floor : kBeforeAll;
    floored_ |= floor > at_;
  }
  if (floored_) {
    dominated_at_ = dominated_from(kBeforeAll);
    cut_by_queues_ += dominated_at_ == kBeforeAll;
  }
}

Nanos GlobalSimulator::busy_floor(AccelId a, std::uint64_t rank) {
  if (busy_floor_.size() <= a) busy_floor_.resize(gmg_->accels().size());
  BusyFloor& memo = busy_floor_[a];
  if (memo.epoch == epoch_ && memo.rank == rank) return memo.floor;
  // Ahead of the batch op: every issued op of a lower or equal key (the
  // queue is in key order; place() puts the batch op after them). Of
  // those, the ones sure to be ready whenever the batch op could be picked
  // all run first: an op ready by at_ with every input there (its ready
  // event), and one whose inputs still to come all come from such ops on
  // this accelerator (ready as each finishes, when the accelerator is
  // free again). Transfers, other accelerators and the placement change
  // neither. (Queue order puts a producer of the same tenant before its
  // reader; one after it only leaves the reader out.)
  if (in_ahead_.size() < n_sim_) in_ahead_.resize(n_sim_, 0);
  const std::uint64_t stamp = ++ahead_stamp_;
  Nanos sum = 0, first = kNever;
  for (std::uint32_t i : queue_[a]) {
    if (is_tent_[i]) continue;  // the last placement's batch op
    if (key_[i] >> 48 > rank) break;
    if (ready_t_[i] > at_) continue;  // (its ready event, if any, is at ready_t_)
    bool sure = false, events = false;
    for (std::uint32_t x = ev_begin_[i]; x < ev_begin_[i + 1] && !sure; ++x) {
      events = true;
      sure = node_events_[x].kind == kReady;
    }
    if (!sure && !events) {  // every input to come is a simulated producer's
      sure = true;
      for (std::uint32_t e = nodes_[i].in_begin; e < nodes_[i].in_end && sure; ++e) {
        const std::uint32_t src = edges_[e].src;
        const std::uint32_t p = src & kNodeMask;
        if (p >= n_sim_) continue;  // a done producer's, there (no transfer event)
        sure = (src & kRemote) == 0 && in_ahead_[p] == stamp;
      }
    }
    if (!sure) continue;
    in_ahead_[i] = stamp;
    sum += nodes_[i].dur;  // (an issued op's time never changes between placements)
    first = std::min(first, ready_t_[i]);
  }
  // Before now_ an accelerator starts nothing until its last known
  // completion (dispatch()); an op started before now_ only ends later.
  memo = {epoch_, rank, first == kNever ? kBeforeAll : std::max(first, std::min(free_at_[a], now_)) + sum};
  return memo.floor;
}

bool GlobalSimulator::dominated_alone(std::span<const AccelId> accels, std::int64_t above, Nanos horizon,
                                      bool by_makespan) {
  if (!gmg_ || accels.size() != batch_.size()) return false;
  const std::size_t n_acc = gmg_->accels().size();
  for (AccelId a : accels)
    if (a >= n_acc) return false;  // place() says what is wrong
  if (est_set_)
    set_bound(*est_set_, accels, above, horizon, by_makespan);
  else
    set_bound(*est_virtual_, accels, above, horizon, by_makespan);
  bound_set_ = true;
  bound_accels_.assign(accels.begin(), accels.end());
  bound_above_ = above;
  bound_horizon_ = horizon;
  bound_by_makespan_ = by_makespan;
  return pruning_ && dominated_at_ == kBeforeAll;
}

// Whether the placement set_bound() was last called for loses once its
// inputs' transfers are counted (ext_ready_: per batch op, when its last
// such input can land), and the simulation could not have run out of
// memory before ending it as dominated.
template <typename Est>
bool GlobalSimulator::dominated_by_inputs(const Est& est, std::span<const AccelId> accels) {
  ext_ready_.assign(batch_.size(), kBeforeAll);
  bool any = false;
  for (const ExtInput& in : ext_inputs_) {
    const AccelId to = accels[in.k];
    if (in.from == to) continue;  // local: there since the producer finished
    // What start_transfer() gives it at the earliest start.
    const Nanos landed = in.ready + to_nanos(est.predict_transfer(in.from, to, in.bytes));
    if (landed > ext_ready_[in.k]) {
      ext_ready_[in.k] = landed;
      any = true;
    }
  }
  return any && dominated_from(kBeforeAll, ext_ready_.data()) == kBeforeAll && cannot_oom();
}

Nanos GlobalSimulator::away_floor(std::span<const AccelId> accels, Nanos horizon, bool by_makespan) {
  if (!gmg_ || horizon >= 0 || batch_.empty() || batch_.size() > kMaxPrunedBatch || accels.size() != batch_.size())
    return -1;
  // (Edges past the 64th count as local: the floor only gets lower.)
  std::uint64_t crossing = 0;
  for (std::size_t e = 0; e < batch_edges_.size() && e < 64; ++e)
    if (accels[batch_edges_[e].p] != accels[batch_edges_[e].k]) crossing |= std::uint64_t{1} << e;
  for (const FloorMemo& m : floor_memo_)
    if (m.crossing == crossing && m.by_makespan == by_makespan) return m.floor;
  const Nanos floor = est_set_ ? away_floor_with(*est_set_, crossing, by_makespan)
                               : away_floor_with(*est_virtual_, crossing, by_makespan);
  floor_memo_.push_back({crossing, by_makespan, floor});
  return floor;
}

template <typename Est>
Nanos GlobalSimulator::away_floor_with(const Est& est, std::uint64_t crossing, bool by_makespan) {
  const std::size_t nb = batch_.size(), n_types = gmg_->accels().type_count();
  if (dur_of_type_.size() != nb * n_types) dur_of_type_.assign(nb * n_types, kNoDur);
  // A transfer at the estimator's least time (none is known for a plain Estimator).
  auto least = [&](std::int64_t bytes) -> Nanos {
    if constexpr (std::is_same_v<Est, EstimatorSet>)
      return to_nanos(est.transfer_floor(static_cast<std::uint64_t>(bytes)));
    else
      return 0;
  };
  Nanos earliest[kMaxPrunedBatch];  // per batch op: when its inputs from done producers can land at the soonest
  std::fill(earliest, earliest + nb, at_);
  for (const ExtInput& in : ext_inputs_) earliest[in.k] = std::max(earliest[in.k], in.ready + least(in.bytes));
  Nanos finish[kMaxPrunedBatch];
  Nanos sum = 0, latest = 0;
  std::size_t e = 0;
  for (std::size_t k = 0; k < nb; ++k) {
    Nanos fastest = kNever;
    for (std::size_t type = 0; type < n_types; ++type)
      fastest = std::min(fastest, batch_op_nanos(est, k, static_cast<AccelTypeId>(type)));
    Nanos start = earliest[k];
    for (; e < batch_edges_.size() && batch_edges_[e].k == k; ++e) {
      const bool across = e < 64 && (crossing >> e & 1) != 0;
      start = std::max(start, finish[batch_edges_[e].p] + (across ? least(batch_edges_[e].bytes) : 0));
    }
    finish[k] = start + fastest;
    sum += finish[k] - at_;
    latest = std::max(latest, finish[k] - at_);
  }
  return by_makespan ? latest : sum;
}

// Whether no placement of this prepare can run any accelerator of the
// scope out of HBM: even if every simulated operator's output, workspace
// and retained state and every input it receives (the batch's anywhere)
// were held at once, each stays within its capacity. Once per prepare.
bool GlobalSimulator::cannot_oom() {
  if (oom_free_ >= 0) return oom_free_ == 1;
  most_used_.assign(base_used_.begin(), base_used_.end());
  auto holds = [&](const Node& n) {
    std::int64_t bytes = n.out + n.ws + n.ret;
    for (std::uint32_t e = n.in_begin; e < n.in_end; ++e) bytes += edges_[e].bytes;
    return bytes;
  };
  std::int64_t batch = 0;
  for (std::uint32_t i = 0; i < n_sim_; ++i) {
    // (A node's sizes and in-edges never change after prepare(): what a
    // placement restores is its state, not these.)
    if (is_tent_[i])
      batch += holds(nodes_[i]);
    else
      most_used_[nodes_[i].accel] += holds(nodes_[i]);
  }
  oom_free_ = 1;
  each_accel(most_used_.size(), [&](AccelId a) {
    if (most_used_[a] + batch > cap_[a]) oom_free_ = 0;
  });
  return oom_free_ == 1;
}

// Ghost nodes grouped by accelerator (counting sort), for focused
// placements to restore only their own.
void GlobalSimulator::index_ghosts() {
  const std::size_t n_acc = gmg_->accels().size();
  ghost_off_.assign(n_acc + 1, 0);
  // (A ghost's accelerator never changes: nodes_ gives it whether restored or not.)
  for (std::size_t g = n_sim_; g < nodes_.size(); ++g) ++ghost_off_[nodes_[g].accel + 1];
  for (std::size_t a = 0; a < n_acc; ++a) ghost_off_[a + 1] += ghost_off_[a];
  ghost_list_.resize(nodes_.size() - n_sim_);
  std::vector<std::uint32_t> fill(ghost_off_.begin(), ghost_off_.end() - 1);
  for (std::size_t g = n_sim_; g < nodes_.size(); ++g)
    ghost_list_[fill[nodes_[g].accel]++] = static_cast<std::uint32_t>(g);
  ghosts_indexed_ = true;
}

// The first time >= t at which the batch's summed finishes must exceed
// bound_sum_, or kNever. Each batch op's finish F_k is at least
// max(A_k, t + B_k): a started op's is known (A_k, no B_k); an op not yet
// started starts no earlier than t, at_, and its batch predecessors'
// finishes plus transfers, so B_k is its longest chain of unstarted batch
// ops and A_k the same chain from at_ or from started predecessors (and
// never before now_). With a horizon, a finish counts at most horizon_end_.
// The sum of those bounds is piecewise linear and nondecreasing in t; its
// breakpoints are walked in order.
Nanos GlobalSimulator::dominated_from(Nanos t, const Nanos* ext) const {
  constexpr Nanos kNone = INT64_MIN / 4;
  const std::size_t nb = batch_dur_.size();  // <= kMaxPrunedBatch
  Nanos a[kMaxPrunedBatch], b[kMaxPrunedBatch];
  std::size_t e = 0;
  const BatchEdge* edges = batch_edges_.data();
  const std::size_t n_edges = batch_edges_.size();
  for (std::size_t k = 0; k < nb; ++k) {
    if (batch_finish_[k] >= 0) {
      a[k] = batch_finish_[k];
      b[k] = kNone;
      while (e < n_edges && edges[e].k == k) ++e;
      continue;
    }
    const Nanos dur = batch_dur_[k];
    Nanos ak = ext && ext[k] != kBeforeAll ? std::max(now_, ext[k] + dur) : now_, bk = dur;
    for (; e < n_edges && edges[e].k == k; ++e) {
      const Nanos c = edges[e].x + dur;
      const std::uint32_t p = edges[e].p;
      ak = std::max(ak, a[p] + c);
      if (b[p] != kNone) bk = std::max(bk, b[p] + c);
    }
    a[k] = std::max(ak, at_ + bk);
    if (floored_) a[k] = std::max(a[k], batch_floor_[k] + dur);
    b[k] = bk;
  }
  // Times past now_ + a few days never occur: plain 64-bit sums suffice.
  const Nanos end = horizon_end_;
  if (bound_max_) {
    // The latest finish exceeds the bound once any one op's does: at once
    // for one already past it, else when t + B_k passes it (never for an
    // op whose finish counts at most the horizon's end, within the bound).
    const Nanos t0 = std::max(t, at_);
    Nanos first = kNever;
    for (std::size_t k = 0; k < nb; ++k) {
      const Nanos f = b[k] == kNone ? a[k] : std::max(a[k], t0 + b[k]);
      if ((f < end ? f : end) > bound_sum_) return t;
      if (b[k] != kNone && end > bound_sum_) first = std::min(first, bound_sum_ - b[k] + 1);
    }
    return first;
  }
  auto sum_at = [&](Nanos x) {
    Nanos sum = 0;
    for (std::size_t k = 0; k < nb; ++k) {
      const Nanos f = b[k] == kNone ? a[k] : std::max(a[k], x + b[k]);
      sum += f < end ? f : end;
    }
    return sum;
  };
  const Nanos t0 = std::max(t, at_);  // before at_ nothing of the batch moves
  Nanos f_prev = sum_at(t0);
  if (f_prev > bound_sum_) return t;
  Nanos breaks[2 * kMaxPrunedBatch];
  std::size_t n_breaks = 0, rising = 0;  // rising: ops whose bound grows with t for good (no horizon)
  for (std::size_t k = 0; k < nb; ++k) {
    if (b[k] == kNone) continue;
    if (a[k] - b[k] > t0) breaks[n_breaks++] = a[k] - b[k];
    if (end != kNever) {
      if (end - b[k] > t0) breaks[n_breaks++] = end - b[k];
    } else {
      ++rising;
    }
  }
  for (std::size_t i = 1; i < n_breaks; ++i)  // a handful: insertion sort
    for (std::size_t j = i; j > 0 && breaks[j] < breaks[j - 1]; --j) std::swap(breaks[j], breaks[j - 1]);
  Nanos prev = t0;
  for (std::size_t i = 0; i < n_breaks; ++i) {
    const Nanos x = breaks[i];
    if (x == prev) continue;
    const Nanos f = sum_at(x);
    if (f > bound_sum_) {
      const Nanos slope = (f - f_prev) / (x - prev);  // linear between breakpoints
      return prev + (bound_sum_ - f_prev) / slope + 1;
    }
    prev = x;
    f_prev = f;
  }
  if (rising == 0) return kNever;
  return prev + (bound_sum_ - f_prev) / static_cast<Nanos>(rising) + 1;
}

// Sizes the ready bitsets for the queues as they are: 64^levels_ >= the
// longest. Accelerators outside the scope get no words: nothing marks them
// dirty.
// Bitsets for the accelerators this placement simulates (the focus, else
// the scope); others keep stale offsets that nothing reads.
void GlobalSimulator::size_bitsets() {
  const std::size_t n_acc = queue_.size();
  auto each = [&](auto&& f) {
    if (focused_)
      for (AccelId a : focus_) f(a);
    else
      each_accel(n_acc, f);
  };
  std::size_t most = 0;
  each([&](AccelId a) { most = std::max(most, queue_[a].size()); });
  levels_ = 1;
  for (std::uint64_t span = 64; span < most; span *= 64) ++levels_;
  bits_off_.resize(n_acc * levels_);
  std::uint32_t words = 0;
  each([&](AccelId a) {
    std::uint64_t count = queue_[a].size();
    for (unsigned l = 0; l < levels_; ++l) {
      count = (count + 63) / 64;
      bits_off_[a * levels_ + l] = words;
      words += static_cast<std::uint32_t>(std::max<std::uint64_t>(count, 1));
    }
  });
  bits_.assign(words, 0);
}

template <bool kHbm>
inline void GlobalSimulator::alloc(AccelId a, std::int64_t bytes, Nanos t) {
  const std::int64_t used = used_[a] += bytes;
  if (used > r_.hbm_peak[a]) r_.hbm_peak[a] = used;
  if constexpr (kHbm) r_.hbm_timeline[a].push_back({t, used});
}

template <bool kHbm>
inline void GlobalSimulator::free(AccelId a, std::int64_t bytes, Nanos t) {
  const std::int64_t used = used_[a] -= bytes;
  if constexpr (kHbm) r_.hbm_timeline[a].push_back({t, used});
}

inline void GlobalSimulator::make_ready(std::uint32_t i) {
  const AccelId a = arrival_[i].accel;
  // Read when it starts: its queue entry and its record.
  __builtin_prefetch(&queue_[a][arrival_[i].rank]);
  __builtin_prefetch(&nodes_[i]);
  const std::uint32_t* off = &bits_off_[a * levels_];
  if (levels_ == 2) {  // up to 4,096 operators per accelerator
    const std::uint32_t r = arrival_[i].rank;
    bits_[off[0] + (r >> 6)] |= std::uint64_t{1} << (r & 63);
    bits_[off[1]] |= std::uint64_t{1} << (r >> 6);
    mark_dirty(a);
    return;
  }
  for (std::uint32_t r = arrival_[i].rank, l = 0; l < levels_; ++l, r >>= 6) {
    std::uint64_t& w = bits_[off[l] + (r >> 6)];
    const bool had = w != 0;
    w |= std::uint64_t{1} << (r & 63);
    if (had) break;  // the levels above already say this word has some
  }
  mark_dirty(a);
}

inline std::uint32_t GlobalSimulator::pop_ready(AccelId a) {
  const std::uint32_t* off = &bits_off_[a * levels_];
  if (levels_ == 2) {
    std::uint64_t& top = bits_[off[1]];
    const auto hi = static_cast<std::uint32_t>(std::countr_zero(top));
    std::uint64_t& w = bits_[off[0] + hi];
    const auto lo = static_cast<std::uint32_t>(std::countr_zero(w));
    w &= w - 1;
    if (w == 0) top &= top - 1;
    return queue_[a][hi * 64 + lo];
  }
  std::uint32_t rank = 0;
  for (unsigned l = levels_; l-- > 0;)
    rank = rank * 64 + static_cast<std::uint32_t>(std::countr_zero(bits_[off[l] + rank]));
  for (std::uint32_t r = rank, l = 0; l < levels_; ++l, r >>= 6) {
    std::uint64_t& w = bits_[off[l] + (r >> 6)];
    w &= ~(std::uint64_t{1} << (r & 63));
    if (w != 0) break;
  }
  return queue_[a][rank];
}

inline void GlobalSimulator::on_input_ready(std::uint32_t i, Nanos t) {
  if (--arrival_[i].pending != 0) return;
  // Issued after its inputs were done? (Ready times are never past the
  // snapshot's clock, so this is only looked at before it.)
  if (t < now_ && ready_t_[i] > t) {
    events_.push(ready_t_[i], kReady, i);
    return;
  }
  make_ready(i);
}

template <bool kHbm>
inline void GlobalSimulator::on_op_finish(std::uint32_t i, Nanos t) {
  Node& n = nodes_[i];
  const AccelId a = n.accel;
  running_[a] = kNotSimulated;
  mark_dirty(a);
  r_.finish[i] = t;
  r_.busy[a] += t - r_.start[i];
  ++r_.finished;
  free<kHbm>(a, n.ws, t);
  // Inputs: landed copies are freed; a retained state is taken over by its
  // reader; a producer's output goes with its last reader.
  for (std::uint32_t e = n.in_begin; e < n.in_end; ++e) {
    const SimEdge& edge = edges_[e];
    const std::uint32_t p = edge.src & kNodeMask;
    Node& pn = nodes_[p];
    if (edge.src & kRemote) free<kHbm>(a, edge.bytes, t);
    if ((edge.src & kRetained) && (pn.flags & kRetainedHeld)) {
      pn.flags = static_cast<Flag>(pn.flags & ~kRetainedHeld);
      free<kHbm>(pn.accel, pn.ret, t);
    }
    if (--pn.consumers == 0 && (pn.flags & (kKeepOutput | kOutputHeld)) == kOutputHeld) {
      pn.flags = static_cast<Flag>(pn.flags & ~kOutputHeld);
      free<kHbm>(pn.accel, pn.out, t);
    }
  }
  if (n.consumers == 0 && !(n.flags & kKeepOutput)) {
    n.flags = static_cast<Flag>(n.flags & ~kOutputHeld);
    free<kHbm>(a, n.out, t);
  }
  for (std::uint32_t k = n.out_begin; k < n.out_end; ++k) {
    const OutRef ref = out_refs_[k];
    if (ref.edge & kRemote) {  // an intent: the arbiter starts it
      const std::uint32_t x = ref.edge & ~kRemote;
      pending_transfers_.push_back({x, a, arrival_[ref.dst].accel});
      if (arbiter_) [[unlikely]]
        note_intent(x, t);
    } else {
      on_input_ready(ref.dst, t);
    }
  }
}

// For an arbiter: when the intent of edge x appeared, and its number (the
// order intents appeared in, as the backend numbers them).
void GlobalSimulator::note_intent(std::uint32_t x, Nanos since) {
  if (intents_of_.size() < edges_.size()) intents_of_.resize(edges_.size());
  intents_of_[x] = {since, intent_count_++};
}

OpId GlobalSimulator::op_of(std::uint32_t node) const {
  return node < n_sim_ ? r_.ops[node] : ghost_op_[node - n_sim_];
}

template <typename Est, bool kHbm, bool kTransfers>
inline void GlobalSimulator::start_transfer(const Est& est, const PendingTransfer& pt, Nanos t) {
  const std::uint32_t x = pt.edge;
  const SimEdge& edge = edges_[x];
  const std::uint32_t src = edge.src & kNodeMask;
  const AccelId from = pt.from, to = pt.to;
  if (used_[to] + edge.bytes > cap_[to] && !r_.oom) {
    r_.oom = OomEvent{t, to, r_.ops[edge.dst], true, used_[to] + edge.bytes, cap_[to]};
    if (stop_at_oom_) stopped_ = true;
  }
  alloc<kHbm>(to, edge.bytes, t);  // Recv allocates before Send moves
  send_busy_[from] = 1;
  recv_busy_[to] = 1;
  const Nanos finish = std::max(t + to_nanos(est.predict_transfer(from, to, edge.bytes)), now_);
  events_.push(finish, kTransferFinish, x);
  if constexpr (kTransfers) r_.transfers.push_back({op_of(src), r_.ops[edge.dst], from, to, edge.bytes, t, finish});
}

// Starts the next operator on every accelerator whose queue changed.
template <bool kHbm>
inline void GlobalSimulator::dispatch(Nanos t) {
  for (AccelId a : dirty_) {
    dirty_flag_[a] = 0;
    if (running_[a] != kNotSimulated || bits_[bits_off_[a * levels_ + levels_ - 1]] == 0) continue;
    if (t < now_ && t < free_at_[a]) {  // still busy with work the GMG saw finish (never past now_)
      events_.push(free_at_[a], kWake, a);
      continue;
    }
    const std::uint32_t i = pop_ready(a);
    Node& n = nodes_[i];
    // What its finish will read, fetched while it runs.
    __builtin_prefetch(edges_.data() + n.in_begin);
    __builtin_prefetch(out_refs_.data() + n.out_begin);
    const std::int64_t need = n.out + n.ws + n.ret;
    if (used_[a] + need > cap_[a] && !r_.oom) {
      r_.oom = OomEvent{t, a, r_.ops[i], false, used_[a] + need, cap_[a]};
      if (stop_at_oom_) stopped_ = true;
    }
    alloc<kHbm>(a, need, t);
    n.flags = static_cast<Flag>(n.flags | kOutputHeld | (n.ret > 0 ? kRetainedHeld : 0));
    running_[a] = i;
    r_.start[i] = t;
    // An operator started before now_ that the GMG has not seen finish
    // ends after now_, even past its prediction (a 61-token chunk at 20k
    // tokens of context ran 40 ms against 3 ms predicted): ending at now_, it
    // tied with an idle accelerator, and the tie sent new work behind it.
    const Nanos finish = t < now_ ? std::max(t + n.dur, now_ + 1) : t + n.dur;
    events_.push(finish, kOpFinish, i);
    if (pruning_ && (n.flags & kBatchOp)) [[unlikely]] {
      std::size_t k = 0;
      while (tnode_[k] != i) ++k;
      batch_finish_[k] = finish;
      dominated_at_ = dominated_from(t);
    }
  }
  dirty_.clear();
}

// The default rule (OldestFirstRule with its reservation), inline:
// oldest intent first, one transfer per source and per destination at a
// time, and while the oldest intent is blocked no younger one takes its
// source or destination. pending_transfers_ is in age order (intent time,
// then the order intents appeared), so its first entry is the oldest.
template <typename Est, bool kHbm, bool kTransfers>
inline void GlobalSimulator::arbitrate(const Est& est, Nanos t) {
  if (arbiter_) [[unlikely]] {
    arbitrate_with_plugin<Est, kHbm, kTransfers>(est, t);
    return;
  }
  std::size_t keep = 0;
  AccelId held_from = kNoAccel, held_to = kNoAccel;  // the blocked oldest intent's ports
  for (std::size_t k = 0; k < pending_transfers_.size(); ++k) {
    const PendingTransfer pt = pending_transfers_[k];
    if (send_busy_[pt.from] || recv_busy_[pt.to] || pt.from == held_from || pt.to == held_to) {
      if (k == 0) {
        held_from = pt.from;
        held_to = pt.to;
      }
      pending_transfers_[keep++] = pt;
      continue;
    }
    start_transfer<Est, kHbm, kTransfers>(est, pt, t);
  }
  pending_transfers_.resize(keep);
}

// Any other arbiter: hand it the pending intents (ids are intent numbers in
// this simulation, age-ordered like the backend's) and start what it picks,
// in its order. A pick out of range, repeated or on a busy port is skipped.
template <typename Est, bool kHbm, bool kTransfers>
void GlobalSimulator::arbitrate_with_plugin(const Est& est, Nanos t) {
  intents_.clear();
  for (const PendingTransfer& pt : pending_transfers_) {
    const IntentInfo& info = intents_of_[pt.edge];
    intents_.push_back({info.number, pt.from, pt.to, info.since, edges_[pt.edge].bytes});
  }
  picked_.clear();
  arbiter_->select(intents_, send_busy_, recv_busy_, picked_);
  for (const std::size_t k : picked_) {
    if (k >= intents_.size()) continue;  // ids are intent numbers; picks are positions
    const TransferIntent& in = intents_[k];
    if (send_busy_[in.src] || recv_busy_[in.dst] || pending_transfers_[k].edge == kNotSimulated) continue;
    const PendingTransfer pt = pending_transfers_[k];
    pending_transfers_[k].edge = kNotSimulated;  // started
    start_transfer<Est, kHbm, kTransfers>(est, pt, t);
  }
  std::erase_if(pending_transfers_, [](const PendingTransfer& p) { return p.edge == kNotSimulated; });
}

template <typename Est, bool kHbm, bool kTransfers>
void GlobalSimulator::advance(const Est& est, const SimOptions& opt) {
  if constexpr (kHbm)
    for (AccelId a = 0; a < used_.size(); ++a) r_.hbm_timeline[a].push_back({now_, used_[a]});
  const Nanos horizon_end = opt.horizon >= 0 ? now_ + opt.horizon : -1;
  bool first = true;
  while (!events_.empty() && !stopped_) {
    const Nanos t = events_.next_time();
    if (horizon_end >= 0 && t > horizon_end) break;
    if (t >= dominated_at_) {
      r_.dominated = true;
      break;
    }
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
          on_op_finish<kHbm>(ev.id, t);
          transfers_changed = true;
          break;
        case kTransferReady:
          pending_transfers_.push_back(
              {ev.id, nodes_[edges_[ev.id].src & kNodeMask].accel, arrival_[edges_[ev.id].dst].accel});
          transfers_changed = true;
          break;
        case kTransferFinish: {
          const SimEdge& edge = edges_[ev.id];
          send_busy_[nodes_[edge.src & kNodeMask].accel] = 0;
          recv_busy_[arrival_[edge.dst].accel] = 0;
          transfers_changed = true;
          on_input_ready(edge.dst, t);
          break;
        }
        case kWake:
          mark_dirty(ev.id);
          break;
      }
    }
    dispatch<kHbm>(t);
    if (transfers_changed && !pending_transfers_.empty()) arbitrate<Est, kHbm, kTransfers>(est, t);
  }
  if (focused_)
    for (AccelId a : focus_) r_.hbm_end[a] = used_[a];
  else if (!scope_.empty())
    for (AccelId a : scope_) r_.hbm_end[a] = used_[a];
  else
    r_.hbm_end = used_;
}

AccelId AccelComponents::find(AccelId a) {
  while (parent_[a] != a) {
    parent_[a] = parent_[parent_[a]];  // path halving
    a = parent_[a];
  }
  return a;
}

void AccelComponents::join(AccelId a, AccelId b) {
  a = find(a);
  b = find(b);
  if (a == b) return;
  if (size_[a] < size_[b]) std::swap(a, b);
  parent_[b] = a;
  size_[a] += size_[b];
}

void AccelComponents::build(const Gmg& gmg) {
  const std::size_t n = gmg.accels().size();
  parent_.resize(n);
  size_.assign(n, 1);
  for (AccelId a = 0; a < n; ++a) parent_[a] = a;
  mark_.assign(n, 0);
  const GmgView v = gmg.view();
  for (OpId id : v.issued) {
    const OpRow& op = v.ops[id];
    for (std::uint32_t e = op.first_in; e != kNoEdge; e = v.edges[e].next_in) {
      const OpRow& src = v.ops[v.edges[e].src];
      if (src.state != OpState::kUnscheduled) join(op.accel, src.accel);
    }
  }
  // Members grouped by root (counting sort), so a closure visits only the
  // components it takes.
  root_of_.resize(n);
  first_.assign(n + 1, 0);
  for (AccelId a = 0; a < n; ++a) ++first_[(root_of_[a] = find(a)) + 1];
  for (std::size_t r = 0; r < n; ++r) first_[r + 1] += first_[r];
  members_.resize(n);
  fill_.assign(first_.begin(), first_.end() - 1);
  for (AccelId a = 0; a < n; ++a) members_[fill_[root_of_[a]]++] = a;
  ops_of_.assign(n, 0);
  for (OpId id : v.issued) ++ops_of_[root_of_[v.ops[id].accel]];
}

namespace {

// Calls add(a) for every seed and for the accelerator of every issued or
// done producer of `ops`: what a closure must hold.
template <typename F>
void each_reached(const Gmg& gmg, std::span<const AccelId> seeds, std::span<const OpId> ops, F&& add) {
  for (AccelId a : seeds) add(a);
  const GmgView v = gmg.view();
  for (OpId id : ops)
    for (std::uint32_t e = v.ops[id].first_in; e != kNoEdge; e = v.edges[e].next_in) {
      const OpRow& src = v.ops[v.edges[e].src];
      if (src.state != OpState::kUnscheduled) add(src.accel);
    }
}

}  // namespace

void AccelComponents::closure_of(const Gmg& gmg, std::span<const AccelId> seeds, std::span<const OpId> ops,
                                 std::vector<AccelId>& out) const {
  // Few roots: a linear search instead of the shared marks.
  thread_local std::vector<AccelId> roots;
  roots.clear();
  auto add = [&](AccelId a) {
    const AccelId r = root_of_[a];
    if (std::find(roots.begin(), roots.end(), r) == roots.end()) roots.push_back(r);
  };
  each_reached(gmg, seeds, ops, add);
  out.clear();
  for (AccelId r : roots) out.insert(out.end(), members_.begin() + first_[r], members_.begin() + first_[r + 1]);
  std::sort(out.begin(), out.end());
}

std::size_t AccelComponents::closure(const Gmg& gmg, std::span<const AccelId> seeds, std::span<const OpId> ops,
                                     std::vector<AccelId>& out) {
  roots_.clear();
  auto add = [&](AccelId a) {
    const AccelId r = root_of_[a];
    if (!mark_[r]) {
      mark_[r] = 1;
      roots_.push_back(r);
    }
  };
  each_reached(gmg, seeds, ops, add);
  out.clear();
  std::size_t issued = 0, members = 0;
  for (AccelId r : roots_) {
    issued += ops_of_[r];
    members += first_[r + 1] - first_[r];
  }
  const std::size_t n = root_of_.size();
  if (8 * members >= n) {
    // Most of the cluster (a cluster-wide round's seeds are every
    // accelerator): one pass in id order instead of sorting thousands of
    // ids a round.
    for (AccelId a = 0; a < n; ++a)
      if (mark_[root_of_[a]]) out.push_back(a);
  } else {
    for (AccelId r : roots_) out.insert(out.end(), members_.begin() + first_[r], members_.begin() + first_[r + 1]);
    std::sort(out.begin(), out.end());
  }
  for (AccelId r : roots_) mark_[r] = 0;
  return issued;
}

}  // namespace slicesched
