module;
#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

module slicesched.engine.tenant;

namespace slicesched {

namespace {
Nanos to_ns(double s) { return static_cast<Nanos>(s * 1e9 + 0.5); }
}  // namespace

Tenant::Tenant(std::uint32_t id, TenantSpec spec, TemplateId tmpl, std::shared_ptr<const Model> model)
    : id_(id),
      spec_(std::move(spec)),
      tmpl_(tmpl),
      model_(std::move(model)),
      lanes_(static_cast<std::size_t>(std::max(1, spec_.lanes))) {
  records_.reserve(spec_.requests.requests.size());
  redo_.assign(spec_.requests.requests.size(), 0);
  for (const Request& r : spec_.requests.requests)
    records_.push_back(
        {id_, to_ns(r.arrival_s), -1, -1, r.input_tokens, std::max<std::int64_t>(1, r.output_tokens), 0, {}, {}});
  stream_requests_ = records_.size();
}

void Tenant::drop_stream() {
  records_.clear();
  redo_.clear();
  next_request_ = stream_requests_ = 0;
}

void Tenant::submit(LiveRequest r, Nanos t) {
  const std::size_t i = records_.size();
  records_.push_back(
      {id_, t, -1, -1, static_cast<std::int64_t>(r.prompt.size()), std::max<std::int64_t>(1, r.max_tokens), 0, {}, {}});
  redo_.push_back(0);
  live_.emplace(i, Live{std::move(r.prompt), std::move(r.sink)});
  event(RequestEvent::Kind::kArrived, i, t);
  waiting_.push_back(i);
}

// Tells a submitted request's sink how it ended and lets go of its prompt
// and output (the sink has them).
void Tenant::end_live(std::size_t request) {
  auto it = live_.find(request);
  if (it == live_.end()) return;
  RequestRecord& r = records_[request];
  if (it->second.sink) it->second.sink->on_end(r.input_tokens, r.generated, r.error, r.done);
  live_.erase(it);
  r.tokens = {};
}

Nanos Tenant::next_arrival() const { return next_request_ < stream_requests_ ? records_[next_request_].arrival : -1; }

void Tenant::deliver_arrivals(Nanos t) {
  while (next_request_ < stream_requests_ && records_[next_request_].arrival <= t) {
    event(RequestEvent::Kind::kArrived, next_request_, records_[next_request_].arrival);
    waiting_.push_back(next_request_++);
  }
}

bool Tenant::finished() const { return !open_ && done_ == records_.size(); }

bool Tenant::idle() const {
  if (!waiting_.empty()) return false;
  for (const Lane& l : lanes_)
    if (l.in_flight) return false;
  return true;
}

std::int64_t Tenant::kv_held() const {
  std::int64_t kv = 0;
  for (const Lane& l : lanes_)
    // (a chunked prefill under way holds what it will cache in all)
    for (const Seq& s : l.running) kv += (spec_.chunked_prefill && s.prefill ? held(s.request) : s.context) + 1;
  return kv;
}

Result<int> Tenant::start_iterations(Gmg& gmg) {
  // The engine calls this at every event, for every tenant: look only at
  // free lanes that start() would change (work to run or admit, or an idle
  // cache to release), and allocate nothing.
  startable_.clear();
  for (Lane& l : lanes_)
    if (!l.in_flight && (!l.running.empty() || !waiting_.empty() || !l.kv_ops.empty() || l.kv_tokens != 0))
      startable_.push_back(&l);
  if (startable_.empty()) return 0;
  // Emptiest free lane first, so new requests spread over the lanes.
  // (A stable insertion sort: a handful of lanes, and no buffer to allocate.)
  for (std::size_t i = 1; i < startable_.size(); ++i)
    for (std::size_t j = i; j > 0 && startable_[j]->running.size() < startable_[j - 1]->running.size(); --j)
      std::swap(startable_[j], startable_[j - 1]);
  int started = 0;
  for (Lane* l : startable_) {
    auto r = start(*l, gmg);
    if (!r.ok()) return r.status();
    started += r.value();
  }
  return started;
}

// Starts `lane`'s next iteration if it has work; returns whether it did.
Result<bool> Tenant::start(Lane& lane, Gmg& gmg) {
  // Decodes first (each one token), then admit waiting prefills FIFO while
  // the token, sequence and KV budgets allow.
  std::int64_t tokens = 0;
  std::int64_t context = 0;
  for (const Seq& s : lane.running) {
    context += s.context;
    tokens += s.prefill ? 0 : 1;  // decodes first
  }
  std::int64_t kv_after = kv_held();
  bool admitted = false;
  // Chunked, prompts waiting that fit whole in half the budget join before
  // the chunks under way (vLLM's long_prefill_token_threshold, SGLang's
  // mixed chunk): a 3-token request's prefill rides in the next iteration
  // beside the next chunk of a 20k-token one, instead of a token at a time
  // in what the chunk left. The chunks keep at least the other half, so a
  // stream of short prompts slows a long prefill at most twofold.
  auto fits = [&](std::size_t request) {
    const RequestRecord& r = records_[request];
    return kv_after + r.input_tokens + r.output_tokens <= spec_.kv_budget_tokens || kv_after == 0;
  };
  if (spec_.chunked_prefill) {
    std::int64_t whole = 0;
    const std::int64_t share = std::max<std::int64_t>(1, spec_.token_budget / 2);
    while (!waiting_.empty() && static_cast<std::int64_t>(lane.running.size()) < spec_.max_seqs) {
      const std::int64_t prefill = held(waiting_.front());
      if (whole + prefill > share || tokens + prefill > spec_.token_budget || !fits(waiting_.front())) break;
      lane.running.push_back({waiting_.front(), 0, true, prefill});
      admitted = true;
      whole += prefill;
      tokens += prefill;
      kv_after += prefill;
      waiting_.pop_front();
    }
  }
  // A chunked prefill under way goes on with what the budget leaves (at
  // least a token: it never stalls).
  for (Seq& s : lane.running)
    if (s.prefill && s.context > 0) {
      s.chunk = std::min(held(s.request) - s.context, std::max<std::int64_t>(1, spec_.token_budget - tokens));
      tokens += s.chunk;
    }
  while (!waiting_.empty()) {
    const std::int64_t prefill = held(waiting_.front());
    // Chunked, a prompt is admitted while the budget has room and takes
    // what is left of it. Whole, the queue's head is admitted even over the
    // token budget (a long prompt must not wait for every decode to
    // drain). Never over the KV budget unless nothing else holds KV (then
    // it could never fit).
    const std::int64_t chunk =
        spec_.chunked_prefill ? std::min(prefill, std::max<std::int64_t>(1, spec_.token_budget - tokens)) : prefill;
    const bool tokens_ok = spec_.chunked_prefill ? tokens < spec_.token_budget || !admitted
                                                 : tokens + prefill <= spec_.token_budget || !admitted;
    const bool kv_ok = fits(waiting_.front());
    const bool seqs_ok = static_cast<std::int64_t>(lane.running.size()) < spec_.max_seqs;
    if (!(tokens_ok && kv_ok && seqs_ok)) break;
    lane.running.push_back({waiting_.front(), 0, true, chunk});
    admitted = true;
    tokens += chunk;
    kv_after += prefill;
    waiting_.pop_front();
  }
  if (tokens == 0) {
    // Idle: nobody will take the cache over.
    for (OpId op : lane.kv_ops)
      if (Status s = gmg.release_retained(op); !s.ok()) return s;
    lane.kv_ops.clear();
    lane.kv_tokens = 0;
    return false;
  }
  const GraphTemplate& tmpl = gmg.templates().get(tmpl_);
  InstanceSpec spec;
  spec.tmpl = tmpl_;
  spec.priority = spec_.priority;
  spec.tenant = id_;
  const IterationDims dims{tokens, static_cast<std::int64_t>(lane.running.size()), context, lane.kv_tokens};
  if (model_)
    spec.dims = model_->bind(dims);
  else
    spec.dims = {
        {"tokens", dims.tokens}, {"sequences", dims.sequences}, {"context", dims.context}, {"kv_prev", dims.kv_prev}};
  for (OpId op : lane.kv_ops) {
    // Each retaining op attaches through the port its template op reads.
    const auto& top = tmpl.ops()[gmg.op(op).tmpl_op];
    for (const auto& in : top.inputs)
      if (in.is_port) spec.ports.push_back({in.from, op, true});
  }
  auto inst = gmg.instantiate(spec);
  if (!inst.ok()) return inst.status();
  lane.attached = std::move(lane.kv_ops);
  lane.kv_ops.clear();
  for (OpId op : inst->ops)
    if (gmg.op(op).retained_bytes > 0) lane.kv_ops.push_back(op);
  lane.iter_ops = inst->ops;
  lane.instance = inst->id;
  lane.head = model_ ? inst->ops[model_->sampler()] : inst->ops.back();  // (without a model: the last op samples)
  if (iteration_events_)
    for (const Seq& q : lane.running) event(RequestEvent::Kind::kIteration, q.request, gmg.now(), inst->id);
  if (prompts_) {
    IterationPlan plan;
    plan.tenant = id_;
    for (const Seq& q : lane.running) {
      const RequestRecord& r = records_[q.request];
      IterationPlan::Seq p;
      p.seq = q.request;
      p.position = q.context;
      if (q.prefill) {
        const auto live = live_.find(q.request);
        p.tokens = live != live_.end() ? live->second.prompt : prompts_(q.request, r.input_tokens);
        // A rebuilt sequence prefills what it held: its prompt and the
        // tokens it generated before the loss.
        p.tokens.insert(p.tokens.end(), r.tokens.begin(), r.tokens.end());
        // This iteration's chunk of it, after what is cached.
        if (q.context > 0 || q.chunk < static_cast<std::int64_t>(p.tokens.size()))
          p.tokens = std::vector<std::int64_t>(p.tokens.begin() + q.context, p.tokens.begin() + q.context + q.chunk);
      } else {
        p.tokens = {r.tokens.back()};
      }
      plan.seqs.push_back(std::move(p));
    }
    plans_.emplace_back(inst->id, std::move(plan));
  }
  lane.kv_tokens = context + tokens;
  lane.in_flight = true;
  return true;
}

void Tenant::on_op_done(const Feedback& f, Gmg& gmg) {
  const OpId op = f.op;
  const Nanos t = f.t;
  for (Lane& lane : lanes_) {
    if (!lane.in_flight || op != lane.head) continue;
    lane.in_flight = false;
    if (f.lost) {
      // Lost with an accelerator: the iteration is redone. Its sequences
      // queue again first, in order, and prefill what they hold.
      for (auto s = lane.running.rbegin(); s != lane.running.rend(); ++s) {
        rebuilt_ += s->context > 0;
        redo_[s->request] = records_[s->request].generated;
        waiting_.push_front(s->request);
      }
      drop_iteration(lane, gmg);
      return;
    }
    std::string error = f.error;
    if (!f.failed && prompts_ && f.tokens.size() != lane.running.size())
      error = "the head sampled " + std::to_string(f.tokens.size()) + " token(s) for " +
              std::to_string(lane.running.size()) + " sequence(s)";
    if (f.failed || !error.empty()) {
      // The iteration's requests fail; the lane's KV chain is lost with it.
      for (const Seq& s : lane.running) {
        RequestRecord& r = records_[s.request];
        r.error = error.empty() ? "operator failed" : error;
        r.done = t;
        ++done_;
        event(RequestEvent::Kind::kFailed, s.request, t);
        end_live(s.request);
      }
      drop_iteration(lane, gmg);
      return;
    }
    std::size_t i = 0;
    std::vector<Seq> still;
    for (Seq& s : lane.running) {
      if (is_abandoned(s.request)) {  // its client left: out of the batch, no token
        ++i;
        end_abandoned(s.request, t);
        continue;
      }
      if (s.prefill && s.context + s.chunk < held(s.request)) {
        // A chunk of a prefill: cached, and what the head sampled after
        // it is no output token (the prompt goes on).
        ++i;
        s.context += s.chunk;
        still.push_back(s);
        continue;
      }
      RequestRecord& r = records_[s.request];
      if (prompts_) {
        r.tokens.push_back(f.tokens[i]);
        if (s.request >= stream_requests_)
          if (auto live = live_.find(s.request); live != live_.end() && live->second.sink)
            live->second.sink->on_token(f.tokens[i], t);
      }
      ++i;
      if (s.prefill) {
        if (r.first_token < 0) {  // (a rebuilt sequence keeps its first token's time)
          r.first_token = t;
          event(RequestEvent::Kind::kFirstToken, s.request, t);
        }
        s.context = r.input_tokens + redo_[s.request];
        redo_[s.request] = 0;
        s.prefill = false;
      } else {
        s.context += 1;
      }
      if (++r.generated >= r.output_tokens) {
        r.done = t;
        ++done_;
        event(RequestEvent::Kind::kDone, s.request, t);
        end_live(s.request);
      } else {
        still.push_back(s);
      }
    }
    lane.running = std::move(still);
    return;
  }
}

// The lane's sequences are gone from it and its KV chain is released: the
// iteration failed or was lost.
void Tenant::drop_iteration(Lane& lane, Gmg& gmg) {
  lane.running.clear();
  for (OpId kv : lane.kv_ops)
    if (gmg.contains(kv) && gmg.op(kv).retained_held && !gmg.op(kv).retained_attached) (void)gmg.release_retained(kv);
  lane.kv_ops.clear();
  lane.attached.clear();
  lane.iter_ops.clear();
  lane.kv_tokens = 0;
}

bool Tenant::is_abandoned(std::size_t request) const {
  if (request < stream_requests_) return false;
  const auto it = live_.find(request);
  return it != live_.end() && it->second.sink && it->second.sink->abandoned();
}

void Tenant::end_abandoned(std::size_t request, Nanos t) {
  RequestRecord& r = records_[request];
  r.error = kAbandonedError;
  r.done = t;
  ++done_;
  ++abandoned_;
  event(RequestEvent::Kind::kFailed, request, t);
  end_live(request);
}

std::size_t Tenant::drop_abandoned(Nanos t) {
  if (live_.empty()) return 0;
  std::vector<std::size_t> gone;
  for (const auto& [request, live] : live_)
    if (live.sink && live.sink->abandoned()) gone.push_back(request);
  if (gone.empty()) return 0;
  std::size_t ended = 0;
  for (std::size_t request : gone) {
    if (auto w = std::find(waiting_.begin(), waiting_.end(), request); w != waiting_.end()) {
      waiting_.erase(w);
      end_abandoned(request, t);
      ++ended;
      continue;
    }
    for (Lane& lane : lanes_) {
      if (lane.in_flight) continue;  // (leaves at its iteration's end)
      auto s =
          std::find_if(lane.running.begin(), lane.running.end(), [&](const Seq& x) { return x.request == request; });
      if (s == lane.running.end()) continue;
      lane.running.erase(s);
      end_abandoned(request, t);
      ++ended;
      break;
    }
  }
  return ended;
}

Tenant::Lane* Tenant::unstarted(InstanceId instance, const Gmg& gmg) {
  for (Lane& l : lanes_) {
    if (!l.in_flight || l.instance != instance || l.iter_ops.empty()) continue;
    for (OpId op : l.iter_ops)
      if (!gmg.contains(op) || gmg.op(op).state != OpState::kUnscheduled) return nullptr;
    return &l;
  }
  return nullptr;
}

std::optional<InstanceId> Tenant::preemptable(const Gmg& gmg, AccelId on) const {
  std::optional<InstanceId> best;
  for (const Lane& l : lanes_) {
    if (!l.in_flight || l.attached.empty() || (best && l.instance < *best)) continue;
    bool here = on == kNoAccel;
    for (OpId kv : l.attached) here = here || (gmg.contains(kv) && gmg.op(kv).accel == on);
    if (!here) continue;
    bool unstarted = !l.iter_ops.empty();
    for (OpId op : l.iter_ops) unstarted = unstarted && gmg.contains(op) && gmg.op(op).state == OpState::kUnscheduled;
    if (unstarted) best = l.instance;
  }
  return best;
}

// Takes the lane's unstarted iteration out of the GMG and releases the KV
// cache it would have taken over; the lane is free and empty after.
Status Tenant::take_back(Lane& lane, Gmg& gmg) {
  if (Status s = gmg.cancel(lane.iter_ops); !s.ok()) return s;
  for (OpId kv : lane.attached)
    if (gmg.contains(kv) && gmg.op(kv).retained_held && !gmg.op(kv).retained_attached)
      if (Status s = gmg.release_retained(kv); !s.ok()) return s;
  lane.running.clear();
  lane.kv_ops.clear();
  lane.attached.clear();
  lane.iter_ops.clear();
  lane.kv_tokens = 0;
  lane.head = kNoOp;
  lane.in_flight = false;
  return Status::Ok();
}

Result<std::size_t> Tenant::preempt(InstanceId instance, Gmg& gmg) {
  Lane* lane = unstarted(instance, gmg);
  if (!lane) return std::size_t{0};
  const std::vector<Seq> seqs = lane->running;
  if (Status s = take_back(*lane, gmg); !s.ok()) return s;
  // Queued again first, in order: a decode recomputes what it generated
  // (its prefill covers prompt and output so far); an admitted prefill
  // keeps what it had to recompute.
  for (auto s = seqs.rbegin(); s != seqs.rend(); ++s) {
    if (!s->prefill) redo_[s->request] = records_[s->request].generated;
    waiting_.push_front(s->request);
  }
  ++preemptions_;
  preempted_sequences_ += seqs.size();
  return seqs.size();
}

Result<std::size_t> Tenant::fail_out_of_memory(InstanceId instance, const std::string& reason, Gmg& gmg, Nanos t) {
  Lane* lane = unstarted(instance, gmg);
  if (!lane) return std::size_t{0};
  const std::vector<Seq> seqs = lane->running;
  if (Status s = take_back(*lane, gmg); !s.ok()) return s;
  // The sequence that needs the most fails; the others queue again first
  // (they may fit without it), as a preemption would requeue them.
  auto need = [&](const Seq& q) { return q.prefill ? records_[q.request].input_tokens + redo_[q.request] : q.context; };
  std::size_t worst = 0;
  for (std::size_t i = 1; i < seqs.size(); ++i)
    if (need(seqs[i]) > need(seqs[worst])) worst = i;
  for (std::size_t i = seqs.size(); i-- > 0;) {
    if (i == worst) continue;
    if (!seqs[i].prefill) redo_[seqs[i].request] = records_[seqs[i].request].generated;
    waiting_.push_front(seqs[i].request);
  }
  RequestRecord& r = records_[seqs[worst].request];
  r.error = reason;
  r.done = t;
  ++done_;
  event(RequestEvent::Kind::kFailed, seqs[worst].request, t);
  end_live(seqs[worst].request);
  return std::size_t{1};
}

void Tenant::fail_unfinished(const std::string& reason, Nanos t) {
  auto fail = [&](std::size_t i) {
    RequestRecord& r = records_[i];
    if (r.done >= 0) return;
    r.error = reason;
    r.done = t;
    ++done_;
    event(RequestEvent::Kind::kFailed, i, t);
    end_live(i);
  };
  for (std::size_t i : waiting_) fail(i);
  waiting_.clear();
  for (Lane& l : lanes_) {
    for (const Seq& s : l.running) fail(s.request);
    l.running.clear();
    l.in_flight = false;
  }
}

}  // namespace slicesched
