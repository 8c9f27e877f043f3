module;
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

module slicesched.executor.live_cluster;

namespace slicesched {

namespace {

// How far next_event() looks while work is in flight; advance_to returns
// at the first completion anyway.
constexpr Nanos kPollHorizon = 1'000'000'000;

// How often a wait looks at the interrupt flag: a signal handler cannot
// notify a condition variable (not async-signal-safe), so the wait polls.
constexpr auto kInterruptPoll = std::chrono::milliseconds(20);

}  // namespace

LiveCluster::LiveCluster(std::vector<std::int64_t> budgets, OpRunner& runner, TransferArbiter& arbiter)
    : budget_(std::move(budgets)),
      runner_(runner),
      arbiter_(arbiter),
      start_(std::chrono::steady_clock::now()),
      ready_(budget_.size()),
      running_(budget_.size(), 0),
      recv_q_(budget_.size()),
      send_busy_(budget_.size(), 0),
      recv_busy_(budget_.size(), 0),
      used_(budget_.size(), 0),
      peak_(budget_.size(), 0),
      down_(budget_.size(), 0) {
  for (std::size_t a = 0; a < budget_.size(); ++a) {
    work_cv_.push_back(std::make_unique<std::condition_variable>());
    recv_cv_.push_back(std::make_unique<std::condition_variable>());
  }
  for (AccelId a = 0; a < budget_.size(); ++a) {
    threads_.emplace_back([this, a] { worker(a); });
    threads_.emplace_back([this, a] { receiver(a); });
  }
}

LiveCluster::~LiveCluster() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  for (auto& cv : work_cv_) cv->notify_all();
  for (auto& cv : recv_cv_) cv->notify_all();
  for (std::thread& t : threads_) t.join();
}

Nanos LiveCluster::clock() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
}

Nanos LiveCluster::now() const { return std::max(now_, clock()); }

void LiveCluster::charge(AccelId a, std::int64_t bytes) {
  used_[a] += bytes;
  peak_[a] = std::max(peak_[a], used_[a]);
}

Status LiveCluster::reserve_resident(AccelId a, std::int64_t bytes) {
  std::lock_guard lk(mu_);
  if (a >= budget_.size()) return NotFound("live cluster: no accelerator " + std::to_string(a));
  if (used_[a] + bytes > budget_[a])
    return ResourceExhausted("live cluster: accelerator " + std::to_string(a) + " cannot hold " +
                             std::to_string(bytes) + " more resident bytes (" + std::to_string(used_[a]) + " of " +
                             std::to_string(budget_[a]) + " in use)");
  charge(a, bytes);
  return Status::Ok();
}

Status LiveCluster::on_iteration(InstanceId instance, IterationPlan plan) {
  return runner_.on_iteration(instance, std::move(plan));
}

void LiveCluster::drop_iteration(InstanceId instance) { runner_.drop_iteration(instance); }

Status LiveCluster::swap_out(const Gmg& gmg, std::uint32_t tenant, std::span<const OpId> kv,
                             std::span<const std::uint64_t> seqs) {
  std::vector<Payload> caches;
  {
    std::lock_guard lk(mu_);
    for (OpId op : kv) {
      const auto it = held_.find(op);
      if (it == held_.end() || !it->second.retained)
        return FailedPrecondition("live cluster: swapping out tenant " + std::to_string(tenant) +
                                  "'s sequences: " + gmg.op_name(op) + " holds no KV cache");
      caches.push_back(it->second.retained);
    }
  }
  // (The runner copies outside the lock: workers go on meanwhile.)
  return runner_.swap_out(tenant, seqs, caches);
}

void LiveCluster::forget_swapped(std::uint32_t tenant, std::span<const std::uint64_t> seqs) {
  runner_.forget_swapped(tenant, seqs);
}

