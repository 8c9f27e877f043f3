module;
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

module slicesched.engine.tenant;
import slicesched.core.graph;

namespace slicesched {

namespace {
Nanos to_ns(double s) { return static_cast<Nanos>(s * 1e9 + 0.5); }
}  // namespace

Tenant::Tenant(std::uint32_t id, TenantSpec spec, TemplateId tmpl, std::shared_ptr<const Model> model)
    : id_(id),
      spec_(std::move(spec)),
      tmpl_(tmpl),
      model_(std::move(model)),
      lanes_(static_cast<std::size_t>(std::max(1, spec_.lanes) + std::max(0, spec_.prefill_lanes))) {
  // The prefill lanes come last: a decode lane is the emptiest on a tie.
  for (std::size_t i = static_cast<std::size_t>(std::max(1, spec_.lanes)); i < lanes_.size(); ++i)
    lanes_[i].prefill_only = true;
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
  live_.emplace(i, Live{std::move(r.prompt), std::move(r.sink), std::move(r.sampling)});
  event(RequestEvent::Kind::kArrived, i, t);
  waiting_.push_back(i);
}

// Tells a submitted request's sink how it ended and lets go of its prompt
// and output (the sink has them).
void Tenant::fail_request(std::size_t request, std::string reason, Nanos t) {
  RequestRecord& r = records_[request];
  r.error = std::move(reason);
  r.done = t;
  ++done_;
  event(RequestEvent::Kind::kFailed, request, t);
  end_live(request);
}

void Tenant::end_live(std::size_t request) {
  auto it = live_.find(request);
  if (it == live_.end()) return;
  RequestRecord& r = records_[request];
  if (it->second.sink) it->second.sink->on_end(r.input_tokens, r.generated, r.error, r.done);
  live_.erase(it);
  r.tokens = {};
}

Nanos Tenant::next_arrival() const {
  const Nanos next = next_request_ < stream_requests_ ? records_[next_request_].arrival : -1;
  const Nanos back = next_return();
  return next < 0 || (back >= 0 && back < next) ? back : next;
}

Nanos Tenant::next_return() const {
  // The fronts are the earliest: each preemption's or hand-off's copies
  // follow the one before on the host link.
  Nanos next = swapped_.empty() ? -1 : swapped_.front().back;
  if (!handoffs_.empty() && (next < 0 || handoffs_.front().ready < next)) next = handoffs_.front().ready;
  return next;
}

void Tenant::return_swapped(Nanos t) {
  std::size_t n = 0;
  while (n < swapped_.size() && swapped_[n].back <= t) ++n;
  // Queued again first, in preemption order, each with its cache.
  for (std::size_t i = n; i-- > 0;) {
    swapped_in_[swapped_[i].request] = swapped_[i].tokens;
    waiting_.push_front(swapped_[i].request);
  }
  swapped_.erase(swapped_.begin(), swapped_.begin() + static_cast<std::ptrdiff_t>(n));
}

void Tenant::deliver_arrivals(Nanos t) {
  while (next_request_ < stream_requests_ && records_[next_request_].arrival <= t) {
    const std::size_t i = next_request_++;
    RequestRecord& r = records_[i];
    event(RequestEvent::Kind::kArrived, i, r.arrival);
    if (std::string why = never_rides(r); !why.empty()) {
      // Failed at once: left queued, it would hold the riders behind it
      // back for good, and the run would end in a deadlock.
      fail_request(i, std::move(why), r.arrival);
      continue;
    }
    waiting_.push_back(i);
  }
}

std::string Tenant::never_rides(const RequestRecord& r) const {
  if (!rides_only_ || hosts_.empty()) return {};
  const std::int64_t need = r.input_tokens + r.output_tokens;
  std::string budgets;
  for (const Tenant* h : hosts_) {
    // A peer is seated as the host's own, alone over the budget if need be.
    if (h->peer(*this) || need <= h->spec_.kv_budget_tokens) return {};
    budgets += (budgets.empty() ? "" : ", ") + h->spec_.name + ": " + std::to_string(h->spec_.kv_budget_tokens);
  }
  return "its prompt and output need " + std::to_string(need) +
         " tokens of KV cache, more than any tenant it rides in may hold (kv_budget_tokens: " + budgets + ")";
}

bool Tenant::finished() const { return !open_ && done_ == records_.size(); }

bool Tenant::idle() const {
  if (!waiting_.empty() || !swapped_.empty() || !handoffs_.empty() || !handed_.empty()) return false;
  for (const Lane& l : lanes_)
    if (l.in_flight) return false;
  return true;
}

std::int64_t Tenant::kv_held(bool riders) const {
  std::int64_t kv = 0;
  for (const Lane& l : lanes_)
    // (a prefill, whole or a chunk under way, holds what it will cache in
    // all: also one in flight in another lane, whose context is not yet
    // counted)
    for (const Seq& s : l.running) {
      if (!seated_as_own(s) && !riders) continue;
      kv += (s.prefill ? (s.owner ? s.owner->held(s.request) : held(s.request)) : s.context) + 1;
    }
  // A hand-off on its way to a decode lane keeps its room.
  for (const std::deque<Handoff>* q : {&handoffs_, &handed_})
    for (const Handoff& h : *q) kv += h.seq.context + 1;
  return kv;
}

Result<int> Tenant::start_iterations(Gmg& gmg) {
  // The engine calls this at every event, for every tenant: look only at
  // free lanes that start() would change (work to run or admit, or an idle
  // cache to release), and allocate nothing.
  if (!swapped_.empty()) return_swapped(gmg.now());
  while (!handoffs_.empty() && handoffs_.front().ready <= gmg.now()) {
    handed_.push_back(handoffs_.front());
    handoffs_.pop_front();
  }
  startable_.clear();
  if (rides_only_) return 0;  // (its requests ride in other tenants' iterations)
  const bool riders = riders_waiting();
  for (Lane& l : lanes_)
    if (!l.in_flight && (!l.running.empty() || !waiting_.empty() || riders || !l.kv_ops.empty() || l.kv_tokens != 0 ||
                         (!l.prefill_only && !handed_.empty())))
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
  // Riders are seated after (seat_riders): they take what is left.
  std::int64_t tokens = 0;
  std::int64_t context = 0;
  std::int64_t mine = 0;  // the lane's own sequences (riders are seated after)
  for (const Seq& s : lane.running) {
    if (!seated_as_own(s)) continue;
    ++mine;
    context += s.context;
    tokens += s.prefill ? 0 : 1;  // decodes first
  }
  std::int64_t kv_after = kv_held(false);
  bool admitted = false;
  // Prefill lanes: only prompts here, only decodes (and riders) in the
  // other lanes, which seat the hand-offs that landed first, oldest first
  // (their room is counted already).
  const bool prompts_here = !disaggregated() || lane.prefill_only;
  if (disaggregated() && !lane.prefill_only)
    while (!handed_.empty() && mine < spec_.max_seqs && (tokens + 1 <= spec_.token_budget || !admitted)) {
      lane.running.push_back(handed_.front().seq);
      handed_.pop_front();
      context += lane.running.back().context;
      ++mine;
      ++tokens;
      admitted = true;
    }
  // A prefill lane starts no more sequences than the decode lanes have
  // seats for (max_seqs each), counting those prefilling or on their way:
  // past that, hand-offs would queue and their decodes wait, unseen by TTFT.
  std::int64_t seats = INT64_MAX;
  if (lane.prefill_only) {
    seats = spec_.max_seqs * std::max(1, spec_.lanes) - static_cast<std::int64_t>(handoffs_.size() + handed_.size());
    for (const Lane& l : lanes_)
      for (const Seq& q : l.running) seats -= seated_as_own(q);
  }
  // An iteration of ours waits for its pinned accelerators' HBM
  // (note_memory_wait): nothing new starts until it runs.
  bool memory_short = false;
  if (!memory_waits_.empty())
    for (const Lane& l : lanes_)
      memory_short = memory_short || (l.in_flight && std::find(memory_waits_.begin(), memory_waits_.end(),
                                                               l.instance) != memory_waits_.end());
  // Of `o`'s requests: this tenant's own, or a peer's.
  auto fits = [&](const Tenant& o, std::size_t request) {
    const RequestRecord& r = o.records_[request];
    if (memory_short) return false;
    return seats > 0 && (kv_after + r.input_tokens + r.output_tokens <= kv_budget() || kv_after == 0);
  };
  // The head of `o`'s queue joins the lane, taking `step` tokens of this
  // iteration and `kv` tokens of cache.
  auto admit = [&](Tenant& o, const Seq& s, std::int64_t step, std::int64_t kv) {
    lane.running.push_back(s);
    --seats;
    ++mine;
    admitted = true;
    tokens += step;
    kv_after += kv;
    o.waiting_.pop_front();
  };
  // The head of `o`'s queue joins as a prompt, if the budgets allow.
  // Chunked, a prompt is admitted while the budget has room and takes what
  // is left of it. Whole, the queue's head is admitted even over the token
  // budget (a long prompt must not wait for every decode to drain). Never
  // over the KV budget unless nothing else holds KV (then it could never
  // fit).
  auto admit_prompt = [&](Tenant& o) {
    const std::size_t r = o.waiting_.front();
    const std::int64_t prefill = o.held(r);
    const std::int64_t chunk =
        spec_.chunked_prefill ? std::min(prefill, std::max<std::int64_t>(1, spec_.token_budget - tokens)) : prefill;
    const bool tokens_ok = spec_.chunked_prefill ? tokens < spec_.token_budget || !admitted
                                                 : tokens + prefill <= spec_.token_budget || !admitted;
    if (!(tokens_ok && fits(o, r) && mine < spec_.max_seqs)) return false;
    admit(o, {r, 0, true, chunk, &o == this ? nullptr : &o}, chunk, prefill);
    return true;
  };
  // Chunked, prompts waiting that fit whole in half the budget join before
  // the chunks under way (vLLM's long_prefill_token_threshold, SGLang's
  // mixed chunk): a 3-token request's prefill rides in the next iteration
  // beside the next chunk of a 20k-token one, instead of a token at a time
  // in what the chunk left. The chunks keep at least the other half, so a
  // stream of short prompts slows a long prefill at most twofold. (A
  // sequence back from host memory is a decode: the loop below takes it.)
  if (spec_.chunked_prefill && prompts_here) {
    std::int64_t whole = 0;
    const std::int64_t share = std::max<std::int64_t>(1, spec_.token_budget / 2);
    while (!waiting_.empty() && mine < spec_.max_seqs && !swapped_in_.contains(waiting_.front())) {
      const std::int64_t prefill = held(waiting_.front());
      if (whole + prefill > share || tokens + prefill > spec_.token_budget || !fits(*this, waiting_.front())) break;
      whole += prefill;
      admit(*this, {waiting_.front(), 0, true, prefill}, prefill, prefill);
    }
  }
  // A chunked prefill under way goes on with what the budget leaves (at
  // least a token: it never stalls).
  for (Seq& s : lane.running)
    if (s.prefill && seated_as_own(s) && s.context > 0) {
      s.chunk = std::min(own(s).held(s.request) - s.context, std::max<std::int64_t>(1, spec_.token_budget - tokens));
      tokens += s.chunk;
    }
  while (!waiting_.empty()) {
    if (auto back = swapped_in_.find(waiting_.front()); back != swapped_in_.end()) {
      // Back from host memory with its cache: a decode again (one token),
      // attending what it had cached.
      if (lane.prefill_only || !(tokens + 1 <= spec_.token_budget || !admitted) || !fits(*this, waiting_.front()) ||
          mine >= spec_.max_seqs)
        break;
      const Seq s{waiting_.front(), back->second, false, 0, nullptr, true};
      swapped_in_.erase(back);
      context += s.context;
      admit(*this, s, 1, s.context + 1);
      continue;
    }
    if (!prompts_here || !admit_prompt(*this)) break;
  }
  // Peers (riders at this tenant's priority or above: tenants that share its
  // engine) are admitted as its own prompts are, after them, the oldest
  // request of any peer first.
  while (Tenant* o = prompts_here ? oldest_source([&](const Tenant& t) { return peer(t); }) : nullptr)
    if (!admit_prompt(*o)) break;
  if (!sources_.empty() && !lane.prefill_only) seat_riders(lane, tokens, context, kv_after);
  // Idle, or only new sequences (prompts from the start, caches back from
  // host memory): nobody takes the lane's cache over. Held on, the cache
  // of sequences that finished kept its room until each layer group ran
  // again, and a 7,500-token prompt that fit alone failed out of memory
  // behind it.
  const bool takes_over =
      std::any_of(lane.running.begin(), lane.running.end(), [](const Seq& q) { return q.context > 0 && !q.from_host; });
  if (tokens == 0 || !takes_over) {
    for (OpId op : lane.kv_ops)
      if (Status s = gmg.release_retained(op); !s.ok()) return s;
    lane.kv_ops.clear();
    lane.kv_tokens = 0;
    lane.cache_lost = false;  // (whatever of it was lost is dropped with it)
    if (tokens == 0) return false;
  }
  const GraphTemplate& tmpl = gmg.templates().get(tmpl_);
  InstanceSpec spec;
  spec.tmpl = tmpl_;
  spec.priority = spec_.priority;
  // An iteration of riders alone runs at their priority, not this tenant's;
  // one that seats a peer of higher priority runs at the peer's.
  if (std::all_of(lane.running.begin(), lane.running.end(), [](const Seq& q) { return q.owner != nullptr; }))
    for (const Seq& q : lane.running) spec.priority = std::min(spec.priority, q.owner->spec_.priority);
  for (const Seq& q : lane.running)
    if (q.owner && peer(*q.owner)) spec.priority = std::max(spec.priority, q.owner->spec_.priority);
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
    for (const Seq& q : lane.running) own(q).event(RequestEvent::Kind::kIteration, q.request, gmg.now(), inst->id);
  for (const Seq& q : lane.running) rider_steps_ += q.owner != nullptr;
  if (prompts_) {
    IterationPlan plan;
    plan.tenant = id_;
    for (const Seq& q : lane.running) {
      Tenant& o = own(q);
      const RequestRecord& r = o.records_[q.request];
      IterationPlan::Seq p;
      p.seq = plan_id(q);
      p.position = q.context;
      p.from_host = q.from_host;
      const auto live = o.live_.find(q.request);
      if (live != o.live_.end() && live->second.sampling) {
        p.sampling = live->second.sampling;
        if (p.sampling->penalized()) {
          p.history = live->second.prompt;
          p.history.insert(p.history.end(), r.tokens.begin(), r.tokens.end());
          p.prompt_tokens = static_cast<std::int64_t>(live->second.prompt.size());
        }
      }
      if (q.prefill) {
        p.tokens = live != o.live_.end() ? live->second.prompt : o.prompts_(q.request, r.input_tokens);
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
  // (From now on their caches are the lane's.)
  for (Seq& q : lane.running) q.from_host = false;
  lane.kv_prev = lane.kv_tokens;
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
        Tenant& o = own(*s);
        o.rebuilt_ += s->context > 0;
        o.redo_[s->request] = o.records_[s->request].generated;
        o.waiting_.push_front(s->request);
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
        own(s).fail_request(s.request, error.empty() ? "operator failed" : error, t);
      }
      drop_iteration(lane, gmg);
      return;
    }
    std::size_t i = 0;
    std::vector<Seq> still;
    for (Seq& s : lane.running) {
      Tenant& o = own(s);
      if (o.is_abandoned(s.request)) {  // its client left: out of the batch, no token
        ++i;
        o.end_abandoned(s.request, t);
        continue;
      }
      if (s.prefill && s.context + s.chunk < o.held(s.request)) {
        // A chunk of a prefill: cached, and what the head sampled after
        // it is no output token (the prompt goes on).
        ++i;
        s.context += s.chunk;
        still.push_back(s);
        continue;
      }
      RequestRecord& r = o.records_[s.request];
      bool complete = false;  // the sink saw a stop condition
      if (prompts_) {
        r.tokens.push_back(f.tokens[i]);
        if (s.request >= o.stream_requests_)
          if (auto live = o.live_.find(s.request); live != o.live_.end() && live->second.sink) {
            if (i < f.logprobs.size() && live->second.sampling && live->second.sampling->logprobs >= 0)
              live->second.sink->on_logprob(f.logprobs[i]);
            live->second.sink->on_token(f.tokens[i], t);
            complete = live->second.sink->complete();
          }
      }
      ++i;
      if (s.prefill) {
        if (r.first_token < 0) {  // (a rebuilt sequence keeps its first token's time)
          r.first_token = t;
          o.event(RequestEvent::Kind::kFirstToken, s.request, t);
        }
        s.context = r.input_tokens + o.redo_[s.request];
        o.redo_[s.request] = 0;
        s.prefill = false;
      } else {
        s.context += 1;
      }
      if (++r.generated >= r.output_tokens || complete) {
        r.stopped = complete;
        r.done = t;
        ++o.done_;
        o.event(RequestEvent::Kind::kDone, s.request, t);
        o.end_live(s.request);
      } else {
        still.push_back(s);
      }
    }
    lane.running = std::move(still);
    if (lane.prefill_only) hand_off(lane, gmg, t);
    return;
  }
}

void Tenant::hand_off(Lane& lane, const Gmg& gmg, Nanos t) {
  std::vector<Seq> keep, go;
  for (const Seq& s : lane.running) (s.prefill ? keep : go).push_back(s);
  if (go.empty()) return;
  if (lane.cache_lost) {
    // What it would hand off went with an accelerator, and so did the part
    // of the prompts still prefilling (chunked) that they built on it: each
    // queues again first and prefills what it holds, as a lost iteration's
    // do. The lane is left empty, so its next start drops the lost cache
    // (kept, a chunk under way took it over and every hand-off after was
    // rebuilt: nothing finished after a 10-ms fault).
    for (auto s = lane.running.rbegin(); s != lane.running.rend(); ++s) {
      Tenant& o = own(*s);
      o.rebuilt_ += s->context > 0;
      o.redo_[s->request] = o.records_[s->request].generated;
      o.waiting_.push_front(s->request);
    }
    lane.running.clear();
    return;
  }
  const double per_token = bytes_per_token(lane.kv_ops, lane.kv_tokens, gmg);
  std::int64_t bytes = 0;
  for (const Seq& s : go) bytes += static_cast<std::int64_t>(per_token * static_cast<double>(s.context));
  const Nanos back = book_host_link(bytes, t, go.size(), true);
  HostCopy c{lane.kv_ops, {}};
  for (Seq& s : go) {
    s.from_host = true;
    c.seqs.push_back(plan_id(s));
    handoffs_.push_back({s, back});
  }
  if (prompts_) host_copies_.push_back(std::move(c));  // (before the lane's cache is released)
  handed_off_ += go.size();
  handoff_bytes_ += bytes;
  lane.running = std::move(keep);
}

double Tenant::bytes_per_token(const std::vector<OpId>& kv, std::int64_t tokens, const Gmg& gmg) {
  std::int64_t bytes = 0;
  for (OpId op : kv)
    if (gmg.contains(op)) bytes += gmg.op(op).retained_bytes;
  return tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0;
}

Nanos Tenant::book_host_link(std::int64_t bytes, Nanos t, std::size_t sequences, bool handoff) {
  const double one_way = spec_.host_link_bytes_per_s > 0 ? static_cast<double>(bytes) / spec_.host_link_bytes_per_s : 0;
  const Nanos copy = spec_.host_link_latency + static_cast<Nanos>(one_way * 1e9);
  const Nanos start = std::max(host_link_free_, t);
  host_link_log_.push_back({start, copy, bytes, static_cast<std::uint32_t>(sequences), handoff});
  host_link_free_ = start + 2 * copy;
  return host_link_free_;
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
  lane.cache_lost = false;
}

bool Tenant::is_abandoned(std::size_t request) const {
  if (request < stream_requests_) return false;
  const auto it = live_.find(request);
  return it != live_.end() && it->second.sink && it->second.sink->abandoned();
}

void Tenant::end_abandoned(std::size_t request, Nanos t) {
  ++abandoned_;
  fail_request(request, kAbandonedError, t);
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
      // Back from host memory but not yet running: its copy goes too.
      if (swapped_in_.erase(request) > 0 && prompts_) host_copies_.push_back({{}, {request}});
      end_abandoned(request, t);
      ++ended;
      continue;
    }
    // Handed off by a prefill lane: the copy goes too. (A peer's hand-off
    // is its host's; it leaves at its next iteration's end.)
    bool handed = false;
    for (std::deque<Handoff>* q : {&handoffs_, &handed_}) {
      auto h = std::find_if(q->begin(), q->end(),
                            [&](const Handoff& x) { return !x.seq.owner && x.seq.request == request; });
      if (h == q->end()) continue;
      q->erase(h);
      if (prompts_) host_copies_.push_back({{}, {request}});
      end_abandoned(request, t);
      ++ended;
      handed = true;
      break;
    }
    if (handed) continue;
    for (Lane& lane : lanes_) {
      if (lane.in_flight) continue;  // (leaves at its iteration's end)
      auto s = std::find_if(lane.running.begin(), lane.running.end(),
                            [&](const Seq& x) { return !x.owner && x.request == request; });
      if (s == lane.running.end()) continue;
      lane.running.erase(s);
      end_abandoned(request, t);
      ++ended;
      break;
    }
  }
  return ended;
}

