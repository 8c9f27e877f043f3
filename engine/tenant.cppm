// A tenant: one serving instance with a priority and a request stream. It
// runs continuous batching: each iteration is one graph instance holding the
// running decodes plus newly admitted prefills under a token budget; the KV
// cache is retained state that the next iteration takes over (and drops the
// sequences that finished). Admission waits when the KV budget is short.
//
// A tenant may keep several iterations in flight ("lanes", like the virtual
// engines of pipeline-parallel serving): each lane owns a disjoint set of
// sequences and its own KV chain, so lanes can run on different
// accelerators at once. New requests join the lane with the fewest
// sequences among those free to start.
//
// Cross-tenant batches (riders): another tenant of the same model may lend
// its waiting requests to this one's iterations. A rider of lower priority
// rides at low priority: this tenant's own sequences are seated first,
// riders take what the token, sequence and KV budgets (and, when set, a
// slowdown bound on the iteration's estimated time) leave, and a rider that
// no longer fits leaves (recompute, vLLM's default preemption) and queues
// again first at its owner. A rider of this tenant's priority or above is a
// peer: its requests are seated as this tenant's own (one engine serving
// several tenants). Records, events and the request's tokens stay the
// owner's.
module;
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

export module slicesched.engine.tenant;
import slicesched.workload.trace;
import slicesched.models.model;
import slicesched.engine.inbox;
import slicesched.core.backend;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.sampling;
import slicesched.core.status;

export namespace slicesched {

struct TenantSpec {
  std::string name;
  std::int32_t priority = 0;              // higher runs first on every accelerator
  bool online = true;                     // SLO-bound: counts for TTFT and SLO attainment
  Trace requests;                         // arrivals in seconds from time 0
  std::int64_t token_budget = 2048;       // new tokens per iteration
  std::int64_t max_seqs = 64;             // sequences per iteration
  std::int64_t kv_budget_tokens = 65536;  // cached tokens this tenant may hold (all lanes)
  // Chunked prefill (as vLLM's and SGLang's): a prompt longer than what
  // the iteration's token budget leaves prefills over several iterations,
  // a chunk each, beside the other sequences' decodes and short prefills,
  // so they do not wait behind all of it. Off: a prompt's whole prefill is
  // one iteration (the queue's head is admitted even over the budget).
  bool chunked_prefill = false;
  int lanes = 1;  // iterations in flight at once
  // Disaggregated prefill: this many more lanes only prefill new prompts
  // (own and peers'), none of them riders, and hand each sequence's KV
  // cache to the other lanes, which only decode (and take riders). A
  // prompt then waits for a prefill lane to be free, not for a decode
  // step stretched by riders to end. The hand-off goes to host memory and
  // back over the host link (as a KV connector through host memory does),
  // costed as both copies, one hand-off's after another's, as a swap's
  // are. 0: off, every lane does both.
  int prefill_lanes = 0;
  // What preemption does with a preempted iteration's KV cache (vLLM's
  // preemption_mode): kRecompute drops it and the sequences prefill prompt
  // and output again; kSwap moves each decoding sequence's part of it to
  // host memory over the host link and back before the sequence resumes
  // as a decode, costed as both copies on that link (latency + bytes /
  // bandwidth each way, one preemption's sequences after another's).
  enum class Preemption : std::uint8_t { kRecompute, kSwap } preemption = Preemption::kRecompute;
  double host_link_bytes_per_s = 16e9;  // kSwap and prefill hand-offs: the accelerator-host link
  Nanos host_link_latency = 0;
};

// One request's life. Times in ns; -1 until they happen.
struct RequestRecord {
  std::uint32_t tenant = 0;
  Nanos arrival = 0, first_token = -1, done = -1;
  std::int64_t input_tokens = 0, output_tokens = 0, generated = 0;
  // Live mode: the generated token ids, and why the request failed (an
  // operator of one of its iterations failed; `done` is then the time it
  // was given up).
  std::vector<std::int64_t> tokens;
  std::string error;
  // Live mode: a stop condition (EOS, a stop string or token) ended it, as
  // its client's reply says, even when it came with the max_tokens-th token.
  bool stopped = false;
};

// Something that happened to one request. `request` indexes the tenant's
// records (Tenant::records()).
struct RequestEvent {
  enum class Kind : std::uint8_t {
    kArrived,     // delivered to the tenant's queue
    kIteration,   // part of iteration `instance` (a prefill or a decode step)
    kFirstToken,  // its first output token was sampled
    kDone,        // finished every output token
    kFailed,      // ended with an error (RequestRecord::error)
  };
  Kind kind = Kind::kArrived;
  std::uint32_t tenant = 0;
  std::uint32_t request = 0;
  Nanos t = 0;
  InstanceId instance = 0;  // kIteration only
};

// One booking of a tenant's host link: a copy of `bytes` to host memory from
// `start`, and the copy back right after it, each taking `copy`; a prefill
// lane's hand-off of `sequences` or a swap's.
struct HostLinkCopy {
  Nanos start = 0, copy = 0;
  std::int64_t bytes = 0;
  std::uint32_t sequences = 0;
  bool handoff = false;
};

// Token ids of request `request`'s prompt of `n` tokens (live mode).
using PromptFn = std::function<std::vector<std::int64_t>(std::uint64_t request, std::int64_t n)>;

// Not thread-safe; driven by the engine thread.
class Tenant {
 public:
  // `model` (the model behind `tmpl`; shared, must outlive the tenant)
  // binds each iteration's dims and says which operator samples; without
  // one, the template's dims are tokens / sequences / context / kv_prev and
  // its last operator samples.
  Tenant(std::uint32_t id, TenantSpec spec, TemplateId tmpl, std::shared_ptr<const Model> model = nullptr);