Status LiveCluster::submit(const Gmg& gmg, OpId op) {
  if (!gmg.contains(op) || gmg.op(op).state != OpState::kIssued)
    return FailedPrecondition("live cluster: " + gmg.op_name(op) + " is not issued");
  const OpRecord& r = gmg.op(op);
  if (r.accel >= budget_.size())
    return NotFound("live cluster: " + gmg.op_name(op) + " is on accelerator " + std::to_string(r.accel) +
                    ", which the cluster does not have");
  {
    std::lock_guard lk(mu_);
    if (down_[r.accel])
      return FailedPrecondition("live cluster: " + gmg.op_name(op) + " is on accelerator " + std::to_string(r.accel) +
                                ", which is lost");
  }
  auto prepared = runner_.prepare(gmg, op);
  if (!prepared.ok()) return prepared.status();

  std::unique_lock lk(mu_);
  if (auto h = held_.find(op); task_of_.count(op) || (h != held_.end() && h->second.seq == r.issue_seq))
    return FailedPrecondition("live cluster: " + gmg.op_name(op) + " was already submitted");
  // Check every input before changing any state.
  std::uint32_t inputs = 0;
  for (std::uint32_t e = r.first_in; e != kNoEdge; e = gmg.edge(e).next_in, ++inputs) {
    const OpId src = gmg.edge(e).src;
    if (task_of_.count(src)) continue;
    auto h = held_.find(src);
    if (h == held_.end() || h->second.seq != gmg.op(src).issue_seq)
      return FailedPrecondition("live cluster: input " + gmg.op_name(src) + " of " + gmg.op_name(op) +
                                " is neither submitted nor held");
    const Payload& v = gmg.edge(e).retained ? h->second.retained : h->second.output;
    if (!v && !h->second.failed)
      return FailedPrecondition("live cluster: input " + gmg.op_name(src) + " of " + gmg.op_name(op) +
                                " was released before it was read");
  }

  const std::uint32_t id = free_tasks_.take(tasks_);
  Task& t = tasks_[id];
  t.op = op;
  t.seq = r.issue_seq;
  t.accel = r.accel;
  t.key = queue_key(r.priority, r.issue_seq);
  t.prepared = std::move(prepared).value();
  t.inputs.resize(inputs);
  t.received.assign(inputs, 0);
  t.declared = r.out_bytes + r.retained_bytes;
  t.workspace = r.workspace_bytes;
  t.pending = inputs + 1;  // +1 until every slot is wired
  task_of_[op] = id;
  ++live_;
  std::uint32_t slot = 0;
  for (std::uint32_t e = r.first_in; e != kNoEdge; e = gmg.edge(e).next_in, ++slot) {
    const Edge& edge = gmg.edge(e);
    if (auto it = task_of_.find(edge.src); it != task_of_.end()) {
      tasks_[it->second].succs.push_back({id, slot, edge.retained});
      continue;
    }
    const Held& h = held_.at(edge.src);
    deliver(id, slot, edge.src, edge.retained ? h.retained : h.output, h.accel, h.failed, h.error, h.lost);
  }
  if (--tasks_[id].pending == 0) make_ready(id);
  arbitrate();
  return Status::Ok();
}

// A producer's value reaches slot `slot` of `task`: directly when it lives
// on the same accelerator (or failed), through a transfer otherwise.
void LiveCluster::deliver(std::uint32_t task, std::uint32_t slot, OpId src, const Payload& value, AccelId from,
                          bool failed, const std::string& error, bool lost) {
  Task& t = tasks_[task];
  if (t.dead) return;  // reported lost already
  if (failed) {
    if (!t.input_failed) t.input_error = error;
    t.input_failed = true;
    t.lost = t.lost || lost;
  } else if (from != t.accel) {
    add_intent(task, slot, src, value, from);
    return;
  } else {
    t.inputs[slot] = value;
  }
  if (--t.pending == 0) make_ready(task);
}

void LiveCluster::add_intent(std::uint32_t task, std::uint32_t slot, OpId src, const Payload& value, AccelId from) {
  const std::uint32_t x = free_xfers_.take(xfers_);
  xfers_[x] = Xfer{next_xfer_id_++, task, slot, src, value, from, tasks_[task].accel, clock()};
  pending_.push_back(x);
}

void LiveCluster::make_ready(std::uint32_t task) {
  const Task& t = tasks_[task];
  ready_[t.accel].push_back({t.key, task});
  work_cv_[t.accel]->notify_one();
}