namespace {

// Whether `op` is still an operator of `instance`: a done one retires, and
// its slot may hold another instance's operator since.
bool ours(const Gmg& gmg, OpId op, InstanceId instance) { return gmg.contains(op) && gmg.op(op).instance == instance; }

}  // namespace

Tenant::Lane* Tenant::unstarted(InstanceId instance, const Gmg& gmg) {
  for (Lane& l : lanes_) {
    if (!l.in_flight || l.instance != instance || l.iter_ops.empty()) continue;
    for (OpId op : l.iter_ops)  // (one retired is done: the iteration started)
      if (!ours(gmg, op, instance) || gmg.op(op).state != OpState::kUnscheduled) return nullptr;
    return &l;
  }
  return nullptr;
}

Tenant::Lane* Tenant::stuck(InstanceId instance, const Gmg& gmg) {
  for (Lane& l : lanes_) {
    if (!l.in_flight || l.instance != instance || l.iter_ops.empty()) continue;
    bool done = false, left = false;
    for (OpId op : l.iter_ops) {
      if (!ours(gmg, op, instance)) continue;  // (done and retired, its slot maybe reused)
      const OpState st = gmg.op(op).state;
      if (st == OpState::kIssued) return nullptr;
      done = done || st == OpState::kDone;
      left = left || st == OpState::kUnscheduled;
    }
    return done && left ? &l : nullptr;
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
    for (OpId op : l.iter_ops)
      unstarted = unstarted && ours(gmg, op, l.instance) && gmg.op(op).state == OpState::kUnscheduled;
    if (unstarted) best = l.instance;
  }
  return best;
}