  const TenantSpec& spec() const { return spec_; }
  std::uint32_t id() const { return id_; }
  TemplateId tmpl() const { return tmpl_; }
  // Arrival time of the next request not yet delivered, or the time a
  // sequence of its own comes back (next_return), whichever is first; -1
  // when there is neither.
  Nanos next_arrival() const;
  // When the next sequence swapped to host memory or handed off by a
  // prefill lane lands, or -1: what a drain still waits for, while it
  // waits for no new request.
  Nanos next_return() const;
  // Queues every request that has arrived by `t`.
  void deliver_arrivals(Nanos t);
  // For every lane with no iteration in flight and work to do, instantiates
  // its next iteration (unscheduled); returns how many. A lane that goes
  // idle releases its KV cache.
  Result<int> start_iterations(Gmg& gmg);
  // Feedback that an operator finished. When it is an in-flight
  // iteration's head, tokens are emitted and the iteration ends; when it
  // failed, the iteration's requests fail and the lane starts afresh
  // (its KV chain is released in `gmg`). When it was lost with an
  // accelerator (Feedback::lost), the requests do not fail: they queue
  // again first, and their next iteration prefills everything they hold
  // (prompt and generated tokens), which rebuilds their KV caches.
  void on_op_done(const Feedback& f, Gmg& gmg);
  // Every request not yet finished fails now with `reason` (nothing is
  // left that can run it). Timing-only: live plans are not rebuilt.
  // Returns how many failed.
  std::size_t fail_unfinished(const std::string& reason, Nanos t);
  // Accelerator `a` is lost: the lanes whose KV caches were (in part)
  // there know it (a swap or hand-off of them would copy what is gone).
  void on_accelerator_lost(AccelId a, const Gmg& gmg);
  // Appends (accelerator, bytes) for the KV cache of each lane with
  // sequences still running, where the GMG holds it: its next iteration
  // takes it over and reserves about as much again there, so the
  // scheduler keeps that much from lower priorities.
  void running_kv(const Gmg& gmg, std::vector<std::pair<AccelId, std::int64_t>>& out) const;
  // The waiting or stuck iteration `instance` cannot run anywhere (every
  // placement needs a lost accelerator): its sequences fail with `reason`.
  // Returns how many failed (0: no such iteration here).
  Result<std::size_t> fail_instance(InstanceId instance, const std::string& reason, Gmg& gmg, Nanos t);
  // The stream's requests yet to arrive fail as they arrive, with `reason`
  // (the run ends now, and nothing would be left to run them). Returns
  // how many failed.
  std::size_t fail_arrivals(const std::string& reason);
  // Live requests whose sink says abandoned() end now with kAbandonedError,
  // if waiting or in a lane between iterations (one in flight leaves at its
  // iteration's end, in on_op_done); returns how many ended.
  std::size_t drop_abandoned(Nanos t);
  // Requests that ended abandoned so far.
  std::size_t abandoned() const { return abandoned_; }
  // Sequences whose KV cache was rebuilt after a loss.
  std::size_t rebuilt() const { return rebuilt_; }
  // Memory pressure. A lane is preemptable when its in-flight iteration
  // has not started anywhere (every operator unscheduled) and it holds a
  // KV cache (the previous iteration's retained state). The youngest such
  // iteration, if any, optionally only one holding KV on accelerator
  // `on` (kNoAccel: anywhere).
  std::optional<InstanceId> preemptable(const Gmg& gmg, AccelId on = kNoAccel) const;
  // Preempts that iteration (vLLM's default, recompute): its operators
  // leave the GMG, its KV cache is released, and its sequences queue again
  // first; their next prefill recomputes prompt and generated tokens.
  // Returns the sequences preempted.
  Result<std::size_t> preempt(InstanceId instance, Gmg& gmg);
  // The iteration `instance` can never fit the HBM (it waits for memory
  // and nothing else holds any that could be freed): it leaves the GMG.
  // Of several sequences none fails: they queue again first and recompute,
  // and this tenant's KV budget drops below what they held (kv_budget());
  // a single sequence fails with `reason`. `acted` is false where the
  // instance is not an in-flight iteration of this tenant that has not
  // started.
  // With `started_too`, also an iteration that started and waits part way,
  // with none of its operators issued (the engine's last resort when
  // nothing runs): what it did so far is dropped, and the sequences kept
  // recompute it.
  struct OomOutcome {
    bool acted = false;
    std::size_t failed = 0;  // requests failed
  };
  Result<OomOutcome> fail_out_of_memory(InstanceId instance, const std::string& reason, Gmg& gmg, Nanos t,
                                        bool started_too = false);
  // Whether fail_out_of_memory would shed sequences of `instance` (an
  // iteration not started, of several sequences) rather than fail one.
  bool can_shed(InstanceId instance, const Gmg& gmg);
  // The iterations of this tenant that waited for HBM at the engine's last
  // scheduling round with a pinned placement (a static policy's: all it can
  // do is wait for its accelerators). While one of them is still in flight,
  // no lane starts a new sequence (a prompt, a peer's prompt or a cache back
  // from host memory): sequences under way go on and finish, freeing what
  // the waiting iteration needs. Admitting more took each bit of HBM as it
  // freed, and with several lanes the waiting iteration, the larger one,
  // never ran (vLLM's scheduler likewise admits nothing while its running
  // sequences lack KV blocks). An iteration preempted meanwhile no longer
  // holds anything back.
  void clear_memory_waits() { memory_waits_.clear(); }
  void note_memory_wait(InstanceId instance) { memory_waits_.push_back(instance); }
  // The KV budget admission keeps to: kv_budget_tokens, or less once an
  // iteration did not fit the HBM (fail_out_of_memory, learn_kv_budget).
  std::int64_t kv_budget() const { return std::min(spec_.kv_budget_tokens, kv_cap_); }
  // This tenant's own iterations hold the HBM one of them waits for (the
  // engine preempts one lane's for another's): its KV budget drops below
  // what its lanes hold now, so it admits no more than that again. Without
  // it, a backlog (after a fault) was admitted whole, over the HBM, and
  // the lanes preempted each other's decodes for good.
  void learn_kv_budget() { kv_cap_ = std::max<std::int64_t>(1, std::min(kv_cap_, kv_held(false) - 1)); }
  // Cross-tenant batches. `owner` (another tenant of the same model, which
  // must outlive this one and be driven by the same engine) lends its
  // waiting requests to this tenant's iterations (see the file comment).
  void add_rider_source(Tenant* owner) {
    sources_.push_back(owner);
    owner->lends_ = true;
    owner->hosts_.push_back(this);
  }
  // True when some tenant takes riders from this one.
  bool lends() const { return lends_; }
  // The owner's own lanes run nothing: its requests only ride
  // (Priority-Batch, vLLM's single queue per instance).
  void set_rides_only(bool only) { rides_only_ = only; }
  // Riders join (and stay) only while `cost` of the iteration with them is
  // at most (1 + slowdown) times its cost without them (the estimator's
  // prediction at the combined token count). Unset: only the budgets bind.
  using IterationCost = std::function<double(const IterationDims&)>;
  void set_rider_bound(IterationCost cost, double slowdown) {
    rider_cost_ = std::move(cost);
    rider_slowdown_ = slowdown;
  }
  // Riders on board leave only for KV room or the sequence cap: short of
  // token room or the slowdown bound they step one token (a decode, or a
  // one-token chunk of their prefill) instead of leaving and recomputing
  // what they hold. Off: they leave from the first that does not fit.
  void set_keep_riders(bool keep) { keep_riders_ = keep; }
  // Riders that left an iteration for room (each recomputes later), and
  // rider sequence-iterations this tenant ran.
  std::size_t rider_evictions() const { return rider_evictions_; }
  std::size_t rider_steps() const { return rider_steps_; }
  // Whether other tenants' sequences ride in this tenant's iterations.
  bool hosts_riders() const { return !sources_.empty(); }
  // Iterations preempted, and the sequences they held.
  std::size_t preemptions() const { return preemptions_; }
  std::size_t preempted_sequences() const { return preempted_sequences_; }
  // Of those, sequences whose KV cache went to host memory and back
  // (kSwap), and its bytes (one way); and the tokens preempted sequences
  // prefilled again (kRecompute, and kSwap's prefills under way).
  std::size_t swapped_sequences() const { return swapped_sequences_; }
  std::int64_t swapped_bytes() const { return swapped_bytes_; }
  std::int64_t recomputed_tokens() const { return recomputed_tokens_; }
  // Prefill lanes: sequences whose KV cache a prefill lane handed to a
  // decode lane, and its bytes (one way).
  std::size_t handed_off() const { return handed_off_; }
  std::int64_t handoff_bytes() const { return handoff_bytes_; }
  // Every booking of the host link (hand-offs and swaps), in booking order.
  const std::vector<HostLinkCopy>& host_link_copies() const { return host_link_log_; }
  // Live mode: from now on every iteration also gets an IterationPlan
  // (prompt ids from `prompts`, decode ids from the sampled tokens).
  void set_prompts(PromptFn prompts) { prompts_ = std::move(prompts); }
  // The plans of the iterations started since the last call.
  std::vector<std::pair<InstanceId, IterationPlan>> take_plans() { return std::exchange(plans_, {}); }
  // With plans: what the backend must do for swapped and handed-off
  // sequences since the last call, in order (Backend::swap_out /
  // forget_swapped): keep `seqs`' parts (by plan sequence id) of the KV
  // caches operators `kv` retained, or (`kv` empty) forget what it kept of
  // them. The engine takes them in the step they are made, before the
  // backend frees what the GMG released.
  struct HostCopy {
    std::vector<OpId> kv;
    std::vector<std::uint64_t> seqs;
  };
  std::vector<HostCopy> take_host_copies() { return std::exchange(host_copies_, {}); }
  // From now on, what happens to requests is appended to `sink` (null:
  // nothing is recorded); kIteration events only with `iterations`. The
  // sink is the caller's and must outlive the tenant's use of it.
  void set_events(std::vector<RequestEvent>* sink, bool iterations) {
    events_ = sink;
    iteration_events_ = iterations;
  }
  // Live front ends (see engine.inbox). submit() queues a request now (at
  // `t`), with its own prompt ids; its sink hears of every token and of its
  // end, and its record keeps no tokens once it ended (a long-running
  // server holds a few dozen bytes per request, not its output). Requires
  // set_prompts (live mode) for the requests of the recorded stream.
  void submit(LiveRequest r, Nanos t);
  // While open, the tenant is not finished() even with every request done:
  // more may be submitted.
  void set_open(bool open) { open_ = open; }
  // Forgets the recorded stream before the run (a front end serves only
  // what is submitted). Only before any request was delivered.
  void drop_stream();
  // True once every request arrived and finished (and the tenant is not open).
  bool finished() const;
  // No iteration in flight and nobody waiting (arrivals may still come).
  bool idle() const;
  std::size_t done() const { return done_; }
  const std::vector<RequestRecord>& records() const { return records_; }