// Offers the pending intents to the arbiter and hands the activated ones
// to their destinations' receivers. An intent refused for memory waits
// until memory has been freed since.
void LiveCluster::arbitrate() {
  if (pending_.empty()) return;
  intents_.clear();
  intent_index_.clear();
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const Xfer& x = xfers_[pending_[i]];
    if (x.refused_epoch == memory_epoch_) continue;
    intents_.push_back({x.id, x.from, x.to, x.since, x.value.bytes});
    intent_index_.push_back(i);
  }
  if (intents_.empty()) return;
  selected_.clear();
  arbiter_.select(intents_, send_busy_, recv_busy_, selected_);
  if (selected_.empty()) return;
  take_.assign(pending_.size(), 0);
  for (std::size_t s : selected_) {
    if (s >= intents_.size()) {
      fault_ = "transfer arbiter selected intent " + std::to_string(s) + " of " + std::to_string(intents_.size());
      continue;
    }
    const Xfer& x = xfers_[pending_[intent_index_[s]]];
    if (send_busy_[x.from] || recv_busy_[x.to]) {
      fault_ =
          "transfer arbiter activated a conflicting transfer " + std::to_string(x.from) + " -> " + std::to_string(x.to);
      continue;
    }
    send_busy_[x.from] = recv_busy_[x.to] = 1;
    take_[intent_index_[s]] = 1;
    recv_q_[x.to].push_back(pending_[intent_index_[s]]);
    recv_cv_[x.to]->notify_one();
  }
  std::size_t keep = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i)
    if (!take_[i]) pending_[keep++] = pending_[i];
  pending_.resize(keep);
}

void LiveCluster::memory_freed() {
  ++memory_epoch_;
  for (AccelId a = 0; a < ready_.size(); ++a)
    if (!ready_[a].empty() && !running_[a]) work_cv_[a]->notify_one();
  arbitrate();
}

// The ready operator to run next on `a`: the first in queue order whose
// memory fits (an operator whose input failed needs none). Skipping a head
// that does not fit avoids a deadlock where the head waits for memory that
// only a later operator's completion frees; the head runs as soon as it
// fits. Returns an index into ready_[a], or -1. (Queues are short, so a
// scan, which also finds the best operator that fits, beats a heap.)
std::ptrdiff_t LiveCluster::pick(AccelId a) const {
  if (running_[a] || down_[a]) return -1;  // (a lost one's queue is failed by fail_accelerator)
  const auto& q = ready_[a];
  std::ptrdiff_t best = -1;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const Task& t = tasks_[q[i].second];
    const bool fits = t.input_failed || used_[a] + t.declared + t.workspace <= budget_[a];
    if (fits && (best < 0 || q[i].first < q[static_cast<std::size_t>(best)].first))
      best = static_cast<std::ptrdiff_t>(i);
  }
  return best;
}

// The first ready operator of `a` in queue order (ready_[a] not empty).
std::uint32_t LiveCluster::head(AccelId a) const {
  return std::min_element(ready_[a].begin(), ready_[a].end())->second;
}

bool LiveCluster::can_start(AccelId a) const { return pick(a) >= 0; }

void LiveCluster::worker(AccelId a) {
  std::unique_lock lk(mu_);
  for (;;) {
    std::ptrdiff_t next = -1;
    work_cv_[a]->wait(lk, [&] {
      if (stop_) return true;
      next = pick(a);
      // The head of the queue waiting for memory (counted once per operator).
      if (!ready_[a].empty() && !running_[a] && (next < 0 || ready_[a][next].second != head(a)) &&
          !tasks_[head(a)].waited) {
        tasks_[head(a)].waited = true;
        ++memory_waits_;
        engine_cv_.notify_one();  // a possible stall for the engine to see
      }
      return next >= 0;
    });
    if (stop_) return;
    auto& q = ready_[a];
    const std::uint32_t id = q[static_cast<std::size_t>(next)].second;
    q[static_cast<std::size_t>(next)] = q.back();
    q.pop_back();
    Task& t = tasks_[id];
    t.started = true;
    running_[a] = 1;
    Result<OpResult> result = OpResult{};
    Nanos start = clock(), finish = start;
    if (t.input_failed) {
      result = Aborted(t.input_error);
    } else {
      charge(a, t.declared + t.workspace);
      lk.unlock();
      start = clock();
      try {
        result = runner_.run(a, t.prepared.get(), t.inputs);
      } catch (const std::exception& e) {
        result = Internal(std::string("operator threw: ") + e.what());
      } catch (...) {
        result = Internal("operator threw a non-standard exception");
      }
      finish = clock();
      lk.lock();
      used_[a] -= t.declared + t.workspace;
    }
    running_[a] = 0;
    // Inputs are consumed: received copies are freed here.
    for (std::int64_t b : t.received) used_[a] -= b;
    t.inputs.clear();
    Held h;
    h.seq = t.seq;
    h.accel = a;
    Done d;
    d.feedback.op = t.op;
    d.feedback.from = a;
    // A device-measured time (CUDA events) excludes the host's launch and
    // wait: the operator ran in the last device_ns of the call.
    if (result.ok() && result->device_ns >= 0) start = std::max(start, finish - result->device_ns);
    d.feedback.t = finish;
    d.feedback.measured = finish - start;
    d.feedback.start = start;
    // Finished on an accelerator lost meanwhile: whatever it made is gone
    // with it, and the work is to be redone elsewhere.
    if (down_[a] && result.ok()) result = Aborted("accelerator " + std::to_string(a) + " was lost");
    if (down_[a] || t.lost) h.lost = d.feedback.lost = true;
    if (result.ok()) {
      OpResult& res = result.value();
      h.output = std::move(res.output);
      h.retained = std::move(res.retained);
      charge(a, h.output.bytes + h.retained.bytes);
      d.feedback.tokens = std::move(res.tokens);
      d.feedback.logprobs = std::move(res.logprobs);
    } else {
      h.failed = true;
      h.error = result.status().message();
      d.feedback.failed = true;
      d.feedback.error = h.error;
    }
    task_of_.erase(t.op);
    for (const Succ& s : t.succs)
      deliver(s.task, s.slot, t.op, s.retained ? h.retained : h.output, a, h.failed, h.error, h.lost);
    held_[t.op] = std::move(h);
    done_.push_back(std::move(d));
    free_tasks_.give_back(id);
    tasks_[id].succs.clear();
    tasks_[id].prepared.reset();
    memory_freed();
    engine_cv_.notify_one();
  }
}