// Takes the lane's iteration, unstarted or stuck part way with nothing
// issued, out of the GMG and releases the KV caches it made or would have
// taken over; the lane is free and empty after.
Status Tenant::take_back(Lane& lane, Gmg& gmg) {
  // What is left of it leaves the GMG: all of it before it starts, the
  // unscheduled rest of one stuck part way (the outputs its done operators
  // held go with their consumers).
  std::vector<OpId> left;
  for (OpId op : lane.iter_ops)
    if (ours(gmg, op, lane.instance) && gmg.op(op).state == OpState::kUnscheduled) left.push_back(op);
  if (Status s = gmg.cancel(left); !s.ok()) return s;
  // The caches its done operators made (by instance: a slot is reused once
  // retired), and the one it took over (attached to what was just
  // cancelled: still its).
  for (OpId kv : lane.kv_ops)
    if (ours(gmg, kv, lane.instance) && gmg.op(kv).retained_held && !gmg.op(kv).retained_attached)
      if (Status s = gmg.release_retained(kv); !s.ok()) return s;
  for (OpId kv : lane.attached)
    if (gmg.contains(kv) && gmg.op(kv).retained_held && !gmg.op(kv).retained_attached)
      if (Status s = gmg.release_retained(kv); !s.ok()) return s;
  lane.running.clear();
  lane.kv_ops.clear();
  lane.attached.clear();
  lane.iter_ops.clear();
  lane.kv_tokens = 0;
  lane.head = kNoOp;
  lane.cache_lost = false;
  lane.in_flight = false;
  return Status::Ok();
}