 private:
  struct Seq {
    std::size_t request;      // index into records_
    std::int64_t context;     // tokens whose KV is cached
    bool prefill;             // prefilling (admitted this iteration, or a chunked prefill not done)
    std::int64_t chunk = 0;   // while prefilling: the tokens this iteration adds to its cache
    Tenant* owner = nullptr;  // a rider's owner (null: this tenant's own sequence)
    bool from_host = false;   // back from host memory, its cache not yet in the lane's
  };
  // The tenant that owns a sequence's record.
  Tenant& own(const Seq& s) { return s.owner ? *s.owner : *this; }
  // A peer lends its requests at this tenant's priority or above: they are
  // seated as this tenant's own (admitted whole after its own, never bound
  // by the slowdown, never evicted for it), as one engine serving several
  // tenants would.
  bool peer(const Tenant& o) const { return o.spec_.priority >= spec_.priority; }
  // Why request `r` of this tenant can never run ("" when it can): its
  // requests only ride, and every host is of higher priority with a KV
  // budget smaller than the request's prompt and output.
  std::string never_rides(const RequestRecord& r) const;
  bool seated_as_own(const Seq& s) const { return !s.owner || peer(*s.owner); }
  // The sequence id a live plan gives it: riders apart from own requests.
  std::uint64_t plan_id(const Seq& s) const {
    return s.owner ? ((static_cast<std::uint64_t>(s.owner->id_) + 1) << 40) | s.request : s.request;
  }
  // Queues `s` again first at its owner; its next prefill recomputes.
  void requeue(const Seq& s);
  // The source `eligible` accepts whose queue's head arrived first (the
  // first such source on a tie); null when none has a request waiting.
  template <class Eligible>
  Tenant* oldest_source(Eligible&& eligible) const {
    Tenant* best = nullptr;
    for (Tenant* o : sources_)
      if (!o->waiting_.empty() && eligible(*o) &&
          (!best || o->records_[o->waiting_.front()].arrival < best->records_[best->waiting_.front()].arrival))
        best = o;
    return best;
  }
  bool riders_waiting() const {
    for (const Tenant* o : sources_)
      if (!o->waiting_.empty()) return true;
    return false;
  }
  std::vector<Tenant*> sources_;
  std::vector<const Tenant*> hosts_;  // the tenants this one's requests ride in
  bool lends_ = false, rides_only_ = false, keep_riders_ = false;
  std::vector<InstanceId> memory_waits_;  // note_memory_wait
  IterationCost rider_cost_;
  double rider_slowdown_ = -1;
  std::size_t rider_evictions_ = 0, rider_steps_ = 0;
  // What a sequence's prefill caches in all: its prompt, and the tokens it
  // generated before a loss (rebuilt).
  std::int64_t held(std::size_t request) const { return records_[request].input_tokens + redo_[request]; }
  struct Lane {
    std::vector<Seq> running;    // sequences of the in-flight or next iteration
    std::vector<OpId> kv_ops;    // the last iteration's ops that retain the KV cache
    std::vector<OpId> iter_ops;  // the in-flight iteration's ops
    std::vector<OpId> attached;  // the KV cache it took over (the iteration before's kv_ops)
    InstanceId instance = 0;     // the in-flight iteration's
    std::int64_t kv_tokens = 0;  // tokens those ops retain
    std::int64_t kv_prev = 0;    // tokens the attached cache holds
    OpId head = kNoOp;
    bool in_flight = false;
    bool prefill_only = false;  // a prefill lane (TenantSpec::prefill_lanes)
    // Part of kv_ops or attached was on an accelerator lost since: that
    // cache is gone, so it is rebuilt, never swapped out or handed off.
    bool cache_lost = false;
  };
  // Seats the lane's riders after its own sequences (see set_rider_bound);
  // `tokens`, `context` and `kv` are the iteration's so far and grow.
  void seat_riders(Lane& lane, std::int64_t& tokens, std::int64_t& context, std::int64_t& kv);
  Result<bool> start(Lane& lane, Gmg& gmg);
  void drop_iteration(Lane& lane, Gmg& gmg);
  Lane* unstarted(InstanceId instance, const Gmg& gmg);
  // The in-flight iteration `instance` if it started, waits part way and
  // has nothing issued, else null.
  Lane* stuck(InstanceId instance, const Gmg& gmg);
  Status take_back(Lane& lane, Gmg& gmg);
  std::size_t preemptions_ = 0, preempted_sequences_ = 0;
  std::int64_t kv_cap_ = INT64_MAX;  // learnt from the memory (fail_out_of_memory)
  // kSwap: sequences whose KV cache is on the host, in preemption order,
  // each back (queued again first, with its cache) at `back`.
  struct Swapped {
    std::size_t request;
    std::int64_t tokens;  // its cached tokens
    Nanos back;
  };
  std::deque<Swapped> swapped_;
  std::unordered_map<std::size_t, std::int64_t> swapped_in_;  // back in the queue: request -> cached tokens
  Nanos host_link_free_ = 0;                                  // the host link's copies are done by then
  void return_swapped(Nanos t);
  // Prefill lanes: sequences handed off, on the host link until `ready`
  // (in order), then waiting for a decode lane.
  struct Handoff {
    Seq seq;
    Nanos ready;
  };
  std::deque<Handoff> handoffs_, handed_;  // on the link; arrived
  std::size_t handed_off_ = 0;
  std::int64_t handoff_bytes_ = 0;
  bool disaggregated() const { return spec_.prefill_lanes > 0; }
  // The prefill lane's finished prefills leave it for the decode lanes,
  // their caches copied out of the lane's (at `t`).
  void hand_off(Lane& lane, const Gmg& gmg, Nanos t);
  // Bytes per cached token of the caches operators `kv` retain for
  // `tokens` tokens: a sequence's share of them is that times its tokens.
  static double bytes_per_token(const std::vector<OpId>& kv, std::int64_t tokens, const Gmg& gmg);
  // Books a copy of `bytes` (of `sequences`' caches, a hand-off's or a
  // swap's) to host memory and one back on the host link, after the copies
  // booked before (from `t` at the earliest); returns when both are done.
  Nanos book_host_link(std::int64_t bytes, Nanos t, std::size_t sequences, bool handoff);
  std::vector<HostLinkCopy> host_link_log_;
  std::size_t swapped_sequences_ = 0;
  std::int64_t swapped_bytes_ = 0, recomputed_tokens_ = 0;
  std::int64_t kv_held(bool riders = true) const;