void LiveCluster::receiver(AccelId a) {
  std::unique_lock lk(mu_);
  for (;;) {
    recv_cv_[a]->wait(lk, [&] { return stop_ || !recv_q_[a].empty(); });
    if (stop_) return;
    const std::uint32_t xi = recv_q_[a].front();
    recv_q_[a].pop_front();
    Xfer& x = xfers_[xi];
    const std::int64_t bytes = x.value.bytes;
    if (tasks_[x.task].dead) {  // its consumer was lost meanwhile
      send_busy_[x.from] = recv_busy_[a] = 0;
      x.value = Payload{};
      free_xfers_.give_back(xi);
      arbitrate();
      continue;
    }
    // Recv: the destination buffer first.
    if (used_[a] + bytes > budget_[a]) {
      ++refused_;
      x.refused_epoch = memory_epoch_;
      send_busy_[x.from] = recv_busy_[a] = 0;
      // Back among the pending intents at its age.
      auto pos = std::lower_bound(pending_.begin(), pending_.end(), xi,
                                  [&](std::uint32_t p, std::uint32_t q) { return xfers_[p].id < xfers_[q].id; });
      pending_.insert(pos, xi);
      arbitrate();
      engine_cv_.notify_one();
      continue;
    }
    charge(a, bytes);
    const Payload value = x.value;
    lk.unlock();
    // Send: the copy itself.
    Nanos start = clock();
    Result<CopyResult> copy = CopyResult{};
    try {
      copy = runner_.copy(value, a);
    } catch (const std::exception& e) {
      copy = Internal(std::string("transfer threw: ") + e.what());
    }
    const Nanos finish = clock();
    if (copy.ok() && copy->device_ns >= 0) start = std::max(start, finish - copy->device_ns);
    lk.lock();
    Xfer& xf = xfers_[xi];
    send_busy_[xf.from] = recv_busy_[a] = 0;
    Task& t = tasks_[xf.task];
    // An end lost meanwhile: the copy (if it arrived) is dropped.
    const bool lost = down_[xf.from] || down_[a] || t.dead;
    if (lost && copy.ok())
      copy = Aborted("transfer " + std::to_string(xf.from) + " -> " + std::to_string(a) + ": an accelerator was lost");
    Done d;
    d.feedback.kind = Feedback::Kind::kTransfer;
    d.feedback.lost = lost;
    d.feedback.op = t.op;
    d.feedback.from = xf.from;
    d.feedback.to = a;
    d.feedback.bytes = bytes;
    d.feedback.t = finish;
    d.feedback.measured = finish - start;
    d.feedback.start = start;
    if (copy.ok()) {
      used_[a] += copy->value.bytes - bytes;  // the real size, if it differs
      peak_[a] = std::max(peak_[a], used_[a]);
      t.received[xf.slot] = copy->value.bytes;
      t.inputs[xf.slot] = std::move(copy->value);
    } else {
      used_[a] -= bytes;
      d.feedback.failed = true;
      d.feedback.error = copy.status().message();
      if (!t.input_failed) t.input_error = copy.status().message();
      t.input_failed = true;
      t.lost = t.lost || lost;
    }
    d.feedback.src = xf.src;
    xf.value = Payload{};
    free_xfers_.give_back(xi);
    if (!t.dead && --t.pending == 0) make_ready(xf.task);
    // As in the emulated cluster, a transfer cut by a loss reports nothing:
    // its consumer reports lost.
    if (!lost) done_.push_back(std::move(d));
    arbitrate();
    engine_cv_.notify_one();
  }
}