Result<std::size_t> Tenant::preempt(InstanceId instance, Gmg& gmg) {
  Lane* lane = unstarted(instance, gmg);
  if (!lane) return std::size_t{0};
  const std::vector<Seq> seqs = lane->running;
  // Swapped: each decode's share of the cache it would have taken over
  // (bytes per cached token, times its tokens) goes to host memory now and
  // comes back after both copies; the copies of one preemption follow those
  // of the one before on the host link.
  // (A cache lost with an accelerator is not there to copy: recomputed.)
  const bool swap =
      spec_.preemption == TenantSpec::Preemption::kSwap && spec_.host_link_bytes_per_s > 0 && !lane->cache_lost;
  const double per_token = bytes_per_token(lane->attached, lane->kv_prev, gmg);
  const std::vector<OpId> caches = lane->attached;
  if (Status s = take_back(*lane, gmg); !s.ok()) return s;
  std::int64_t out_bytes = 0;
  std::vector<Swapped> out;
  // Queued again first, in order: a decode recomputes what it generated
  // (its prefill covers prompt and output so far) unless its cache was
  // swapped out; an admitted prefill keeps what it had to recompute. A
  // rider's cache is its own tenant's records: it always recomputes.
  for (auto s = seqs.rbegin(); s != seqs.rend(); ++s) {
    if (swap && !s->owner && !s->prefill && s->context > 0 && per_token > 0) {
      out_bytes += static_cast<std::int64_t>(per_token * static_cast<double>(s->context));
      out.push_back({s->request, s->context, 0});
      continue;
    }
    recomputed_tokens_ += s->prefill ? s->context : own(*s).held(s->request);
    requeue(*s);
  }
  if (!out.empty()) {
    const Nanos back = book_host_link(out_bytes, gmg.now(), out.size(), false);
    for (auto s = out.rbegin(); s != out.rend(); ++s) swapped_.push_back({s->request, s->tokens, back});
    if (prompts_) {  // a live backend copies the caches out before it frees them
      HostCopy c{caches, {}};
      for (auto s = out.rbegin(); s != out.rend(); ++s) c.seqs.push_back(s->request);
      host_copies_.push_back(std::move(c));
    }
    swapped_sequences_ += out.size();
    swapped_bytes_ += out_bytes;
  }
  ++preemptions_;
  preempted_sequences_ += seqs.size();
  return seqs.size();
}

