module;
#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

module slicesched.engine.scheduler;

namespace slicesched {

constexpr std::size_t kNoCandidate = ~std::size_t{0};

// One reusable simulator (and arbiter) per worker thread, so what-if
// allocates nothing after warm-up.
struct Scheduler::Workers {
  struct Worker {
    GlobalSimulator sim;
    PluginPtr<TransferArbiter> arbiter;  // null: the default rule
    // `arbiter` is not the default rule: asked once, not once per
    // candidate (a plugin call each, 39 million on cluster-1000.toml).
    bool own_rule = false;
    Status error;                      // the factory's failure, if it failed
    std::uint64_t prepared_round = 0;  // the round `sim` is prepared for
  };
  tbb::enumerable_thread_specific<Worker> local;
  std::vector<Candidate> cands;   // the round's (schedule()), kept so the next round reuses their buffers
  std::vector<Outcome> outcomes;  // the same for their outcomes
  // Per round, on the engine thread: which accelerators the snapshot ties
  // together, and the round's closed scope (empty: the whole cluster).
  AccelComponents components;
  std::vector<AccelId> scope;
  std::vector<AccelId> seeds;
  std::vector<std::size_t> same_as;  // per candidate: an earlier one placing the batch the same way
  // Open addressing over placement hashes: (hash, first candidate placing
  // the batch that way); a node-based map spent more on its nodes than on
  // the look-ups at thousands of candidates a round. An entry is 8 bytes
  // (the hash's top half and the candidate's index), so a 7,500-candidate
  // round's table is 128 KB: its probes were mostly cache misses.
  struct Slot {
    std::uint32_t tag = 0;
    std::uint32_t first = kNoSlot;
  };
  static constexpr std::uint32_t kNoSlot = ~std::uint32_t{0};
  std::vector<Slot> first_of;
  std::vector<std::size_t> taken;      // the slots of first_of this round filled
  IssuedWorkspaces issued_ws;          // the round's, for Gmg::check_memory
  BatchMemory batch_mem;               // the same: what the round's batch reserves wherever it goes
  std::uint64_t round = 0;             // what-if calls so far (a worker's prepare is for one of them)
  std::vector<std::uint32_t> load;     // per accelerator: issued operators
  std::vector<std::size_t> order;      // candidates in the order they are simulated
  std::vector<std::uint32_t> busiest;  // per candidate: the most issued operators on one of its accelerators
  std::vector<std::size_t> first_at;   // the counting sort's slots, by load
  std::vector<std::uint8_t> holds;     // per accelerator: holds an input of the round's batch
};

// When a round's what-ifs fan out to oneTBB workers: enough candidates to
// amortize the hand-off (measured on 2 cores: 6 candidates of 70 operators
// ran faster serially, 15 of about 30 faster in parallel), and enough
// operator-placements (operators simulated x candidates) to be worth it.
constexpr std::size_t kParallelCandidates = 8;
constexpr std::size_t kParallelWork = 256;

Scheduler::Scheduler(PlacementPolicy& policy, PartitionSet& partitions, Estimator& estimator, SchedulerOptions opt)
    : policy_(policy),
      partitions_(partitions),
      est_(estimator),
      linear_(estimator.linear()),
      opt_(std::move(opt)),
      workers_(std::make_unique<Workers>()) {}

Scheduler::~Scheduler() = default;

// Follows successors inside the seed's instance (and instances attached to
// it) while every predecessor of an added op is issued, done or already in
// the batch, so the batch can be issued in order.
void Scheduler::limit_batches(InstanceId instance, std::size_t cap) {
  for (auto& [i, limit] : limited_)
    if (i == instance) {
      limit = std::max<std::size_t>(1, cap);
      return;
    }
  limited_.emplace_back(instance, std::max<std::size_t>(1, cap));
}

Batch Scheduler::collect(const Gmg& gmg, OpId seed, std::size_t cap) const {
  const OpRecord& s = gmg.op(seed);
  Batch b{{seed}, s.tmpl, s.tenant, s.priority};
  std::vector<OpId> frontier{seed};
  auto in_batch = [&](OpId id) { return std::find(b.ops.begin(), b.ops.end(), id) != b.ops.end(); };
  for (std::size_t head = 0; head < frontier.size() && b.ops.size() < cap; ++head) {
    for (std::uint32_t e = gmg.op(frontier[head]).first_out; e != kNoEdge; e = gmg.edge(e).next_out) {
      const OpId next = gmg.edge(e).dst;
      const OpRecord& n = gmg.op(next);
      if (n.state != OpState::kUnscheduled || n.tenant != s.tenant || in_batch(next)) continue;
      bool ready = true;
      for (std::uint32_t f = n.first_in; f != kNoEdge && ready; f = gmg.edge(f).next_in) {
        const OpId p = gmg.edge(f).src;
        ready = gmg.op(p).state != OpState::kUnscheduled || in_batch(p);
      }
      if (!ready) continue;
      b.ops.push_back(next);
      frontier.push_back(next);
      if (b.ops.size() >= cap) break;
    }
  }
  return b;
}

Status Scheduler::what_if(const Gmg& gmg, const Batch& batch, const std::vector<Candidate>& cands, Nanos now,
                          std::vector<Outcome>& out) {
  out.resize(cands.size());
  std::fill(out.begin(), out.end(), Outcome{});
  Workers& ws = *workers_;
  ++ws.round;
  gmg.issued_workspaces_into(ws.issued_ws);  // once a round, not once per candidate
  ws.batch_mem = gmg.batch_memory(batch.ops);
  // One scope for the round: the closure of every candidate's accelerators,
  // so all candidates are judged on the same part of the cluster.
  const std::size_t n_acc = gmg.accels().size();
  ws.scope.clear();
  std::size_t simulated = gmg.issued_count();  // operators each what-if simulates (before the batch)
  // Each candidate's what-if is then focused on its own component (its
  // accelerators and where the batch's inputs live): on a cluster-wide
  // round an idle pair's what-if touches a few GPUs, not the cluster.
  const bool focus = opt_.scoped && n_acc > 1;
  if (focus) {
    ws.components.build(gmg);
    ws.seeds.clear();
    for (const Candidate& c : cands)
      for (AccelId a : c.accel)
        if (a < n_acc) ws.seeds.push_back(a);  // (others are refused by check_issue below)
    simulated = ws.components.closure(gmg, ws.seeds, batch.ops, ws.scope);
    if (ws.scope.size() == n_acc) ws.scope.clear();  // all of it: the plain path
  }
  // A candidate that places the batch exactly as an earlier one does (a
  // one-op batch on a pair and on a quad) shares its outcome.
  // Found by hashing each placement, not by comparing every pair: a
  // cluster-wide partition set offers hundreds a round.
  ws.same_as.assign(cands.size(), kNoCandidate);
  std::size_t slots = 16;
  while (slots < 2 * cands.size()) slots *= 2;
  // Empty on entry: each round empties the slots it took (a few thousand)
  // rather than writing the whole table (256 KB at 7,500 candidates).
  if (ws.first_of.size() != slots) ws.first_of.assign(slots, {});
  std::size_t distinct = 0;
  for (std::size_t c = 0; c < cands.size(); ++c) {
    std::uint64_t h = 1469598103934665603ull;
    for (AccelId a : cands[c].accel) h = (h ^ a) * 1099511628211ull;
    const auto tag = static_cast<std::uint32_t>(h >> 32);
    for (std::size_t s = (h ^ (h >> 29)) & (slots - 1);; s = (s + 1) & (slots - 1)) {
      Workers::Slot& slot = ws.first_of[s];
      if (slot.first == Workers::kNoSlot) {
        slot = {tag, static_cast<std::uint32_t>(c)};
        ws.taken.push_back(s);
        ++distinct;
        break;
      }
      // (The placements themselves decide: the tag only filters.)
      if (slot.tag == tag && cands[slot.first].accel == cands[c].accel) {
        ws.same_as[c] = slot.first;
        break;
      }
    }
  }
  for (std::size_t s : ws.taken) ws.first_of[s].first = Workers::kNoSlot;
  ws.taken.clear();
  // With a mean-completion objective a what-if stops once it must lose to
  // the best feasible candidate its thread has seen (`Best`: that one's
  // summed completion in ns, < 0: none yet, and its index). The policy
  // gives ties to the lower index, so a candidate after the best one must
  // beat it strictly and one before it must at least tie it: a tie behind
  // the best is cut short at once (on an idle cluster, hundreds of
  // placements tie). Which candidates come out dominated depends on the
  // order they are simulated in; the pick does not.
  // With a makespan objective the same, on the batch's latest completion.
  const PlacementPolicy::Objective objective = policy_.objective();
  const bool prune = (opt_.prune || (opt_.prune_after >= 0 && now > opt_.prune_after)) &&
                     objective != PlacementPolicy::Objective::kNone;
  const bool by_makespan = objective == PlacementPolicy::Objective::kMakespan;
  // What issuing the batch needs wherever it goes (check_issue's other half
  // is per candidate, below).
  const bool batch_ok = gmg.check_batch(batch.ops).ok();
  struct Best {
    std::int64_t sum = -1;  // < 0: none yet (by_makespan: the latest completion, ns)
    std::size_t index = 0;
    // Candidate c is dominated when its objective must exceed this (< 0:
    // no best yet): a candidate after the best loses a tie, so reaching the
    // best's value is enough.
    std::int64_t above(std::size_t c) const { return sum < 0 ? -1 : index < c ? sum - 1 : sum; }
  };
  // `w`: this thread's worker, looked up once per chunk, not per candidate.
  auto one = [&](std::size_t c, Best& best, Workers::Worker& w) {
    if (ws.same_as[c] != kNoCandidate) return;
    Outcome& o = out[c];
    if (!batch_ok || cands[c].accel.size() != batch.ops.size()) {  // malformed candidate: infeasible
      o.why = Outcome::Why::kMalformed;
      return;
    }
    if (opt_.arbiter && !w.arbiter) {
      auto made = opt_.arbiter();
      if (!made.ok()) {
        w.error = made.status();
        return;
      }
      w.arbiter = std::move(made).value();
      w.own_rule = w.arbiter && !w.arbiter->uses_default_rule();
    }
    for (std::size_t i = 0; i < batch.ops.size(); ++i)
      if (!gmg.placeable(batch.ops[i], cands[c].accel[i])) {  // e.g. weights not resident
        o.why = Outcome::Why::kNotPlaceable;
        o.at_op = batch.ops[i];
        o.at_accel = cands[c].accel[i];
        return;
      }
    const std::int64_t above = prune ? best.above(c) : -1;
    // Cut before anything else when the batch alone loses: before the HBM
    // check once this thread has a best (and so is prepared for the round),
    // since most of a cluster-wide round's candidates end here. Either way
    // such a candidate is not the pick; only its reason (dominated, not out
    // of memory) depends on the order of the two checks.
    bool alone_checked = false;
    if (focus && above >= 0 && w.prepared_round == ws.round) {
      if (w.sim.dominated_alone(cands[c].accel, above, opt_.horizon, by_makespan)) {
        o.dominated = true;
        o.why = Outcome::Why::kDominated;
        return;
      }
      alone_checked = true;
    }
    // Whatever the what-if predicts, a placement the HBM account cannot
    // hold is not issued (the rule every policy obeys): do not simulate it.
    if (AccelId over = kNoAccel; !gmg.check_memory(ws.batch_mem, cands[c].accel, &over, &ws.issued_ws).ok()) {
      o.why = Outcome::Why::kOutOfMemory;
      o.at_accel = over;
      o.at_op = batch.ops.front();
      for (std::size_t i = 0; i < batch.ops.size(); ++i)
        if (cands[c].accel[i] == over) {
          o.at_op = batch.ops[i];
          break;
        }
      return;
    }
    // The batch is simulated as issued, without copying the GMG; what every
    // candidate shares is built once per round on each thread.
    if (w.prepared_round != ws.round) {
      if (linear_)
        w.sim.prepare(gmg, *linear_, batch.ops, now, ws.scope);
      else
        w.sim.prepare(gmg, est_, batch.ops, now, ws.scope);
      w.prepared_round = ws.round;
    }
    if (focus && above >= 0 && !alone_checked &&
        w.sim.dominated_alone(cands[c].accel, above, opt_.horizon, by_makespan)) {
      o.dominated = true;
      o.why = Outcome::Why::kDominated;
      return;
    }
    // Focused on its own component, which place() finds only when it
    // simulates (most placements that get this far are cut before).
    const SimulationResult& r = w.sim.place(cands[c].accel, {.horizon = opt_.horizon,
                                                             .arbiter = w.own_rule ? w.arbiter.get() : nullptr,
                                                             .dominated_above = above,
                                                             .dominated_by_makespan = by_makespan,
                                                             .focus_of = focus ? &ws.components : nullptr});
    if (r.dominated) {
      o.dominated = true;
      o.why = Outcome::Why::kDominated;
      return;
    }
    if (!r.feasible()) {
      o.why = Outcome::Why::kOutOfMemory;
      o.at_op = r.oom->op;
      o.at_accel = r.oom->accel;
      return;
    }
    o.feasible = true;
    o.why = Outcome::Why::kNone;
    o.start.resize(batch.ops.size());
    o.finish.resize(batch.ops.size());
    std::int64_t sum_ns = 0, worst_ns = 0;
    const Nanos end = opt_.horizon >= 0 ? now + opt_.horizon : r.end;
    for (std::size_t i = 0; i < batch.ops.size(); ++i) {
      const Nanos f = r.finish_of(batch.ops[i]);
      o.start[i] = r.start_of(batch.ops[i]);
      o.finish[i] = f;
      const Nanos done = (f < 0 ? end : f) - now;  // past the horizon: at its end
      sum_ns += done;
      worst_ns = std::max<std::int64_t>(worst_ns, done);
    }
    // From the exact sum, so equal sums are equal means and a smaller sum
    // never reads as a larger mean: the cut above matches the policy's pick.
    o.mean_completion_s = static_cast<double>(sum_ns) / 1e9 / static_cast<double>(batch.ops.size());
    // (The largest of the per-op seconds: the conversion is monotonic.)
    o.makespan_s = static_cast<double>(worst_ns) / 1e9;
    const std::int64_t key = by_makespan ? worst_ns : sum_ns;
    if (best.sum < 0 || key < best.sum || (key == best.sum && c < best.index)) best = {key, c};
  };
  // Worth a fan-out only when the round's simulations outweigh handing
  // them to another thread (a few microseconds). Pruned and focused, most
  // what-ifs end before simulating and the rest touch a few accelerators:
  // then the per-thread prepare() of the round's snapshot is the cost, and
  // a fan-out pays it once per thread (cluster-1000.toml: 56 s wall and
  // 93 s CPU fanned out, against 52 s and 51 s serial), so the round stays
  // on this thread.
  if (opt_.parallel && !(prune && focus) && distinct >= kParallelCandidates &&
      (simulated + batch.ops.size()) * distinct >= kParallelWork) {
    // One chunk per thread: a what-if takes microseconds, so finer tasks
    // cost more in stealing than they gain. A chunk no worker takes in time
    // runs here, so this is never slower than serial by more than a steal.
    const auto threads = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
    const std::size_t grain = (cands.size() + threads - 1) / threads;
    // With pruning, the least loaded candidate first, here: its outcome
    // seeds every chunk's best, so the chunks cut their ties and losers at
    // once instead of each finding a best of its own (on a cluster-wide
    // round that doubled the work).
    Best seed;
    std::size_t seeded = kNoCandidate;
    if (prune) {
      ws.load.assign(n_acc, 0);
      for (OpId id : gmg.issued_ops()) ++ws.load[gmg.op(id).accel];
      std::uint32_t least = ~std::uint32_t{0};
      for (std::size_t c = 0; c < cands.size(); ++c) {
        if (ws.same_as[c] != kNoCandidate) continue;
        std::uint32_t busiest = 0;
        for (AccelId a : cands[c].accel) busiest = std::max(busiest, a < n_acc ? ws.load[a] : 0);
        if (busiest < least) least = busiest, seeded = c;
      }
      if (seeded != kNoCandidate) one(seeded, seed, workers_->local.local());
    }
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, cands.size(), grain),
        [&](const tbb::blocked_range<std::size_t>& r) {
          Best best = seed;
          Workers::Worker& w = workers_->local.local();
          for (std::size_t c = r.begin(); c < r.end(); ++c)
            if (c != seeded) one(c, best, w);
        },
        tbb::simple_partitioner());
  } else if (prune) {
    // Least loaded first (by the busiest of its accelerators' issued
    // operators): the soonest-completing candidate is usually there, and
    // the sooner the best is seen the more of the others stop early. (The
    // order changes which come out dominated, never the pick.)
    ws.load.assign(n_acc, 0);
    for (OpId id : gmg.issued_ops()) ++ws.load[gmg.op(id).accel];
    // A counting sort by load, ties in index order: what a stable sort
    // gives, without its buffer and comparisons (loads are small counts,
    // and thousands of candidates a round share a handful of them).
    ws.busiest.resize(cands.size());
    std::uint32_t top = 0;
    for (std::size_t c = 0; c < cands.size(); ++c) {
      std::uint32_t busiest = 0;
      for (AccelId a : cands[c].accel) busiest = std::max(busiest, a < n_acc ? ws.load[a] : 0);
      ws.busiest[c] = busiest;
      top = std::max(top, busiest);
    }
    // Candidates on an accelerator that holds one of the batch's inputs
    // (where its producers ran) go first: the best is usually among them,
    // and once it is known every other candidate may be cut at once by the
    // round's floor (GlobalSimulator::away_floor: away from the inputs,
    // each is a transfer), without a what-if. Exact: a candidate cut so
    // would have been dominated (or out of memory); the pick is the same.
    ws.holds.assign(n_acc, 0);
    for (OpId id : batch.ops)
      for (std::uint32_t e = gmg.op(id).first_in; e != kNoEdge; e = gmg.edge(e).next_in) {
        const AccelId at = gmg.op(gmg.edge(e).src).accel;
        if (at < n_acc) ws.holds[at] = 1;
      }
    for (std::size_t c = 0; c < cands.size(); ++c) {
      bool near = false;
      for (AccelId a : cands[c].accel) near |= a < n_acc && ws.holds[a];
      if (!near) ws.busiest[c] += top + 1;
    }
    ws.first_at.assign(2 * (static_cast<std::size_t>(top) + 1) + 1, 0);
    for (std::uint32_t b : ws.busiest) ++ws.first_at[b + 1];
    for (std::size_t b = 1; b < ws.first_at.size(); ++b) ws.first_at[b] += ws.first_at[b - 1];
    ws.order.resize(cands.size());
    for (std::size_t c = 0; c < cands.size(); ++c) ws.order[ws.first_at[ws.busiest[c]]++] = c;
    Best best;
    Workers::Worker& w = workers_->local.local();
    for (std::size_t c : ws.order) {
      if (best.sum >= 0 && ws.busiest[c] > top && ws.same_as[c] == kNoCandidate) {
        // (This thread simulated the best, so its simulator is prepared.)
        const Nanos floor = w.sim.away_floor(cands[c].accel, opt_.horizon, by_makespan);
        if (floor >= 0 && floor > best.above(c)) {
          out[c].dominated = true;
          out[c].why = Outcome::Why::kDominated;
          ++stats_.cut_away;
          continue;
        }
      }
      one(c, best, w);
    }
  } else {
    Best best;
    Workers::Worker& w = workers_->local.local();
    for (std::size_t c = 0; c < cands.size(); ++c) one(c, best, w);
  }
  for (std::size_t c = 0; c < cands.size(); ++c)
    if (ws.same_as[c] != kNoCandidate) out[c] = out[ws.same_as[c]];
  stats_.simulations += distinct;
  for (std::size_t c = 0; c < cands.size(); ++c) stats_.dominated += ws.same_as[c] == kNoCandidate && out[c].dominated;
  for (const Workers::Worker& w : workers_->local)
    if (!w.error.ok()) return Status(w.error.code(), "scheduler: what-if arbiter: " + w.error.message());
  return Status::Ok();
}