void LiveCluster::release(std::span<const Release> released) {
  std::lock_guard lk(mu_);
  bool freed = false;
  for (const Release& r : released) {
    const auto it = held_.find(r.op);
    if (it == held_.end() || it->second.seq != r.issue_seq) continue;
    Held& h = it->second;
    Payload& value = r.value == Release::Value::kOutput ? h.output : h.retained;
    if (value) {
      used_[h.accel] -= value.bytes;
      value = Payload{};
      freed = true;
    }
    // Until then kept (maybe without values, e.g. a failure) for the
    // consumers that may still be submitted.
    if (r.last) held_.erase(it);
  }
  if (freed) memory_freed();
}

bool LiveCluster::stalled() const {
  if (live_ == 0 || !done_.empty()) return false;
  for (AccelId a = 0; a < budget_.size(); ++a)
    if (running_[a] || send_busy_[a] || recv_busy_[a] || can_start(a)) return false;
  for (std::uint32_t p : pending_)
    if (xfers_[p].refused_epoch != memory_epoch_) return false;
  return true;
}

std::string LiveCluster::stall_reason() const {
  std::lock_guard lk(mu_);
  if (!stalled()) return {};
  std::string why = std::to_string(live_) + " operator(s) wait";
  for (AccelId a = 0; a < budget_.size(); ++a)
    if (!ready_[a].empty())
      why += "; accelerator " + std::to_string(a) + " needs " +
             std::to_string(tasks_[head(a)].declared + tasks_[head(a)].workspace) + " bytes, has " +
             std::to_string(budget_[a] - used_[a]) + " free";
  if (!pending_.empty()) why += "; " + std::to_string(pending_.size()) + " transfer(s) refused for memory";
  return why;
}

Nanos LiveCluster::next_event() const {
  std::lock_guard lk(mu_);
  if (!done_.empty() || !fault_.empty() || !lost_q_.empty()) return now();
  if (live_ == 0 || stalled()) return -1;
  return now() + kPollHorizon;
}

void LiveCluster::wake() {
  // Under the lock: a notify between advance_to's check and its wait
  // would otherwise be missed.
  std::lock_guard lk(mu_);
  engine_cv_.notify_all();
}

Status LiveCluster::advance_to(Nanos t, std::vector<Feedback>& out) {
  std::unique_lock lk(mu_);
  const auto deadline = start_ + std::chrono::nanoseconds(t);
  auto ready = [&] { return !done_.empty() || !fault_.empty() || !lost_q_.empty() || stalled(); };
  if (!interrupt_) {
    engine_cv_.wait_until(lk, deadline, ready);
  } else {
    // With sparse arrivals the deadline can be minutes away; a drain or a
    // cancel must not wait for it.
    const int seen = interrupt_->load();
    auto woken = [&] { return ready() || interrupt_->load() != seen; };
    while (!woken() && std::chrono::steady_clock::now() < deadline)
      engine_cv_.wait_until(lk, std::min(deadline, std::chrono::steady_clock::now() + kInterruptPoll), woken);
  }
  if (!fault_.empty()) return Internal("live cluster: " + fault_);
  for (Done& d : done_) {
    if (d.feedback.kind == Feedback::Kind::kOp) --live_;
    out.push_back(std::move(d.feedback));
  }
  done_.clear();
  now_ = std::max(now_, clock());
  return Status::Ok();
}