bool Tenant::can_shed(InstanceId instance, const Gmg& gmg) {
  const Lane* lane = unstarted(instance, gmg);
  return lane && lane->running.size() > 1;
}

Result<Tenant::OomOutcome> Tenant::fail_out_of_memory(InstanceId instance, const std::string& reason, Gmg& gmg, Nanos t,
                                                      bool started_too) {
  Lane* lane = unstarted(instance, gmg);
  if (!lane && started_too) lane = stuck(instance, gmg);
  if (!lane) return OomOutcome{};
  const std::vector<Seq> seqs = lane->running;
  if (Status s = take_back(*lane, gmg); !s.ok()) return s;
  auto need = [&](const Seq& q) { return q.prefill ? own(q).held(q.request) : q.context; };
  if (seqs.size() > 1) {
    // Fewer sequences would fit: none fails. They queue again first, in
    // order, and recompute (a preemption, as vLLM's when its cache is
    // full), and this tenant's KV budget drops below what this iteration
    // held, so the batch that forms next holds less at its largest than
    // this one did here. A budget learnt from the memory: it stays.
    std::int64_t held = 0;
    for (const Seq& q : seqs) held += need(q);
    kv_cap_ = std::max<std::int64_t>(1, std::min(kv_cap_, held - 1));
    for (std::size_t i = seqs.size(); i-- > 0;) requeue(seqs[i]);
    ++preemptions_;
    preempted_sequences_ += seqs.size();
    return OomOutcome{.acted = true};
  }
  // One sequence that cannot fit: it fails.
  own(seqs.front()).fail_request(seqs.front().request, reason, t);
  return OomOutcome{.acted = true, .failed = 1};
}