  std::uint32_t id_;
  TenantSpec spec_;
  TemplateId tmpl_;
  std::shared_ptr<const Model> model_;
  std::size_t next_request_ = 0;
  std::size_t stream_requests_ = 0;  // records_[0, this) come from spec_.requests; the rest were submitted
  bool open_ = false;
  struct Live {
    std::vector<std::int64_t> prompt;
    std::shared_ptr<RequestSink> sink;
    std::shared_ptr<const SamplingParams> sampling;
  };
  std::unordered_map<std::size_t, Live> live_;  // submitted requests not ended yet, by record
  void end_live(std::size_t request);
  // Request `request` (this tenant's) ends failed at `t` with `reason`.
  void fail_request(std::size_t request, std::string reason, Nanos t);
  std::deque<std::size_t> waiting_;
  std::vector<Lane> lanes_;
  std::vector<Lane*> startable_;  // start_iterations' scratch
  std::vector<RequestRecord> records_;
  std::size_t done_ = 0;
  std::size_t rebuilt_ = 0;
  std::size_t abandoned_ = 0;
  bool is_abandoned(std::size_t request) const;
  void end_abandoned(std::size_t request, Nanos t);
  std::vector<std::int64_t> redo_;  // per request: generated tokens its next prefill recomputes
  PromptFn prompts_;
  std::vector<std::pair<InstanceId, IterationPlan>> plans_;
  std::vector<HostCopy> host_copies_;
  std::vector<RequestEvent>* events_ = nullptr;
  bool iteration_events_ = false;
  void event(RequestEvent::Kind kind, std::size_t request, Nanos t, InstanceId instance = 0) {
    if (events_) events_->push_back({kind, id_, static_cast<std::uint32_t>(request), t, instance});
  }
};

}  // namespace slicesched