// Reports a task that never ran as lost now, and passes the loss on to
// its consumers. Its slot stays taken: producers may still name it.
void LiveCluster::fail_task(std::uint32_t task, std::vector<Feedback>& out) {
  Task& t = tasks_[task];
  Feedback f;
  f.op = t.op;
  f.from = t.accel;
  f.t = clock();
  f.failed = f.lost = true;
  f.error = "accelerator " + std::to_string(t.accel) + " was lost";
  out.push_back(std::move(f));
  auto& q = ready_[t.accel];
  std::erase_if(q, [&](const auto& e) { return e.second == task; });
  for (std::int64_t b : t.received) used_[t.accel] -= b;
  t.inputs.clear();
  t.prepared.reset();
  t.dead = true;
  task_of_.erase(t.op);
  --live_;
  const std::vector<Succ> succs = std::move(t.succs);
  t.succs.clear();
  for (const Succ& s : succs) deliver(s.task, s.slot, t.op, Payload{}, t.accel, true, f.error, true);
}

Status LiveCluster::fail_accelerator(const Gmg&, AccelId a, std::vector<Feedback>& out) {
  std::lock_guard lk(mu_);
  if (a >= budget_.size())
    return NotFound("live cluster: accelerator " + std::to_string(a) + " does not exist (cluster has " +
                    std::to_string(budget_.size()) + ")");
  if (down_[a] == 2) return FailedPrecondition("live cluster: accelerator " + std::to_string(a) + " is already lost");
  down_[a] = 2;
  const std::string why = "accelerator " + std::to_string(a) + " was lost";
  // What it held is gone; consumers submitted later fail as lost.
  for (auto& [op, h] : held_) {
    if (h.accel != a) continue;
    used_[a] -= h.output.bytes + h.retained.bytes;
    h.output = h.retained = Payload{};
    if (!h.failed) h.error = why;
    h.failed = h.lost = true;
  }
  // Everything queued there, in task order (one running there reports
  // from its worker)...
  for (std::uint32_t task = 0; task < tasks_.size(); ++task) {
    const Task& t = tasks_[task];
    if (t.accel == a && !t.dead && !t.started && t.op != kNoOp) {
      auto it = task_of_.find(t.op);
      if (it != task_of_.end() && it->second == task) fail_task(task, out);
    }
  }
  // ...then every transfer from or to it not yet copying.
  auto drop = [&](std::uint32_t xi) {
    Xfer& x = xfers_[xi];
    deliver(x.task, x.slot, x.src, Payload{}, x.from, true, why, true);
    x.value = Payload{};
    free_xfers_.give_back(xi);
  };
  std::vector<std::uint32_t> keep;
  for (std::uint32_t xi : pending_)
    if (xfers_[xi].from == a || xfers_[xi].to == a)
      drop(xi);
    else
      keep.push_back(xi);
  pending_ = std::move(keep);
  for (auto& q : recv_q_)
    std::erase_if(q, [&](std::uint32_t xi) {
      const Xfer& x = xfers_[xi];
      if (x.from != a && x.to != a) return false;
      send_busy_[x.from] = recv_busy_[x.to] = 0;
      drop(xi);
      return true;
    });
  // deliver() readied what is on other accelerators; the rest may now fit.
  memory_freed();
  engine_cv_.notify_one();
  return Status::Ok();
}

Status LiveCluster::restore_accelerator(AccelId a) {
  std::lock_guard lk(mu_);
  if (a >= budget_.size() || down_[a] != 2)
    return FailedPrecondition("live cluster: accelerator " + std::to_string(a) + " is not lost");
  down_[a] = 0;
  return Status::Ok();
}

void LiveCluster::lose(AccelId a) {
  std::lock_guard lk(mu_);
  if (a >= budget_.size() || down_[a]) return;
  down_[a] = 1;
  lost_q_.push_back(a);
  engine_cv_.notify_one();
}

std::vector<AccelId> LiveCluster::take_lost() {
  std::lock_guard lk(mu_);
  return std::exchange(lost_q_, {});
}

std::int64_t LiveCluster::used(AccelId a) const {
  std::lock_guard lk(mu_);
  return used_[a];
}

std::int64_t LiveCluster::peak(AccelId a) const {
  std::lock_guard lk(mu_);
  return peak_[a];
}

std::size_t LiveCluster::refused_receives() const {
  std::lock_guard lk(mu_);
  return refused_;
}

std::size_t LiveCluster::memory_waits() const {
  std::lock_guard lk(mu_);
  return memory_waits_;
}

MemoryStats LiveCluster::memory_stats() const {
  std::lock_guard lk(mu_);
  return {budget_, peak_, memory_waits_, refused_};
}

}  // namespace slicesched