void Scheduler::close_budget_period(Nanos now) {
  if (budget_full_since_ < 0) return;
  stats_.budget_held += std::max<Nanos>(0, now - budget_full_since_);
  budget_full_since_ = -1;
}

void Scheduler::keep_for(KeptSource source, std::int32_t top) {
  kept_source_ = std::move(source);
  kept_top_ = top;
  kept_loaded_ = false;
}

std::int64_t Scheduler::fill_kept_bytes(std::span<const AccelId> accels, std::int32_t priority) {
  if (!kept_source_ || kept_top_ <= priority) return 0;
  if (!kept_loaded_) {  // once a call, and only when a lower priority asks
    kept_.clear();
    kept_source_(kept_);
    std::sort(kept_.begin(), kept_.end(), [](const Kept& x, const Kept& y) { return x.accel < y.accel; });
    kept_loaded_ = true;
  }
  if (kept_.empty()) return 0;
  std::int64_t total = 0;
  for (AccelId a : accels) {
    if (a >= kept_bytes_.size()) kept_bytes_.resize(a + 1u, 0);
    if (kept_bytes_[a] != 0) continue;  // (an accelerator the pick names twice)
    auto it = std::lower_bound(kept_.begin(), kept_.end(), a, [](const Kept& k, AccelId x) { return k.accel < x; });
    for (; it != kept_.end() && it->accel == a; ++it)
      if (it->priority > priority) kept_bytes_[a] += it->bytes;
    total += kept_bytes_[a];
  }
  return total;
}

