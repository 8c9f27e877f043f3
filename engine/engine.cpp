module;
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

module slicesched.engine;

namespace slicesched {

namespace {
// The longest an idle engine with an open inbox waits before looking again.
constexpr Nanos kInboxWait = 500'000'000;

// Drops accelerator `name`'s entry ("NAME at T s") from `lost`, the
// ", "-joined list of the accelerators lost now: it came back, or is
// lost again (then listed anew, at its new time).
void drop_lost(std::string& lost, const std::string& name) {
  std::string kept;
  for (std::size_t pos = 0; pos < lost.size();) {
    std::size_t end = lost.find(", ", pos);
    if (end == std::string::npos) end = lost.size();
    const std::string_view entry(lost.data() + pos, end - pos);
    if (!entry.starts_with(name + " at ")) kept += (kept.empty() ? "" : ", ") + std::string(entry);
    pos = end + 2;
  }
  lost = std::move(kept);
}

// What one run() hooks into the tenants and the scheduler for its
// observers (request events, decisions) and the span it hands them: set
// when made, cleared when it goes, so that whatever way run() ends nothing
// keeps pointing into its frame.
class Watching {
 public:
  Watching(std::vector<Tenant>& tenants, Scheduler& scheduler, std::span<EngineObserver* const>& slot,
           std::span<EngineObserver* const> observers, std::vector<RequestEvent>& events,
           Scheduler::DecisionFn on_decision, Scheduler::KeptSource kept, std::int32_t top)
      : tenants_(tenants), scheduler_(scheduler), slot_(slot) {
    slot_ = observers;
    scheduler_.keep_for(std::move(kept), top);
    const bool iterations =
        std::any_of(observers.begin(), observers.end(), [](const EngineObserver* o) { return o->iterations(); });
    for (Tenant& t : tenants_) t.set_events(observers.empty() ? nullptr : &events, iterations);
    if (!observers.empty()) scheduler_.on_decision(std::move(on_decision));
  }
  ~Watching() {
    for (Tenant& t : tenants_) t.set_events(nullptr, false);
    scheduler_.on_decision({});
    scheduler_.keep_for({}, INT32_MIN);
    slot_ = {};
  }
  Watching(const Watching&) = delete;
  Watching& operator=(const Watching&) = delete;