void Tenant::on_accelerator_lost(AccelId a, const Gmg& gmg) {
  for (Lane& l : lanes_)
    for (const std::vector<OpId>* ops : {&l.kv_ops, &l.attached})
      for (OpId kv : *ops)
        if (gmg.contains(kv) && gmg.op(kv).accel == a) l.cache_lost = true;
}

void Tenant::running_kv(const Gmg& gmg, std::vector<std::pair<AccelId, std::int64_t>>& out) const {
  for (const Lane& l : lanes_) {
    if (l.running.empty() || l.cache_lost) continue;
    for (OpId kv : l.kv_ops)
      if (gmg.contains(kv) && gmg.op(kv).retained_held) out.emplace_back(gmg.op(kv).accel, gmg.op(kv).retained_bytes);
  }
}

Result<std::size_t> Tenant::fail_instance(InstanceId instance, const std::string& reason, Gmg& gmg, Nanos t) {
  Lane* lane = unstarted(instance, gmg);
  if (!lane) lane = stuck(instance, gmg);
  if (!lane) return std::size_t{0};
  const std::vector<Seq> seqs = lane->running;
  if (Status s = take_back(*lane, gmg); !s.ok()) return s;
  for (const Seq& q : seqs) own(q).fail_request(q.request, reason, t);
  return seqs.size();
}