void Scheduler::clear_kept_bytes(std::span<const AccelId> accels) {
  for (AccelId a : accels)
    if (a < kept_bytes_.size()) kept_bytes_[a] = 0;
}

void Scheduler::count_oom_wait(const Gmg& gmg, const Batch& batch) {
  if (oom_waited_.insert(gmg.op(batch.ops.front()).instance).second) ++stats_.oom_waits;
}

namespace {

// Whether the batch continues an iteration some of whose operators are
// already issued (a predecessor of the same instance: in the frontier,
// every predecessor is). Such an iteration cannot be preempted, only
// finished, which frees its workspace.
bool continues_iteration(const Gmg& gmg, const Batch& batch) {
  const OpRecord& first = gmg.op(batch.ops.front());
  for (std::uint32_t e = first.first_in; e != kNoEdge; e = gmg.edge(e).next_in) {
    const Edge& edge = gmg.edge(e);
    if (!edge.retained && gmg.contains(edge.src) && gmg.op(edge.src).instance == first.instance) return true;
  }
  return false;
}

}  // namespace

Result<std::vector<OpId>> Scheduler::schedule(Gmg& gmg, Nanos now) {
  std::vector<OpId> issued;
  kept_loaded_ = false;  // (what runs changed since the last call)
  gmg.advance_clock(now);
  // A held period ends when the budget has room again or nothing waits.
  if (gmg.issued_count() < opt_.issued_budget || gmg.unscheduled_frontier().empty()) close_budget_period(now);
  // Batches the policy deferred this call: skip them, try lower priorities.
  std::vector<OpId> deferred;
  last_deferrals_.clear();
  // Accelerators a batch waits for HBM on, with its priority: a lower
  // priority may not take memory there in the same call (it would starve
  // the higher one; the engine preempts it instead).
  std::vector<std::pair<AccelId, std::int32_t>> reserved_for;
  // Limits whose iterations have nothing ready any more are let go.
  if (!limited_.empty())
    std::erase_if(limited_, [&](const std::pair<InstanceId, std::size_t>& l) {
      const auto& ready = gmg.unscheduled_frontier();
      return std::none_of(ready.begin(), ready.end(), [&](OpId id) { return gmg.op(id).instance == l.first; });
    });
  for (;;) {
    ++stats_.rounds;
    if (gmg.issued_count() >= opt_.issued_budget) {
      if (!gmg.unscheduled_frontier().empty()) {
        ++stats_.budget_full_calls;
        if (budget_full_since_ < 0) budget_full_since_ = now;
      }
      break;
    }
    // Highest priority first; among equals the oldest instance, then the
    // earliest op (ids are allocated in template order within an instance).
    OpId seed = kNoOp;
    for (OpId id : gmg.unscheduled_frontier()) {
      if (std::find(deferred.begin(), deferred.end(), id) != deferred.end()) continue;
      if (seed == kNoOp) {
        seed = id;
        continue;
      }
      const OpRecord &a = gmg.op(id), &b = gmg.op(seed);
      if (a.priority != b.priority ? a.priority > b.priority
                                   : (a.instance != b.instance ? a.instance < b.instance : a.tmpl_op < b.tmpl_op))
        seed = id;
    }
    if (seed == kNoOp) break;
    std::size_t cap = opt_.batch_cap;
    for (const auto& [instance, limit] : limited_)
      if (instance == gmg.op(seed).instance) cap = std::min(cap, limit);
    Batch batch = collect(gmg, seed, cap);
    ++stats_.batches;
    // Last round's candidates, overwritten: their buffers are reused.
    std::vector<Candidate>& cands = workers_->cands;
    partitions_.candidates_into(gmg, batch, cands);
    stats_.candidates += cands.size();
    std::vector<Outcome>& outcomes = workers_->outcomes;  // last round's, overwritten
    if (policy_.needs_simulation()) {
      if (Status s = what_if(gmg, batch, cands, now, outcomes); !s.ok()) return s;
    } else {
      outcomes.resize(cands.size());  // a static policy does not look at them
      std::fill(outcomes.begin(), outcomes.end(), Outcome{});
    }
    std::optional<std::size_t> pick = cands.empty() ? std::nullopt : policy_.choose(gmg, batch, cands, outcomes);
    // A pick onto a lost accelerator waits too: a static policy's pinned
    // instance is down until its accelerator is back.
    // Why a pick cannot be issued (empty: it can). Whatever the policy,
    // the pick must fit the HBM account: memory binds every policy alike.
    std::string waited;
    bool memory = false;
    std::vector<AccelId> short_of;  // accelerators whose HBM the batch waits for
    if (pick && *pick >= cands.size()) {
      ++stats_.invalid_picks;
      waited = "invalid pick: candidate " + std::to_string(*pick) + " of " + std::to_string(cands.size());
    } else if (pick && cands[*pick].accel.size() != batch.ops.size()) {
      ++stats_.invalid_picks;
      waited = "invalid pick: candidate '" + cands[*pick].label + "' places " +
               std::to_string(cands[*pick].accel.size()) + " operator(s) of " + std::to_string(batch.ops.size());
    } else if (pick) {
      for (std::size_t i = 0; i < batch.ops.size() && waited.empty(); ++i)
        if (!gmg.placeable(batch.ops[i], cands[*pick].accel[i])) {
          const AccelId a = cands[*pick].accel[i];
          // Weights are placed once, before the run, and never move: a
          // pick where they are not would wait for good (a static policy
          // pinned to a group without its model), and a run with a window
          // ended as if its requests had merely been slow.
          if (a < gmg.accels().size() && !gmg.is_down(a))
            return FailedPrecondition("placed " + gmg.op_name(batch.ops[i]) + " on " + gmg.accels()[a].name +
                                      ", which does not hold its weights (and never will: weights do not move); "
                                      "pin the tenant to accelerators that hold its model");
          waited = a >= gmg.accels().size() ? "unknown accelerator " + std::to_string(a)
                                            : "accelerator " + gmg.accels()[a].name + " is lost";
        }
      // Nor may it take what higher-priority sequences running there will
      // take next (kept): checked in the same pass, and apart only when
      // that is what it is short of.
      const std::span<const AccelId> at = cands[*pick].accel;
      const std::int64_t kept = waited.empty() ? fill_kept_bytes(at, batch.priority) : 0;
      const bool keep = kept > 0 && !continues_iteration(gmg, batch);
      AccelId over = kNoAccel;
      if (waited.empty())
        if (Status m =
                gmg.check_memory(batch.ops, at, &over, false, nullptr,
                                 keep ? std::span<const std::int64_t>(kept_bytes_) : std::span<const std::int64_t>());
            !m.ok()) {
          count_oom_wait(gmg, batch);
          if (keep) m = gmg.check_memory(batch.ops, at, &over);
          if (m.ok()) {
            const AccelId a = over < gmg.accels().size() ? over : at.front();
            waited = "HBM on " + gmg.accels()[a].name +
                     " is kept for the next iterations of higher-priority sequences running there (" +
                     std::to_string(kept_bytes_[a]) + " bytes of KV cache)";
          } else {
            memory = true;
            short_of.push_back(over);
            waited = m.message();
          }
        }
      if (kept > 0) clear_kept_bytes(at);  // (filled, whether or not it binds)
      // Except the rest of an iteration under way: held back, it keeps its
      // memory for good (an iteration is preempted only before it starts),
      // and a batch of one operator at a time (batch_cap = 1) deadlocked.
      const bool under_way = waited.empty() && !reserved_for.empty() && continues_iteration(gmg, batch);
      for (std::size_t i = 0; i < batch.ops.size() && waited.empty() && !under_way; ++i)
        for (const auto& [a, priority] : reserved_for)
          if (cands[*pick].accel[i] == a && batch.priority < priority) {
            // Not short itself: it waits (counted), the higher one preempts.
            count_oom_wait(gmg, batch);
            waited = "HBM on " + gmg.accels()[a].name + " is kept for a higher-priority batch that waits for it";
            break;
          }
    }
    if (!pick && policy_.needs_simulation() && !cands.empty()) {
      // Deferred because nothing fits: every candidate not cut short is
      // out of memory, or cannot take the batch at all (an accelerator lost
      // or without the weights: waiting for it is no alternative, and a
      // batch that waited on it never preempted what filled the others).
      std::size_t oom = 0, stopped = 0;
      for (const Outcome& o : outcomes) {
        oom += o.why == Outcome::Why::kOutOfMemory;
        stopped += o.dominated || o.why == Outcome::Why::kNotPlaceable || o.why == Outcome::Why::kMalformed;
        if (o.why == Outcome::Why::kOutOfMemory && o.at_accel != kNoAccel &&
            std::find(short_of.begin(), short_of.end(), o.at_accel) == short_of.end())
          short_of.push_back(o.at_accel);
      }
      if (oom > 0 && oom + stopped == cands.size()) {
        memory = true;
        count_oom_wait(gmg, batch);
      } else {
        short_of.clear();
      }
    }
    // The candidates the batch could have gone to: any a simulating policy
    // was offered, else the static policy's pick.
    auto considered = [&](std::size_t c) {
      return cands[c].accel.size() == batch.ops.size() && (!pick || c == *pick || policy_.needs_simulation());
    };
    // Whether every operator may go where candidate c puts it, down or not.
    auto holds_weights = [&](std::size_t c) {
      for (std::size_t i = 0; i < batch.ops.size(); ++i)
        if (!gmg.holds_weights(batch.ops[i], cands[c].accel[i])) return false;
      return true;
    };
    // Does not fit even with the cluster to itself: waiting will not help.
    // Only candidates that can take the batch count: an accelerator with
    // room to spare but without the model's weights is no place to wait for.
    bool never = false;
    if (memory) {
      never = true;
      for (std::size_t c = 0; c < cands.size() && never; ++c)
        if (considered(c) && holds_weights(c)) never = !gmg.check_memory(batch.ops, cands[c].accel, nullptr, true).ok();
    }
    if (memory)
      for (AccelId a : short_of) reserved_for.push_back({a, batch.priority});
    if (!pick || !waited.empty()) {
      if (on_decision_)
        on_decision_(gmg, {now, &batch, cands, outcomes, policy_.needs_simulation(), std::nullopt, waited,
                           cands.empty() ? nullptr : &policy_});
      ++stats_.deferred;
      deferred.push_back(seed);
      // Only a lost accelerator could take it: some candidate needs one,
      // and none of the others holds the batch even alone.
      bool any_down = false, live_fit = false, live_placeable = false;
      auto down_in = [&](std::size_t c) {
        for (AccelId a : cands[c].accel)
          if (a < gmg.accels().size() && gmg.is_down(a)) return true;
        return false;
      };
      for (std::size_t c = 0; c < cands.size() && !any_down && gmg.any_down(); ++c)
        any_down = considered(c) && down_in(c);
      for (std::size_t c = 0; c < cands.size() && any_down && !live_fit; ++c) {
        if (!considered(c) || down_in(c)) continue;
        bool placeable = true;
        for (std::size_t i = 0; i < batch.ops.size() && placeable; ++i)
          placeable = gmg.placeable(batch.ops[i], cands[c].accel[i]);
        live_placeable = live_placeable || placeable;
        live_fit = placeable && gmg.check_memory(batch.ops, cands[c].accel, nullptr, true).ok();
      }
      Deferral d{.tenant = batch.tenant,
                 .ops = batch.ops.size(),
                 .candidates = cands.size(),
                 .simulated = policy_.needs_simulation(),
                 .priority = batch.priority,
                 .memory = memory,
                 .never = never,
                 .lost = any_down && !live_fit,
                 .live_placeable = live_placeable,
                 .reason = std::move(waited),
                 .instance = gmg.op(batch.ops.front()).instance,
                 .short_of = std::move(short_of)};
      // Dominated candidates were stopped early, not found not to fit.
      if (d.simulated)
        for (const Outcome& o : outcomes) {
          d.infeasible += o.why == Outcome::Why::kOutOfMemory;
          d.unplaceable += o.why == Outcome::Why::kNotPlaceable || o.why == Outcome::Why::kMalformed;
        }
      last_deferrals_.push_back(std::move(d));
      continue;
    }
    for (std::size_t i = 0; i < batch.ops.size(); ++i) {
      if (Status s = gmg.issue(batch.ops[i], cands[*pick].accel[i], now); !s.ok())
        return Status(s.code(), "scheduler: candidate '" + cands[*pick].label + "': " + s.message());
      issued.push_back(batch.ops[i]);
    }
    if (on_decision_) on_decision_(gmg, {now, &batch, cands, outcomes, policy_.needs_simulation(), pick, {}, &policy_});
  }
  return issued;
}

}  // namespace slicesched
