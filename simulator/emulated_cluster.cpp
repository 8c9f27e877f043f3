module;
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

module slicesched.simulator.emulated_cluster;
import slicesched.models.work;
import slicesched.core.graph;

namespace slicesched {

namespace {

enum EventKind : std::uint32_t { kOpFinish, kTransferFinish };

struct RunsLater {
  bool operator()(const std::pair<std::uint64_t, std::uint32_t>& a,
                  const std::pair<std::uint64_t, std::uint32_t>& b) const {
    return a.first > b.first;
  }
};

}  // namespace

ProfileGroundTruth::ProfileGroundTruth(LayerProfile layers, TransferProfile transfers, std::uint64_t seed, double op_cv,
                                       double transfer_cv)
    : layers_(std::move(layers)),
      transfers_(std::move(transfers)),
      op_noise_(seed, op_cv),
      transfer_noise_(seed ^ 0x9e3779b97f4a7c15ull, transfer_cv) {}

Result<double> ProfileGroundTruth::measured_seconds(const LayerProfile& layers, const ModelSet& models, const Gmg& gmg,
                                                    OpId op) {
  const OpRecord& r = gmg.op(op);
  const GraphTemplate& t = gmg.templates().get(r.tmpl);
  if (const Model* model = models.of(r.tmpl)) {
    const IterationDims d = model->dims_of(t, gmg.dims(op));
    const ModelOp& m = model->ops()[r.tmpl_op];
    double s = 0;
    switch (m.role) {
      case OpRole::kEmbed:
        s = layers.embed_seconds(std::max<std::int64_t>(1, d.tokens));
        break;
      case OpRole::kHead:
        s = layers.head_seconds(std::max<std::int64_t>(1, d.sequences));
        break;
      case OpRole::kLayers: {
        // The table's layer (measured with an empty cache) plus reading this
        // model's K and V of the attended tokens once per layer, as
        // LayerProfile::kv_read_seconds does for the profiled shape.
        const DenseShape shape = model->shape();
        const std::int64_t per_rank = (shape.kv_heads + layers.tp_size() - 1) / layers.tp_size();
        const double kv_per_token =
            2.0 * static_cast<double>(per_rank * shape.head_dim * shape.elem_bytes) / layers.options().hbm_bytes_per_s;
        const double layer = layers.layer_seconds(std::max<std::int64_t>(1, d.tokens), 0) +
                             kv_per_token * static_cast<double>(std::max<std::int64_t>(d.context, 0));
        s = m.layers * layer;
        break;
      }
    }
    return s;
  }
  auto dims = gmg.dims(op);
  const int tokens = t.dims().find("tokens"), context = t.dims().find("context");
  const int sequences = t.dims().find("sequences");
  if (tokens < 0) return InvalidArgument("ground truth: template '" + t.name() + "' has no dim 'tokens'");
  const std::int64_t ctx = context < 0 ? 0 : dims[context];
  const std::string& name = t.ops()[r.tmpl_op].name;
  // The head computes logits for each sequence's last token only: the
  // table's head at that many positions (docs/ground-truth.md).
  const std::int64_t positions = name == "head" && sequences >= 0 ? dims[sequences] : dims[tokens];
  auto s = layers.op_seconds(name, positions, ctx);
  if (!s.ok()) return InvalidArgument("ground truth for " + gmg.op_name(op) + ": " + s.status().message());
  return s.value();
}

Result<double> ProfileGroundTruth::op_seconds(const Gmg& gmg, OpId op) {
  auto s = measured_seconds(layers_, models_, gmg, op);
  if (!s.ok()) return s.status();
  return op_noise_.sample(s.value());
}

double ProfileGroundTruth::transfer_seconds(AccelId, AccelId, std::int64_t bytes) {
  return transfer_noise_.sample(transfers_.seconds(bytes));
}

CalibratedGroundTruth::CalibratedGroundTruth(CalibrationProfile profile, const AcceleratorSet& accels,
                                             std::uint64_t seed, double op_cv, double transfer_cv)
    : profile_(std::move(profile)),
      accels_(accels),
      op_noise_(seed, op_cv),
      transfer_noise_(seed ^ 0x9e3779b97f4a7c15ull, transfer_cv) {}

Result<double> CalibratedGroundTruth::op_seconds(const Gmg& gmg, OpId op) {
  const OpRecord& r = gmg.op(op);
  const GraphTemplate& t = gmg.templates().get(r.tmpl);
  const std::string& name = t.ops()[r.tmpl_op].name;
  const std::string& type = accels_.type_name(accels_.type(r.accel));
  const CalibrationProfile::Op* fit = profile_.find_op(t.name(), name, type);
  if (!fit) return NotFound("calibrated ground truth: no fit for " + t.name() + "/" + name + " on " + type);
  auto x = gmg.features(op);
  if (fit->coefficients.size() != x.size())
    return InvalidArgument("calibrated ground truth: the fit for " + t.name() + "/" + name + " has " +
                           std::to_string(fit->coefficients.size()) + " coefficients, the op has " +
                           std::to_string(x.size()) + " features");
  // Past the largest size it was measured at, a term with a negative
  // coefficient stops falling: a fit of prompts up to 64 tokens made one of
  // 8,000 take 0.1 ms (its tokens x context term negative).
  const bool edge = fit->feature_max.size() == x.size();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    s += fit->coefficients[i] *
         (edge && fit->coefficients[i] < 0 ? std::min(x[i], fit->feature_max[i]) : static_cast<double>(x[i]));
  return op_noise_.sample(s > 0 ? s : 0.0);
}

double CalibratedGroundTruth::transfer_seconds(AccelId from, AccelId to, std::int64_t bytes) {
  const CalibrationProfile::Transfer* fit = profile_.find_transfer(accels_[from].name, accels_[to].name);
  if (!fit) fit = profile_.find_transfer("*", "*");
  const double s = fit ? fit->sec_per_byte * static_cast<double>(bytes) + fit->fixed_s : 0.0;
  return transfer_noise_.sample(s > 0 ? s : 0.0);
}

Status CalibratedGroundTruth::check_transfers() const {
  if (profile_.find_transfer("*", "*")) return Status::Ok();
  for (AccelId a = 0; a < accels_.size(); ++a)
    for (AccelId b = 0; b < accels_.size(); ++b)
      if (a != b && !profile_.find_transfer(accels_[a].name, accels_[b].name))
        return NotFound("calibrated ground truth: no transfer fit for " + accels_[a].name + " -> " + accels_[b].name +
                        " (and no \"*\" -> \"*\" entry)");
  return Status::Ok();
}

EmulatedCluster::EmulatedCluster(std::size_t accelerators, GroundTruth& truth, TransferArbiter& arbiter)
    : truth_(truth),
      arbiter_(arbiter),
      ready_(accelerators),
      running_(accelerators, kNotRunning),
      send_busy_(accelerators, 0),
      recv_busy_(accelerators, 0),
      dirty_flag_(accelerators, 0),
      down_(accelerators, 0),
      lost_at_(accelerators, -1),
      copies_(accelerators, 1) {}

void EmulatedCluster::mark_dirty(AccelId a) {
  if (!dirty_flag_[a]) {
    dirty_flag_[a] = 1;
    dirty_.push_back(a);
  }
}

Status EmulatedCluster::submit(const Gmg& gmg, OpId op) {
  if (!gmg.contains(op) || gmg.op(op).state != OpState::kIssued)
    return FailedPrecondition("emulated cluster: " + gmg.op_name(op) + " is not issued");
  if (op < task_of_.size() && task_of_[op] != kNoTask)
    return FailedPrecondition("emulated cluster: " + gmg.op_name(op) + " was already submitted");
  const OpRecord& r = gmg.op(op);
  if (r.accel >= ready_.size())
    return NotFound("emulated cluster: " + gmg.op_name(op) + " is on accelerator " + std::to_string(r.accel) +
                    ", which the cluster does not have");
  if (down_[r.accel])
    return FailedPrecondition("emulated cluster: " + gmg.op_name(op) + " is on accelerator " + std::to_string(r.accel) +
                              ", which is lost");
  // Check every input before changing any state.
  for (std::uint32_t e = r.first_in; e != kNoEdge; e = gmg.edge(e).next_in) {
    const OpId src = gmg.edge(e).src;
    const bool submitted = src < task_of_.size() && task_of_[src] != kNoTask;
    if (!submitted && gmg.op(src).state != OpState::kDone)
      return FailedPrecondition("emulated cluster: input " + gmg.op_name(src) + " of " + gmg.op_name(op) +
                                " is neither done nor submitted");
  }
  auto seconds = truth_.op_seconds(gmg, op);
  if (!seconds.ok()) return seconds.status();

  const std::uint32_t id = free_tasks_.take(tasks_);
  if (task_of_.size() <= op) task_of_.resize(op + 1u, kNoTask);
  task_of_[op] = id;
  if (op < lost_op_.size()) lost_op_[op] = 0;  // a new operator in a reused slot
  ++live_;
  {
    Task& task = tasks_[id];
    task.op = op;
    task.accel = r.accel;
    task.key = queue_key(r.priority, r.issue_seq);
    task.dur = to_nanos(seconds.value());
    // Each GPU of a tensor-parallel group holds the whole output rows.
    const int copies = copies_[r.accel] = gmg.accels().type_tp(gmg.accels().type(r.accel));
    task.out = r.out_bytes * copies;
    task.retained = r.retained_bytes;
    task.workspace = r.workspace_bytes;
    task.alloc = task.out + r.retained_bytes + r.workspace_bytes;
    task.issue_seq = r.issue_seq;
  }
  for (std::uint32_t e = r.first_in; e != kNoEdge; e = gmg.edge(e).next_in) {
    const Edge& edge = gmg.edge(e);
    const OpRecord& src = gmg.op(edge.src);
    const bool remote = src.accel != r.accel;
    const bool submitted = edge.src < task_of_.size() && task_of_[edge.src] != kNoTask;
    if (submitted) {  // still queued or running here: it will notify us
      tasks_[task_of_[edge.src]].succs.push_back({id, edge.bytes, remote});
      ++tasks_[id].pending;
    } else if (output_lost(gmg, edge.src)) {  // done, but on an accelerator lost since
      tasks_[id].lost = true;
    } else if (remote) {  // done elsewhere: its output moves now
      ++tasks_[id].pending;
      add_intent(edge.src, src.accel, id, edge.bytes);
    }
  }
  if (tasks_[id].pending == 0) input_ready(id);
  return Status::Ok();
}

void EmulatedCluster::add_intent(OpId src, AccelId from, std::uint32_t dst_task, std::int64_t bytes) {
  const std::uint32_t x = free_xfers_.take(xfers_);
  const Task& dst = tasks_[dst_task];
  const Nanos dur = to_nanos(truth_.transfer_seconds(from, dst.accel, bytes));
  xfers_[x] = Xfer{src, dst_task, from, dst.accel, bytes, dur, -1, now_, next_intent_++, true, false};
  intents_.push_back(x);
  arbitrate_ = true;
}

void EmulatedCluster::input_ready(std::uint32_t task) {
  Task& t = tasks_[task];
  if (t.lost) {  // nothing to run on: it fails at once
    fail_now_.push_back(task);
    return;
  }
  ready_[t.accel].push_back({t.key, task});
  std::push_heap(ready_[t.accel].begin(), ready_[t.accel].end(), RunsLater{});
  mark_dirty(t.accel);
}

// Starts what can start at now_: the next operator on every accelerator
// whose queue changed, then the transfers the arbiter picks.
Status EmulatedCluster::start_ready() {
  for (AccelId a : dirty_) {
    dirty_flag_[a] = 0;
    if (running_[a] != kNotRunning || ready_[a].empty()) continue;
    const std::uint32_t task = pop_runnable(a);
    if (task == kNoTask) continue;  // all wait for memory
    charge(a, tasks_[task].alloc);
    running_[a] = task;
    tasks_[task].start = now_;
    tasks_[task].event_pending = true;
    events_.push(now_ + tasks_[task].dur, kOpFinish, task);
  }
  dirty_.clear();
  if (!arbitrate_) return Status::Ok();
  arbitrate_ = false;
  return intents_.empty() ? Status::Ok() : arbitrate();
}

// intents_ is in age order (since, then seq): the order they were added.
Status EmulatedCluster::arbitrate() {
  refused_pending_ = false;
  pending_.clear();
  for (std::uint32_t x : intents_) {
    const Xfer& xf = xfers_[x];
    pending_.push_back({xf.seq, xf.from, xf.to, xf.since, xf.bytes});
  }
  picked_.clear();
  arbiter_.select(pending_, send_busy_, recv_busy_, picked_);
  for (std::size_t k : picked_) {
    if (k >= intents_.size() || intents_[k] == kNoTask)
      return FailedPrecondition("emulated cluster: the transfer arbiter picked intent " + std::to_string(k) + " of " +
                                std::to_string(intents_.size()) + (k < intents_.size() ? " twice" : ""));
    const std::uint32_t x = intents_[k];
    Xfer& xf = xfers_[x];
    const std::int64_t held = xf.bytes * copies_[xf.to];  // (every GPU of a group receives it)
    if (!fits(xf.to, held)) {                             // refused: it stays pending, retried once memory frees
      ++refused_;
      refused_pending_ = true;
      continue;
    }
    if (send_busy_[xf.from] || recv_busy_[xf.to])
      return FailedPrecondition("emulated cluster: the transfer arbiter picked a transfer " + std::to_string(xf.from) +
                                " -> " + std::to_string(xf.to) + " whose " +
                                (send_busy_[xf.from] ? "source" : "destination") + " is busy");
    send_busy_[xf.from] = recv_busy_[xf.to] = 1;
    charge(xf.to, held);  // Recv allocates before Send moves
    tasks_[xf.dst_task].received += held;
    xf.start = now_;
    events_.push(now_ + xf.dur, kTransferFinish, x);
    intents_[k] = kNoTask;  // started
  }
  std::erase(intents_, kNoTask);
  return Status::Ok();
}

void EmulatedCluster::on_op_finish(std::uint32_t task, std::vector<Feedback>& out) {
  Task& t = tasks_[task];
  t.event_pending = false;
  if (t.dead) {  // failed with its accelerator while it ran
    free_dead(task);
    return;
  }
  running_[t.accel] = kNotRunning;
  mark_dirty(t.accel);
  if (!budget_.empty()) {
    // The output and retained state stay until the GMG lets go of them.
    if (held_.size() <= t.op) held_.resize(t.op + 1u);
    held_[t.op] = {t.issue_seq, t.accel, epoch_[t.accel], t.out, t.retained};
    uncharge(t.accel, t.workspace + t.received);
    t.received = 0;
  }
  out.push_back(
      {Feedback::Kind::kOp, t.op, kNoOp, t.accel, kNoAccel, 0, now_, now_ - t.start, {}, false, {}, false, t.start});
  for (const Succ& s : t.succs) {
    const Task& d = tasks_[s.task];
    if (s.remote && !d.lost && !d.dead)
      add_intent(t.op, t.accel, s.task, s.bytes);
    else  // local, or a reader that fails anyway: nothing moves
      input_arrived(s.task);
  }
  task_of_[t.op] = kNoTask;
  t.succs.clear();
  free_tasks_.give_back(task);
  --live_;
  arbitrate_ = true;  // as in the global simulator: any completion asks the arbiter
}

void EmulatedCluster::on_transfer_finish(std::uint32_t x, std::vector<Feedback>& out) {
  Xfer& xf = xfers_[x];
  if (xf.cancelled) {  // its ports were freed when its accelerator was lost
    xf.cancelled = false;
    free_xfers_.give_back(x);
    return;
  }
  xf.active = false;
  send_busy_[xf.from] = recv_busy_[xf.to] = 0;
  const Task& dst = tasks_[xf.dst_task];
  out.push_back({Feedback::Kind::kTransfer,
                 dst.op,
                 xf.src,
                 xf.from,
                 xf.to,
                 xf.bytes,
                 now_,
                 now_ - xf.start,
                 {},
                 false,
                 {},
                 false,
                 xf.start});
  input_arrived(xf.dst_task);
  free_xfers_.give_back(x);
  arbitrate_ = true;
}

// One input of `task` is in (or will never matter): once all are, it runs,
// fails (lost), or, already failed, gives its slot back.
void EmulatedCluster::input_arrived(std::uint32_t task) {
  Task& t = tasks_[task];
  if (--t.pending != 0) return;
  if (t.dead)
    free_dead(task);
  else
    input_ready(task);
}

void EmulatedCluster::free_dead(std::uint32_t task) {
  const Task& t = tasks_[task];
  if (t.pending == 0 && !t.event_pending) free_tasks_.give_back(task);
}

bool EmulatedCluster::output_lost(const Gmg& gmg, OpId src) const {
  if (src < lost_op_.size() && lost_op_[src]) return true;
  const OpRecord& p = gmg.op(src);
  return p.accel < down_.size() && (down_[p.accel] || (lost_at_[p.accel] >= 0 && p.done_t <= lost_at_[p.accel]));
}

// Reports `task` failed now, as lost: what it ran so far counts as busy,
// and its readers will fail too (they get no transfer).
void EmulatedCluster::fail_task(std::uint32_t task, std::vector<Feedback>& out) {
  Task& t = tasks_[task];
  if (t.dead) return;
  const bool ran = running_[t.accel] == task;
  if (ran) {
    running_[t.accel] = kNotRunning;
    mark_dirty(t.accel);
  }
  // What it allocated is garbage now.
  uncharge(t.accel, (ran ? t.alloc : 0) + t.received);
  t.received = 0;
  Feedback f{Feedback::Kind::kOp, t.op, kNoOp, t.accel, kNoAccel, 0, now_, ran ? now_ - t.start : 0, {}, true, {}};
  f.lost = true;
  if (ran) f.start = t.start;
  out.push_back(std::move(f));
  if (lost_op_.size() <= t.op) lost_op_.resize(t.op + 1u, 0);
  lost_op_[t.op] = 1;
  task_of_[t.op] = kNoTask;
  --live_;
  t.dead = true;
  std::vector<Succ> succs = std::move(t.succs);
  t.succs.clear();
  for (const Succ& s : succs) {
    tasks_[s.task].lost = true;
    input_arrived(s.task);
  }
  free_dead(task);  // (t may have moved: tasks_ does not grow here)
}

void EmulatedCluster::fail_pending(std::vector<Feedback>& out) {
  for (std::size_t k = 0; k < fail_now_.size(); ++k) fail_task(fail_now_[k], out);  // (it may grow)
  fail_now_.clear();
}

Status EmulatedCluster::fail_accelerator(const Gmg&, AccelId a, std::vector<Feedback>& out) {
  if (a >= down_.size())
    return NotFound("emulated cluster: accelerator " + std::to_string(a) + " does not exist (cluster has " +
                    std::to_string(down_.size()) + ")");
  if (down_[a]) return FailedPrecondition("emulated cluster: accelerator " + std::to_string(a) + " is already lost");
  fail_pending(out);
  down_[a] = 1;
  lost_at_[a] = now_;
  // Everything there, running or queued, in task order...
  for (std::uint32_t task = 0; task < tasks_.size(); ++task) {
    const Task& t = tasks_[task];
    if (t.accel == a && !t.dead && t.op != kNoOp && t.op < task_of_.size() && task_of_[t.op] == task)
      fail_task(task, out);
  }
  ready_[a].clear();
  // ...then every transfer from or to it: a moving one frees its ports now.
  for (std::uint32_t x = 0; x < xfers_.size(); ++x) {
    Xfer& xf = xfers_[x];
    if (!xf.active || (xf.from != a && xf.to != a)) continue;
    xf.active = false;
    if (xf.start >= 0) {
      send_busy_[xf.from] = recv_busy_[xf.to] = 0;
      xf.cancelled = true;
    } else {
      std::erase(intents_, x);
      free_xfers_.give_back(x);
    }
    tasks_[xf.dst_task].lost = true;
    input_arrived(xf.dst_task);
  }
  arbitrate_ = true;
  fail_pending(out);
  if (!budget_.empty()) {  // it held nothing but its weights any more
    used_[a] = resident_[a];
    ++epoch_[a];
  }
  return Status::Ok();
}

Status EmulatedCluster::restore_accelerator(AccelId a) {
  if (a >= down_.size() || !down_[a])
    return FailedPrecondition("emulated cluster: accelerator " + std::to_string(a) + " is not lost");
  down_[a] = 0;
  return Status::Ok();
}

Status EmulatedCluster::set_memory(std::vector<std::int64_t> budgets, std::span<const std::int64_t> resident) {
  if (budgets.size() != ready_.size() || resident.size() != ready_.size())
    return InvalidArgument("emulated cluster: memory for " + std::to_string(budgets.size()) + " accelerator(s), " +
                           std::to_string(resident.size()) + " resident, cluster has " + std::to_string(ready_.size()));
  if (!tasks_.empty()) return FailedPrecondition("emulated cluster: memory is set before the first submit");
  for (std::size_t a = 0; a < budgets.size(); ++a)
    if (resident[a] > budgets[a])
      return ResourceExhausted("emulated cluster: accelerator " + std::to_string(a) + " holds " +
                               std::to_string(resident[a]) + " bytes of weights, over its " +
                               std::to_string(budgets[a]));
  budget_ = std::move(budgets);
  resident_.assign(resident.begin(), resident.end());
  used_ = resident_;
  peak_ = resident_;
  epoch_.assign(budget_.size(), 0);
  return Status::Ok();
}

void EmulatedCluster::charge(AccelId a, std::int64_t bytes) {
  if (budget_.empty()) return;
  used_[a] += bytes;
  if (used_[a] > peak_[a]) peak_[a] = used_[a];
}

// The ready operator of `a` to run now: the queue's best when it fits,
// else the best that fits (the head could otherwise wait for memory only a
// later operator frees), else none. The head waiting counts once.
std::uint32_t EmulatedCluster::pop_runnable(AccelId a) {
  auto& q = ready_[a];
  const std::uint32_t head = q.front().second;
  if (fits(a, tasks_[head].alloc)) {
    std::pop_heap(q.begin(), q.end(), RunsLater{});
    q.pop_back();
    return head;
  }
  if (!tasks_[head].waited) {
    tasks_[head].waited = true;
    ++memory_waits_;
  }
  std::size_t best = q.size();
  for (std::size_t i = 1; i < q.size(); ++i)
    if (fits(a, tasks_[q[i].second].alloc) && (best == q.size() || q[i].first < q[best].first)) best = i;
  if (best == q.size()) return kNoTask;
  const std::uint32_t task = q[best].second;
  q[best] = q.back();
  q.pop_back();
  std::make_heap(q.begin(), q.end(), RunsLater{});
  return task;
}

void EmulatedCluster::release(std::span<const Release> released) {
  if (budget_.empty()) return;
  for (const Release& r : released) {
    if (r.op >= held_.size()) continue;
    Held& h = held_[r.op];
    if (h.issue_seq != r.issue_seq || h.accel == kNoAccel || h.epoch != epoch_[h.accel]) continue;
    std::int64_t& bytes = r.value == Release::Value::kOutput ? h.out : h.retained;
    uncharge(h.accel, bytes);
    bytes = 0;
    // Something may fit now that waited: an idle accelerator with ready
    // work looks again, a refused receive is retried.
    if (running_[h.accel] == kNotRunning && !ready_[h.accel].empty()) mark_dirty(h.accel);
    if (refused_pending_) arbitrate_ = true;
  }
}

std::string EmulatedCluster::stall_reason() const {
  // Intents pending, nothing moving or running, the arbiter asked: it
  // started none of them.
  bool moving = false;
  for (AccelId a = 0; a < send_busy_.size(); ++a) moving = moving || send_busy_[a] || running_[a] != kNotRunning;
  if (!intents_.empty() && !moving && !refused_pending_)
    return arbiter_name_ + " started none of the " + std::to_string(intents_.size()) +
           " pending transfer(s), though every port is free";
  if (budget_.empty()) return {};
  for (AccelId a = 0; a < ready_.size(); ++a)
    if (running_[a] == kNotRunning && !ready_[a].empty()) {
      const Task& t = tasks_[ready_[a].front().second];
      return "out of memory in the emulated cluster: operator #" + std::to_string(t.op) + " on accelerator " +
             std::to_string(a) + " needs " + std::to_string(t.alloc) + " bytes, " +
             std::to_string(budget_[a] - used_[a]) + " of " + std::to_string(budget_[a]) + " are free";
    }
  if (refused_pending_ && !intents_.empty())
    return "out of memory in the emulated cluster: a transfer's receive does not fit its destination";
  return {};
}

Nanos EmulatedCluster::next_event() const {
  if (!fail_now_.empty() || !dirty_.empty() || (arbitrate_ && !intents_.empty())) return now_;
  return events_.empty() ? -1 : events_.top().t;
}

Status EmulatedCluster::advance_to(Nanos t, std::vector<Feedback>& out) {
  if (t < now_)
    return InvalidArgument("emulated cluster: cannot go back from " + std::to_string(now_) + " ns to " +
                           std::to_string(t) + " ns");
  for (;;) {
    fail_pending(out);
    if (Status s = start_ready(); !s.ok()) return s;
    if (events_.empty() || events_.top().t > t) break;
    now_ = events_.next_time();
    // Everything finishing at now_ lands before anything new starts.
    for (Event ev; events_.pop_at(now_, ev);) {
      if (ev.kind == kOpFinish)
        on_op_finish(ev.id, out);
      else
        on_transfer_finish(ev.id, out);
    }
  }
  now_ = t;
  return Status::Ok();
}

}  // namespace slicesched