 private:
  std::vector<Tenant>& tenants_;
  Scheduler& scheduler_;
  std::span<EngineObserver* const>& slot_;
};
}  // namespace

Engine::Engine(Gmg& gmg, std::vector<Tenant>& tenants, Scheduler& scheduler, Estimator& estimator, Backend& backend,
               EngineOptions opt)
    : gmg_(gmg), tenants_(tenants), scheduler_(scheduler), est_(estimator), backend_(backend), opt_(opt) {}

// Applies the faults due by `now`: the GMG stops placing onto a lost
// accelerator, the backend fails what it loses, and the feedback flows as
// any completion does.
Status Engine::apply_faults(Nanos now) {
  std::vector<Feedback> lost;
  for (; next_fault_ < opt_.faults.size() && opt_.faults[next_fault_].at <= now; ++next_fault_) {
    const FaultEvent& f = opt_.faults[next_fault_];
    if (f.accel >= gmg_.accels().size())
      return InvalidArgument("engine: a fault names accelerator " + std::to_string(f.accel) + ", which does not exist");
    if (!f.down) {
      gmg_.set_down(f.accel, false);
      if (Status s = backend_.restore_accelerator(f.accel); !s.ok()) return s;
      drop_lost(lost_names_, gmg_.accels()[f.accel].name);
      for (EngineObserver* o : observers_) o->on_accelerator(f.accel, false, now, -1);
      continue;
    }
    if (Status s = lose(f.accel, now); !s.ok()) return s;
  }
  // Every accelerator down and none coming back: the same end as when the
  // backend finds them all gone.
  if (gmg_.down_count() == gmg_.accels().size() &&
      std::none_of(opt_.faults.begin() + static_cast<std::ptrdiff_t>(next_fault_), opt_.faults.end(),
                   [](const FaultEvent& f) { return !f.down; }))
    return all_lost(now);
  return Status::Ok();
}

Result<bool> Engine::fail_lost(Nanos now) {
  if (!gmg_.any_down() || returns_pending()) return false;
  for (const Deferral& d : scheduler_.last_deferrals()) {
    if (!d.lost) continue;
    if (cut_for_memory_.contains(d.instance)) {
      // Cut because it fit nowhere even alone, lost accelerators included:
      // out of memory, whatever was lost since.
      if (auto f = fail_as_oom(
              d, "out of memory: its iteration needs more HBM than any of its placements has beside the weights", now,
              true);
          !f.ok() || f.value())
        return f;
      continue;
    }
    const bool shed = d.live_placeable && tenants_[d.tenant].can_shed(d.instance, gmg_);
    if (d.live_placeable && !shed && d.ops > 1) {
      // The accelerators left hold the weights but not this batch even
      // alone (it fit only on, or spread over, one now lost): a few
      // operators at a time may fit there, each layer group's KV cache on
      // another accelerator left.
      scheduler_.limit_batches(d.instance, d.ops / 2);
      cut_for_loss_.insert(d.instance);
      return true;
    }
    if (shed) {
      // As with one that fits nowhere, fewer sequences (a smaller KV
      // budget) may fit there. One sequence that still cannot fails below,
      // as the loss's.
      if (auto f = fail_as_oom(d, "out of memory on what is left (lost: " + lost_names_ + ")", now, false);
          !f.ok() || f.value())
        return f;
    }
    if (auto f = fail_as_lost(d, now); !f.ok() || f.value()) return f;
  }
  return false;
}

Result<bool> Engine::fail_as_oom(const Deferral& d, const std::string& why, Nanos now, bool started_too) {
  auto n = tenants_[d.tenant].fail_out_of_memory(d.instance, why, gmg_, now, started_too);
  if (!n.ok())
    return Status(n.status().code(), "tenant '" + tenants_[d.tenant].spec().name + "': " + n.status().message());
  if (!n.value().acted) return false;
  backend_.drop_iteration(d.instance);  // its plan never runs
  oom_failed_ += n.value().failed;
  flush_requests();
  return true;
}

Result<bool> Engine::fail_as_lost(const Deferral& d, Nanos now) {
  auto n = tenants_[d.tenant].fail_instance(d.instance, "no placement left that can run it (lost: " + lost_names_ + ")",
                                            gmg_, now);
  if (!n.ok())
    return Status(n.status().code(), "tenant '" + tenants_[d.tenant].spec().name + "': " + n.status().message());
  if (n.value() == 0) return false;
  backend_.drop_iteration(d.instance);  // its plan never runs
  fault_failed_ += n.value();
  flush_requests();
  return true;
}

Nanos Engine::return_at(AccelId a) const {
  const auto it = std::find_if(opt_.faults.begin() + static_cast<std::ptrdiff_t>(next_fault_), opt_.faults.end(),
                               [&](const FaultEvent& f) { return !f.down && f.accel == a; });
  return it == opt_.faults.end() ? -1 : it->at;
}

bool Engine::returns_pending() const {
  return std::any_of(
      opt_.faults.begin() + static_cast<std::ptrdiff_t>(next_fault_), opt_.faults.end(),
      [&](const FaultEvent& f) { return !f.down && f.accel < gmg_.accels().size() && gmg_.is_down(f.accel); });
}

Status Engine::all_lost(Nanos now) {
  const std::string why = "every accelerator is lost (" + lost_names_ + "); nothing is left to run on";
  for (Tenant& t : tenants_) fault_failed_ += t.fail_unfinished(why, now) + t.fail_arrivals(why);
  flush_requests();
  if (opt_.inbox) opt_.inbox->close();
  return Aborted(why);
}

Status Engine::lose(AccelId a, Nanos now) {
  if (a >= gmg_.accels().size())
    return InvalidArgument("engine: the backend lost accelerator " + std::to_string(a) + ", which does not exist");
  for (Tenant& t : tenants_) t.on_accelerator_lost(a, gmg_);
  gmg_.set_down(a, true);  // (a fault on one already down is the backend's to refuse)
  std::vector<Feedback> lost;
  if (Status s = backend_.fail_accelerator(gmg_, a, lost); !s.ok()) return s;
  drop_lost(lost_names_, gmg_.accels()[a].name);
  if (!lost_names_.empty()) lost_names_ += ", ";
  lost_names_ += gmg_.accels()[a].name + " at " + std::to_string(static_cast<double>(now) / 1e9) + " s";
  for (EngineObserver* o : observers_) o->on_accelerator(a, true, now, return_at(a));
  for (const Feedback& x : lost)
    if (Status s = apply(x); !s.ok()) return s;
  flush_requests();
  return Status::Ok();
}

Status Engine::take_inbox(Nanos now, int stop) {
  if (stop >= 1 && !opt_.inbox->closed()) opt_.inbox->close();
  const bool open = !opt_.inbox->closed();
  for (Tenant& t : tenants_) t.set_open(open);
  for (LiveRequest& r : opt_.inbox->take()) {
    if (r.tenant >= tenants_.size())
      return InvalidArgument("engine: a live request names tenant " + std::to_string(r.tenant) + " of " +
                             std::to_string(tenants_.size()));
    tenants_[r.tenant].submit(std::move(r), now);
  }
  return Status::Ok();
}

void Engine::flush_requests() {
  for (const RequestEvent& e : request_events_)
    for (EngineObserver* o : observers_) o->on_request(e, tenants_[e.tenant].records()[e.request]);
  request_events_.clear();
}

void Engine::on_decision(const Gmg& gmg, const Decision& d) {
  if (d.pick) {
    const Outcome& o = d.outcomes[*d.pick];
    for (std::size_t i = 0; i < d.batch->ops.size(); ++i) {
      const OpId op = d.batch->ops[i];
      if (op >= issued_.size()) issued_.resize(std::max<std::size_t>(op + 1, issued_.size() * 2));
      issued_[op] = {d.now, o.feasible ? o.start[i] : -1, o.feasible ? o.finish[i] : -1};
    }
  }
  for (EngineObserver* x : observers_) x->on_decision(gmg, d);
}

Status Engine::apply(const Feedback& f) {
  for (EngineObserver* o : observers_) o->on_feedback(gmg_, f);
  if (f.start >= 0 && !observers_.empty()) {
    const OpRecord& r = gmg_.op(f.op);
    RunRecord rec{.op = f.op,
                  .tenant = r.tenant,
                  .start = f.start,
                  .finish = f.t,
                  .kind = r.kind,
                  .failed = f.failed,
                  .lost = f.lost};
    if (f.kind == Feedback::Kind::kTransfer) {
      rec.accel = f.from;
      rec.to = f.to;
    } else {
      rec.accel = r.accel;
      if (f.op < issued_.size()) {
        rec.issued = issued_[f.op].at;
        rec.predicted_start = issued_[f.op].predicted_start;
        rec.predicted_finish = issued_[f.op].predicted_finish;
      }
    }
    for (EngineObserver* o : observers_) o->on_finish(rec);
  }
  if (f.kind == Feedback::Kind::kTransfer) {
    if (Status s = gmg_.complete_transfer(f.src, f.op, f.t); !s.ok()) return s;
    return est_.observe_transfer(f.from, f.to, static_cast<std::uint64_t>(f.bytes),
                                 static_cast<double>(f.measured) / 1e9);
  }
  const OpRecord& r = gmg_.op(f.op);
  lost_ops_ += f.lost;
  const OpKindId kind = r.kind;
  const AccelTypeId type = gmg_.accels().type(r.accel);
  const std::uint32_t tenant = r.tenant;
  if (Status s = gmg_.complete(f.op, f.t, f.measured); !s.ok()) return s;
  // Lost, it made no state: what it reserved to retain goes now. (Its lane
  // drops the iteration when the last operator's loss arrives, and releases
  // only what is done by then: a lost operator's feedback after it left its
  // KV cache held on the accelerator for good, and requests that fit failed
  // out of memory there after it came back; an outside probe.)
  if (f.lost && r.retained_held && !r.retained_attached)
    if (Status s = gmg_.release_retained(f.op); !s.ok()) return s;
  // A failed operator's time says nothing about the model.
  if (!f.failed)
    if (Status s = est_.observe_op(kind, type, gmg_.features(f.op), static_cast<double>(f.measured) / 1e9); !s.ok())
      return s;
  tenants_[tenant].on_op_done(f, gmg_);
  return Status::Ok();
}

std::string Engine::deadlock_cause() const {
  const std::vector<Deferral>& deferred = scheduler_.last_deferrals();
  if (deferred.empty()) return "the backend holds work it does not run";
  auto tenant = [&](const Deferral& d) { return "tenant '" + tenants_[d.tenant].spec().name + "'"; };
  // A pick that could not be issued says why itself.
  for (const Deferral& d : deferred)
    if (!d.reason.empty()) return tenant(d) + ": " + d.reason;
  // A batch that fits on no candidate with nothing else running never
  // will: that is the cause, whatever the policy did with the others.
  for (const Deferral& d : deferred)
    if (d.simulated && d.candidates > 0 && d.infeasible == d.candidates)
      return tenant(d) + ": its batch of " + std::to_string(d.ops) + " operator(s) exceeds the free HBM of all " +
             std::to_string(d.candidates) + " candidate placement(s) (its KV cache cannot fit anywhere)";
  for (const Deferral& d : deferred)
    if (d.simulated && d.candidates > 0 && d.unplaceable > 0 && d.infeasible + d.unplaceable == d.candidates)
      return tenant(d) + ": no candidate placement can take its batch of " + std::to_string(d.ops) +
             " operator(s): " + std::to_string(d.unplaceable) +
             " name an accelerator that is unknown, lost or lacks the weights" +
             (d.infeasible ? ", " + std::to_string(d.infeasible) + " exceed the free HBM" : std::string());
  for (const Deferral& d : deferred)
    if (d.candidates == 0) return tenant(d) + ": the partition sets offer no placement for its batch";
  return "the placement policy deferred every batch: " + std::to_string(deferred.size()) + " in the last round, " +
         std::to_string(scheduler_.stats().deferred) + " deferral(s) in all";
}

// Per accelerator, whether an operator is issued there: where none is,
// nothing will free memory by finishing (the rest of the cluster may run).
std::vector<char> Engine::issued_on() const {
  std::vector<char> busy(gmg_.accels().size(), 0);
  for (OpId op : gmg_.issued_ops())
    if (const AccelId a = gmg_.op(op).accel; a < busy.size()) busy[a] = 1;
  return busy;
}

Status Engine::copy_to_host(Tenant& t) {
  for (const Tenant::HostCopy& c : t.take_host_copies()) {
    if (c.kv.empty()) {
      backend_.forget_swapped(t.id(), c.seqs);
      continue;
    }
    if (Status s = backend_.swap_out(gmg_, t.id(), c.kv, c.seqs); !s.ok())
      return Status(s.code(), "tenant '" + t.spec().name + "': swapping out: " + s.message());
  }
  return Status::Ok();
}

Result<bool> Engine::preempt(bool stalled) {
  const std::vector<Deferral>& deferred = scheduler_.last_deferrals();
  bool waiting = false;
  std::int32_t top = 0;  // the highest priority waiting for memory
  for (const Deferral& d : deferred)
    if (d.memory) {
      top = waiting ? std::max(top, d.priority) : d.priority;
      waiting = true;
    }
  if (!waiting) return false;
  struct Victim {
    std::uint32_t tenant = 0;
    std::int32_t priority = 0;
    InstanceId instance = 0;
    bool own = false;  // of the tenant whose batch waits
  };
  std::optional<Victim> victim;
  const std::vector<char> busy = stalled ? std::vector<char>() : issued_on();  // (stalled: nothing is)
  auto consider = [&](std::uint32_t t, InstanceId instance, bool own = false) {
    const std::int32_t p = tenants_[t].spec().priority;
    if (!victim || p < victim->priority || (p == victim->priority && instance > victim->instance))
      victim = Victim{t, p, instance, own};
  };
  for (std::uint32_t t = 0; t < tenants_.size(); ++t) {
    if (stalled) {
      if (auto i = tenants_[t].preemptable(gmg_)) consider(t, *i);
      continue;
    }
    // A lower priority than the waiting batch's, where it is short; on an
    // accelerator it is short of where nothing runs that could free memory,
    // any priority. (Equal-priority caches holding each other's room would
    // wait forever; and waiting until every accelerator a batch is short of
    // goes idle let one busy GPU keep seven full idle ones waiting: 18-GiB
    // H100s ran 20 % busy, tests/cli/memory_stall.cmake.)
    for (const Deferral& d : deferred) {
      if (!d.memory) continue;
      const bool lower = d.priority == top && tenants_[t].spec().priority < top;
      for (AccelId a : d.short_of)
        if (lower || !busy[a])
          if (auto i = tenants_[t].preemptable(gmg_, a)) consider(t, *i, t == d.tenant);
    }
  }
  if (!victim) return false;
  // One lane of a tenant preempted for another: it admitted more than fits.
  if (victim->own) tenants_[victim->tenant].learn_kv_budget();
  auto n = tenants_[victim->tenant].preempt(victim->instance, gmg_);
  if (!n.ok())
    return Status(n.status().code(), "tenant '" + tenants_[victim->tenant].spec().name + "': " + n.status().message());
  if (n.value() > 0) backend_.drop_iteration(victim->instance);  // its plan never runs
  // (After the drop: a sequence back from host memory whose plan it was is
  // there again, and stays.)
  if (Status s = copy_to_host(tenants_[victim->tenant]); !s.ok()) return s;
  flush_requests();
  return n.value() > 0;
}

Result<bool> Engine::fail_out_of_memory(Nanos now, OomFail which) {
  for (const Deferral& d : scheduler_.last_deferrals()) {
    if (!d.memory) continue;
    if (which == OomFail::kNever && !d.never) continue;
    // A batch of several operators that never fits as collected, where no
    // sequence can be shed (one sequence, or an iteration under way): a few
    // operators at a time may fit (each layer group's KV cache on another
    // accelerator). Which operators a batch collects depends on what is
    // issued already, so failing here failed a request only sometimes.
    if (d.never && d.ops > 1 && !tenants_[d.tenant].can_shed(d.instance, gmg_)) {
      scheduler_.limit_batches(d.instance, d.ops / 2);
      cut_for_memory_.insert(d.instance);
      return true;
    }
    // Cut smaller because only a lost accelerator held it whole, and still
    // short: it fails as the loss's, not as memory (it would have run there).
    if (which == OomFail::kAny && cut_for_loss_.contains(d.instance)) {
      if (auto f = fail_as_lost(d, now); !f.ok() || f.value()) return f;
      continue;
    }
    const std::string why = d.never
                                ? "out of memory: its iteration needs more HBM than any of its " +
                                      std::to_string(d.candidates) + " candidate placement(s) has beside the weights"
                            : d.reason.empty() ? "out of memory: its iteration fits the HBM of none of its " +
                                                     std::to_string(d.candidates) + " candidate placement(s)"
                                               : "out of memory: " + d.reason;
    // One that can never fit fails now even stuck part way (its first
    // operators ran, cut to one at a time): it waited for every other
    // accelerator to go idle, counted as unfinished meanwhile.
    if (auto f = fail_as_oom(d, why, now, which == OomFail::kAny || d.never); !f.ok() || f.value()) return f;
  }
  return false;
}

Result<EngineResult> Engine::run(std::span<EngineObserver* const> observers) {
  // Tenants of more than one priority: what the higher ones' running
  // sequences will take next is kept from the lower ones (Scheduler::keep_for).
  std::int32_t top = INT32_MIN;
  bool mixed = false;
  for (const Tenant& t : tenants_) {
    mixed = mixed || (top != INT32_MIN && t.spec().priority != top);
    top = std::max(top, t.spec().priority);
  }
  Scheduler::KeptSource kept;
  if (mixed)
    kept = [this](std::vector<Scheduler::Kept>& out) {
      for (const Tenant& t : tenants_) {
        running_kv_.clear();
        t.running_kv(gmg_, running_kv_);
        for (const auto& [a, bytes] : running_kv_) out.push_back({a, t.spec().priority, bytes});
      }
    };
  const Watching watching(
      tenants_, scheduler_, observers_, observers, request_events_,
      [this](const Gmg& gmg, const Decision& d) { on_decision(gmg, d); }, std::move(kept), top);
  std::vector<Feedback> feedback;
  Nanos now = backend_.now();
  const bool plans = backend_.wants_plans();
  bool interrupted = false;
  // Preemptions since a request last ended: iterations of equal priority
  // can hold each other's HBM while the one that runs preempts itself and
  // starts over for good (reliability.md). A replay reports it and stops;
  // a server keeps serving (its clients see the wait).
  constexpr std::size_t kLivelockPreemptions = 50000;
  auto ended = [this] {
    std::size_t n = oom_failed_ + fault_failed_;
    for (const Tenant& t : tenants_) n += t.done();
    return n;
  };
  std::size_t ended_before = ended(), preempts_since = 0;
  Nanos progress_at = now;
  auto livelock = [&]() -> Status {
    if (const std::size_t e = ended(); e != ended_before) {
      ended_before = e;
      preempts_since = 0;
      progress_at = now;
    }
    if (opt_.inbox || ++preempts_since < kLivelockPreemptions) return Status::Ok();
    std::string who;
    for (const Deferral& d : scheduler_.last_deferrals())
      if (d.memory && who.find("'" + tenants_[d.tenant].spec().name + "'") == std::string::npos)
        who += (who.empty() ? "'" : ", '") + tenants_[d.tenant].spec().name + "'";
    return FailedPrecondition(
        "engine: livelock at " + std::to_string(static_cast<double>(now) / 1e9) +
        " s: " + std::to_string(preempts_since) + " preemptions since " +
        std::to_string(static_cast<double>(progress_at) / 1e9) +
        " s and no request ended; iterations waiting for HBM (tenants " + (who.empty() ? "none" : who) +
        ") hold the room each other needs: give the accelerators more HBM, or the tenants fewer lanes or smaller "
        "budgets, or end the run at a window (duration_s)");
  };
  for (;;) {
    const int stop = opt_.stop ? opt_.stop->load() : 0;
    if (stop >= 2) {
      interrupted = true;
      break;
    }
    if (Status s = apply_faults(now); !s.ok()) return s;
    if (opt_.inbox)
      if (Status s = take_inbox(now, stop); !s.ok()) return s;
    gmg_.advance_clock(now);  // (iterations started now are stamped now)
    // Tenants that lend riders have their arrivals queued before any
    // tenant starts an iteration, so a host sees them at once.
    if (stop == 0)
      for (Tenant& t : tenants_)
        if (t.lends()) t.deliver_arrivals(now);
    for (Tenant& t : tenants_) t.clear_memory_waits();
    for (const Deferral& d : scheduler_.last_deferrals())
      if (d.memory && !d.simulated) tenants_[d.tenant].note_memory_wait(d.instance);
    for (Tenant& t : tenants_) {
      if (stop == 0) t.deliver_arrivals(now);
      if (opt_.inbox) t.drop_abandoned(now);
      auto started = t.start_iterations(gmg_);
      if (!started.ok())
        return Status(started.status().code(), "tenant '" + t.spec().name + "': " + started.status().message());
      if (plans) {
        // Hand-offs a prefill lane made and copies of abandoned sequences
        // to forget, before the backend frees what the GMG released (below).
        if (Status s = copy_to_host(t); !s.ok()) return s;
        for (auto& [instance, plan] : t.take_plans())
          if (Status s = backend_.on_iteration(instance, std::move(plan)); !s.ok()) return s;
      }
    }
    flush_requests();
    gmg_.retire();
    // What the GMG let go of since the last step, before anything new is
    // submitted (a live backend frees device memory).
    backend_.release(gmg_.releases());
    gmg_.clear_releases();
    auto issued = scheduler_.schedule(gmg_, now);
    if (!issued.ok()) return issued.status();
    for (OpId op : issued.value()) {
      for (EngineObserver* o : observers_) o->on_issue(gmg_, op, now);
      if (Status s = backend_.submit(gmg_, op); !s.ok()) return s;
    }
    // An iteration that cannot fit even alone fails now; a batch that waits
    // for HBM that lower-priority KV caches hold preempts one. Either way,
    // schedule again at the same time.
    if (auto f = fail_out_of_memory(now, OomFail::kNever); !f.ok())
      return f.status();
    else if (f.value())
      continue;
    if (auto f = fail_lost(now); !f.ok())
      return f.status();
    else if (f.value())
      continue;
    if (auto p = preempt(false); !p.ok())
      return p.status();
    else if (p.value()) {
      if (Status s = livelock(); !s.ok()) return s;
      continue;
    }

    Nanos next = backend_.next_event();
    // Nothing runs: waiting for an arrival frees no memory (only work in
    // flight, a lost accelerator's return or a client that leaves can; a
    // fault yet to come is no plan, and one on an accelerator that is up
    // kept a request that fit nowhere waiting until it came).
    const bool still = next < 0 && gmg_.issued_count() == 0 && !returns_pending() && !opt_.inbox;
    // Draining, no new request is delivered, but a sequence on its way
    // back from host memory (a swap, a prefill lane's hand-off) still is.
    for (const Tenant& t : tenants_) {
      const Nanos a = stop == 0 ? t.next_arrival() : t.next_return();
      if (a >= 0 && (next < 0 || a < next)) next = std::max(a, now);
    }
    bool all_done = std::all_of(tenants_.begin(), tenants_.end(), [](const Tenant& t) { return t.finished(); });
    if (next < 0 && all_done) break;
    if (next_fault_ < opt_.faults.size()) {
      const Nanos f = std::max(opt_.faults[next_fault_].at, now);
      if (next < 0 || f < next) next = f;
    }
    const bool all_idle = std::all_of(tenants_.begin(), tenants_.end(), [](const Tenant& t) { return t.idle(); });
    if (next < 0 && opt_.inbox && !opt_.inbox->closed() && all_idle) {
      // Nothing to do until a client pushes a request (the push wakes
      // the backend's wait); the bound only keeps a missed wake harmless.
      next = now + kInboxWait;
    }
    if (next < 0 || still) {
      // Nothing runs and work waits for memory: preempt whatever holds a
      // KV cache it could free; failing that, what can never fit fails.
      if (auto p = preempt(true); !p.ok())
        return p.status();
      else if (p.value()) {
        if (Status s = livelock(); !s.ok()) return s;
        continue;
      }
      if (auto f = fail_out_of_memory(now, OomFail::kAny); !f.ok())
        return f.status();
      else if (f.value())
        continue;
    }
    if (next < 0 && gmg_.any_down()) {
      // Nothing left can run what waits: its placements need a lost
      // accelerator. Those requests fail, with the reason; a server keeps
      // serving what it still can (its health says what it cannot).
      const std::string why = "no placement left that can run it (lost: " + lost_names_ + ")";
      for (Tenant& t : tenants_) fault_failed_ += t.fail_unfinished(why, now);
      flush_requests();
      if (!opt_.inbox || opt_.inbox->closed()) break;
      next = now + kInboxWait;
    }
    if (next < 0) {
      if (stop == 1 && all_idle) {
        interrupted = true;  // drained: what was admitted has finished
        break;
      }
      std::string why = backend_.stall_reason();
      // The operators are the next of each waiting iteration; the requests
      // say how much of the load is stuck behind them.
      std::size_t unfinished = 0;
      for (const Tenant& t : tenants_) unfinished += t.records().size() - t.done();
      return FailedPrecondition("engine: deadlock at " + std::to_string(static_cast<double>(now) / 1e9) +
                                " s: " + std::to_string(gmg_.unscheduled_frontier().size()) +
                                " operator(s) wait for a placement and nothing else can run, with " +
                                std::to_string(unfinished) + " request(s) unfinished (" +
                                (why.empty() ? deadlock_cause() : why) + ")");
    }
    if (opt_.stop_at >= 0 && next > opt_.stop_at) {
      now = opt_.stop_at;
      break;
    }
    feedback.clear();
    if (Status s = backend_.advance_to(next, feedback); !s.ok()) return s;
    // A live backend may return early, at its first completion.
    now = backend_.now();
    // Losses the backend found (an executor process gone) are handled
    // before the completions, so nothing is placed again on what is lost.
    const std::vector<AccelId> found = backend_.take_lost();
    for (AccelId a : found)
      if (a >= gmg_.accels().size() || !gmg_.is_down(a))
        if (Status s = lose(a, now); !s.ok()) return s;
    // Losses the backend finds are for good: with every accelerator gone
    // nothing can ever run again, and the run ends as a failure, saying so
    // (what was unfinished fails with the same reason).
    if (!found.empty() && gmg_.down_count() == gmg_.accels().size()) return all_lost(now);
    for (const Feedback& f : feedback)
      if (Status s = apply(f); !s.ok()) return s;
    flush_requests();
  }
  if (opt_.inbox && interrupted) {
    // Cancelled (or drained with requests still held): every live request
    // not finished hears so, and nothing pushed later is accepted.
    opt_.inbox->close();
    for (LiveRequest& r : opt_.inbox->take())
      if (r.tenant < tenants_.size()) tenants_[r.tenant].submit(std::move(r), now);
    for (Tenant& t : tenants_) {
      t.set_open(false);
      t.fail_unfinished(kCancelledError, now);
    }
    flush_requests();
  }
  scheduler_.close_budget_period(now);
  EngineResult result = so_far(now);
  result.interrupted = interrupted;
  return result;
}

EngineResult Engine::so_far(Nanos now) const {
  EngineResult result;
  for (const Tenant& t : tenants_)
    result.requests.insert(result.requests.end(), t.records().begin(), t.records().end());
  result.end = now;
  result.scheduling = scheduler_.stats();
  result.complete = std::all_of(tenants_.begin(), tenants_.end(), [](const Tenant& t) { return t.finished(); });
  result.lost_ops = lost_ops_;
  result.fault_failed_requests = fault_failed_;
  for (const Tenant& t : tenants_) {
    result.rebuilt_sequences += t.rebuilt();
    result.preemptions += t.preemptions();
    result.preempted_sequences += t.preempted_sequences();
    result.swapped_sequences += t.swapped_sequences();
    result.swapped_bytes += t.swapped_bytes();
    result.handed_off += t.handed_off();
    result.handoff_bytes += t.handoff_bytes();
    result.prefill_lanes = result.prefill_lanes || t.spec().prefill_lanes > 0;
    result.rider_evictions += t.rider_evictions();
    result.riders = result.riders || t.hosts_riders();
    result.swap_mode = result.swap_mode || t.spec().preemption == TenantSpec::Preemption::kSwap;
    if (t.kv_budget() < t.spec().kv_budget_tokens) result.kv_budgets_learnt.emplace_back(t.spec().name, t.kv_budget());
  }
  result.oom_failed_requests = oom_failed_;
  result.memory = backend_.memory_stats();
  return result;
}

}  // namespace slicesched