std::size_t Tenant::fail_unfinished(const std::string& reason, Nanos t) {
  std::size_t failed = 0;
  auto fail = [&](Tenant& o, std::size_t i) {
    if (o.records_[i].done >= 0) return;
    ++failed;
    o.fail_request(i, reason, t);
  };
  for (std::size_t i : waiting_) fail(*this, i);
  waiting_.clear();
  for (const Swapped& s : swapped_) fail(*this, s.request);  // (on the host link or in host memory)
  swapped_.clear();
  for (std::deque<Handoff>* q : {&handoffs_, &handed_}) {
    for (const Handoff& h : *q) fail(own(h.seq), h.seq.request);
    q->clear();
  }
  for (Lane& l : lanes_) {
    for (const Seq& s : l.running) fail(own(s), s.request);
    l.running.clear();
    l.in_flight = false;
  }
  return failed;
}

std::size_t Tenant::fail_arrivals(const std::string& reason) {
  const std::size_t failed = stream_requests_ - next_request_;
  for (; next_request_ < stream_requests_; ++next_request_) {
    const Nanos arrival = records_[next_request_].arrival;
    event(RequestEvent::Kind::kArrived, next_request_, arrival);
    fail_request(next_request_, reason, arrival);
  }
  return failed;
}

void Tenant::requeue(const Seq& s) {
  Tenant& o = own(s);
  // A decode recomputes what it generated (its prefill covers prompt and
  // output so far); a prefill keeps what it had to recompute.
  if (!s.prefill) o.redo_[s.request] = o.records_[s.request].generated;
  o.waiting_.push_front(s.request);
}

