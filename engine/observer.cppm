// Engine observers: what happens during a run, as events, for everything
// that records or reports it (metrics, progress, timelines and Chrome
// traces, decisions for --explain, predicted against actual, bench
// accuracy's measurements). The engine loop and the backends do only the
// work; whatever a user reads is built by an observer.
//
// Threading: the engine calls observers on its own thread, in event order,
// one observer after another in the order they were passed. An observer
// must not change the GMG it is shown, and must not throw.
module;
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

export module slicesched.engine.observer;
import slicesched.core.backend;
import slicesched.core.plugin;
import slicesched.engine.tenant;
import slicesched.core.ids;
import slicesched.core.gmg;

export namespace slicesched {

// One interval of work on the cluster, and what the what-if predicted for
// it: an operator on `accel`, or a transfer from `accel` to `to`.
struct RunRecord {
  OpId op = kNoOp;  // the operator, or the transfer's consumer
  std::uint32_t tenant = 0;
  AccelId accel = kNoAccel;  // the accelerator, or a transfer's source
  AccelId to = kNoAccel;     // a transfer's destination; kNoAccel for an operator
  Nanos start = 0, finish = 0;
  OpKindId kind = 0;  // the operator's kind (a transfer: its consumer's)
  // Operators only: when the scheduler issued it, and the start and finish
  // the what-if predicted for the placement it picked (-1: not predicted,
  // e.g. a static policy, or past the what-if's horizon).
  Nanos issued = -1, predicted_start = -1, predicted_finish = -1;
  bool failed = false;  // ended in a failure (lost with its accelerator, or a live error)
  // Lost with its accelerator (or executor): nothing came of it, and it
  // ended when the loss was found, which live can be seconds after it died.
  bool lost = false;
};

// One scheduling round of the scheduler (the paper's Algorithm 1): the
// batch, the candidates the partition sets offered, what the what-if said
// of each, and the pick. Views into the scheduler's buffers: valid during
// the call only.
struct Decision {
  Nanos now = 0;
  const Batch* batch = nullptr;
  std::span<const Candidate> candidates;
  // One per candidate. Without simulation (a static policy) every outcome
  // is the default (not feasible, Outcome::Why::kNotSimulated).
  std::span<const Outcome> outcomes;
  bool simulated = false;
  // The candidate issued; none when the round deferred the batch (the
  // policy deferred it, or picked a candidate that cannot be issued).
  std::optional<std::size_t> pick;
  // Why the round deferred a batch the policy did pick (empty otherwise):
  // the pick does not fit the HBM account, is out of range, or needs a
  // lost accelerator.
  std::string_view waited;
  // The policy whose choose() made this round's pick (null when it was not
  // asked: no candidates). Its reasons() say why; an observer that records
  // them asks during the call (they are built on demand).
  const PlacementPolicy* chooser = nullptr;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // The scheduler issued `op` (placed on gmg.op(op).accel) at `now`.
  virtual void on_issue(const Gmg& /*gmg*/, OpId /*op*/, Nanos /*now*/) {}
  // An interval of work ended: an operator or a transfer, with its start
  // and finish (backends report an interval when it ends, so its start
  // comes with it). Not called for work lost before it began to run.
  virtual void on_finish(const RunRecord& /*record*/) {}
  // A completion the backend reported, before the engine applies it: the
  // GMG still holds the operator as issued (its features, its accelerator).
  virtual void on_feedback(const Gmg& /*gmg*/, const Feedback& /*f*/) {}
  // A scheduling round, after the pick was issued (or the batch deferred).
  virtual void on_decision(const Gmg& /*gmg*/, const Decision& /*d*/) {}
  // Something happened to a request; `record` is its record after it.
  virtual void on_request(const RequestEvent& /*e*/, const RequestRecord& /*record*/) {}
  // Accelerator `a` was lost at `now` (`lost`: a configured fault, or an
  // executor the backend found gone) or came back (`lost` false: a fault's
  // duration ended). `back`: when lost, the time it comes back (a fault's
  // return still to come), -1 for good. A server's health follows these.
  virtual void on_accelerator(AccelId /*a*/, bool /*lost*/, Nanos /*now*/, Nanos /*back*/) {}
  // Whether this observer wants kIteration request events (one per request
  // per iteration: the most numerous kind, so only on request).
  virtual bool iterations() const { return false; }
};

}  // namespace slicesched