void Tenant::seat_riders(Lane& lane, std::int64_t& tokens, std::int64_t& context, std::int64_t& kv) {
  std::int64_t seqs = 0;
  for (const Seq& s : lane.running) seqs += seated_as_own(s);
  // The iteration's time with the lane's own sequences alone: riders may
  // stretch it by at most the bound. A lane with none of its own lets the
  // riders on board finish under the budgets alone, and takes no new ones
  // from an owner that runs iterations of its own (it places them itself).
  const bool bounded = rider_cost_ && rider_slowdown_ >= 0 && seqs > 0;
  const bool own_less = rider_cost_ && rider_slowdown_ >= 0 && seqs == 0;
  // Under a bound, an iteration that prefills own sequences decides their
  // TTFT (the SLO): riders on board stay (decodes, and prefills a token at
  // a time) but none joins, so it runs about as long as alone.
  bool first_tokens = false;
  if (bounded)
    for (const Seq& s : lane.running) first_tokens = first_tokens || (seated_as_own(s) && s.prefill);
  const double limit = bounded ? (1 + rider_slowdown_) * rider_cost_({tokens, seqs, context, lane.kv_tokens}) : 0;
  auto fits = [&](std::int64_t dt, std::int64_t dc, std::int64_t dkv) {
    if (tokens + dt > spec_.token_budget || seqs + 1 > spec_.max_seqs || kv + dkv > kv_budget()) return false;
    return !bounded || rider_cost_({tokens + dt, seqs + 1, context + dc, lane.kv_tokens}) <= limit;
  };
  // A prefill's chunk shrinks (halving, down to kMinChunk tokens) until it
  // fits: a long prompt trickles into small decode batches.
  constexpr std::int64_t kMinChunk = 32;
  auto chunk_for = [&](std::int64_t left, std::int64_t dc, std::int64_t dkv) -> std::int64_t {
    std::int64_t c = std::min(left, spec_.token_budget - tokens);
    while (c > 0 && !fits(c, dc, dkv)) c = c > kMinChunk ? std::max(kMinChunk, c / 2) : 0;
    return std::max<std::int64_t>(c, 0);
  };
  // Riders on board keep their seats in order while they fit; from the
  // first that does not, they leave (the younger ones would only take the
  // room back from online work next time).
  std::vector<Seq> kept, gone;
  for (Seq& s : lane.running) {
    if (seated_as_own(s)) {
      kept.push_back(s);
      continue;
    }
    const std::int64_t whole = s.owner->held(s.request);
    std::int64_t dt = 1;
    if (s.prefill && !first_tokens) dt = gone.empty() ? chunk_for(whole - s.context, s.context, whole + 1) : 0;
    const std::int64_t dkv = s.prefill ? whole + 1 : s.context + 1;
    bool room = first_tokens ? tokens + 1 <= spec_.token_budget && kv + dkv <= kv_budget()
                : s.prefill  ? dt > 0
                             : fits(1, s.context, dkv);
    // Kept, a rider leaves only when the KV room or the sequence cap is
    // short: one more token costs the host far less than recomputing all
    // the rider holds (a decode's whole prompt, a prefill's chunks so far).
    if (!room && keep_riders_ && gone.empty() && kv + dkv <= kv_budget() && seqs + 1 <= spec_.max_seqs) {
      room = true;
      dt = 1;
    }
    if (gone.empty() && room) {
      if (s.prefill) s.chunk = dt;
      tokens += dt;
      context += s.context;
      kv += dkv;
      ++seqs;
      kept.push_back(s);
    } else {
      gone.push_back(s);
    }
  }
  for (auto s = gone.rbegin(); s != gone.rend(); ++s) requeue(*s);
  rider_evictions_ += gone.size();
  lane.running = std::move(kept);
  // New riders, the oldest request of any owner first, while they fit (none
  // in an iteration that just sent riders away: the room is online's). Nor
  // while a request of the host's own or a peer's still waits (it found no
  // token, sequence or KV room): vLLM's scheduler takes its waiting queue in
  // priority order and stops at the first request it cannot schedule, so
  // lower-priority work never starts ahead of higher-priority work that
  // waits. Riders on board stay, as vLLM's running requests do.
  if (!gone.empty() || first_tokens) return;
  // (With prefill lanes, what waits for this decode lane is a hand-off or
  // a sequence back from host memory; prompts wait for a prefill lane.)
  if (disaggregated() ? !handed_.empty() || (!waiting_.empty() && swapped_in_.contains(waiting_.front()))
                      : !waiting_.empty() || oldest_source([&](const Tenant& t) { return peer(t); }))
    return;
  while (Tenant* o = oldest_source([&](const Tenant& t) { return !peer(t) && !(own_less && !t.rides_only_); })) {
    const std::size_t r = o->waiting_.front();
    const std::int64_t whole = o->held(r);
    const std::int64_t need = o->records_[r].input_tokens + o->records_[r].output_tokens;
    const std::int64_t c = chunk_for(whole, 0, need);
    if (c <= 0) return;
    lane.running.push_back({r, 0, true, c, o});
    o->waiting_.pop_front();
    tokens += c;
    kv += whole;
    ++seqs;
  }
}

}  // namespace slicesched
