// Extension points: the small interfaces a partition set, a placement
// policy, an estimator or a transfer arbiter implements, and the registries
// that create them by name from configuration arguments.
//
// A plugin is either linked in (the built-ins, registered by a function) or
// lives in a shared library opened by slicesched.plugins.loader. Every
// interface is BOOST_SYMBOL_VISIBLE so that, under -fvisibility=hidden, its
// type_info and vtable stay one entity across the library boundary
// (dynamic_cast and exceptions keep working). Clang emits the vtable of a
// class attached to a named module only in that module's object file, so a
// plugin library must link the object code of this module (slicesched_core),
// not only its interface.
//
// Threading: interfaces say per call. Registries are filled at startup from
// one thread; after that create() and names() may run concurrently.
module;
#include <boost/config.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

export module slicesched.core.plugin;
// The SDK face: a plugin imports this module alone (docs/plugins.md), so it
// re-exports every core module whose names a plugin's code spells.
export import slicesched.core.status;
export import slicesched.core.ids;
export import slicesched.core.shape;
export import slicesched.core.graph;
export import slicesched.core.accel;
export import slicesched.core.gmg;
export import slicesched.core.estimator;

export namespace slicesched {

// A plugin's arguments: a JSON object (the plugin's TOML table, converted).
using PluginArgs = nlohmann::json;

// One scheduling round's unit: connected unscheduled ops of one tenant, in
// topological order.
struct Batch {
  std::vector<OpId> ops;
  TemplateId tmpl = 0;
  std::uint32_t tenant = 0;
  std::int32_t priority = 0;
};

// A candidate placement: the accelerator of each op of the batch (same order
// as Batch::ops). `label` names it in logs and reports.
struct Candidate {
  std::string label;
  std::vector<AccelId> accel;
  bool operator==(const Candidate&) const = default;
};

// What the what-if simulation predicted for one candidate (filled by the
// scheduler).
struct Outcome {
  bool feasible = false;         // false: see why
  std::vector<Nanos> finish;     // per batch op, absolute; -1: past the horizon
  double mean_completion_s = 0;  // mean over batch ops of finish - now
  double makespan_s = 0;
  // Not simulated to the end: under the policy's objective() it could no
  // longer beat another feasible candidate (feasible is false and finish
  // is empty). Never set for a policy whose objective() is kNone.
  bool dominated = false;
  std::vector<Nanos> start;  // per batch op, absolute, as finish
  // Why it is not feasible (kNone when it is).
  enum class Why : std::uint8_t {
    kNone,
    kNotSimulated,  // the policy needs no simulation
    kOutOfMemory,   // predicted to exceed HBM: at_op's allocation on at_accel
    kNotPlaceable,  // at_op may not go on at_accel (weights absent, accelerator lost or unknown)
    kMalformed,     // not one accelerator per batch operator, or the batch cannot be issued as is
    kDominated,     // see dominated
  };
  Why why = Why::kNotSimulated;
  OpId at_op = kNoOp;
  AccelId at_accel = kNoAccel;
};

// Turns a batch into the candidate placements a round tries. Not
// thread-safe: one instance per scheduler (implementations may cache).
class BOOST_SYMBOL_VISIBLE PartitionSet {
 public:
  virtual ~PartitionSet() = default;
  // Checks the set against the cluster it will serve (e.g. resolves
  // accelerator names) and fails with a one-line message naming the plugin
  // and the key. Called once before the first candidates(); the default has
  // nothing to check.
  virtual Status bind(const AcceleratorSet& /*accels*/) { return Status::Ok(); }
  // Candidates for `batch`, each with batch.ops.size() accelerators, all
  // valid ids of gmg.accels(). Empty: nothing fits, the batch waits.
  virtual std::vector<Candidate> candidates(const Gmg& gmg, const Batch& batch) = 0;
  // The same candidates, written over `out`: a set that overrides this
  // reuses the label and accelerator buffers `out` already holds (the
  // scheduler passes last round's), where a cluster-wide set would
  // otherwise allocate two per candidate, thousands a round. The default
  // assigns candidates().
  virtual void candidates_into(const Gmg& gmg, const Batch& batch, std::vector<Candidate>& out) {
    out = candidates(gmg, batch);
  }
};

class Estimator;

// What a run hands a placement policy (or a stage) to read besides the
// GMG of each call, once before the first round (bind()). Every pointer
// outlives the policy's use of it; all read-only.
struct PolicyContext {
  // The policy's estimator, to price work the what-if does not (see
  // price_op and price_template_op in slicesched.core.views). Only its
  // const predict_* and linear() may be called, on the engine thread.
  const Estimator* estimator = nullptr;
};

// Picks one candidate of a round. Not thread-safe: one instance per
// scheduler.
class BOOST_SYMBOL_VISIBLE PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  // Called once, on the engine thread, before the first choose(): keep
  // what the policy wants of `ctx`. Fails with a one-line message naming
  // what is missing; the default keeps nothing.
  virtual Status bind(const PolicyContext& /*ctx*/) { return Status::Ok(); }
  // Why the latest choose() picked (or deferred) what it did, one line
  // each, e.g. "kv-affinity: tenant's KV cache is on gpu2". Read by the
  // scheduler right after choose() when the run records decisions
  // (--explain): decisions.jsonl carries them and `slicesched explain`
  // prints them. Default: nothing to say.
  virtual std::vector<std::string> reasons() const { return {}; }
  // False: the scheduler skips the what-if simulation (static policies) and
  // passes one default Outcome per candidate (feasible == false, not simulated).
  virtual bool needs_simulation() const { return true; }
  // What choose() minimises, when it is one the scheduler knows. With
  // kMeanCompletion the policy promises never to pick a candidate whose
  // mean_completion_s is greater than that of another feasible one; the
  // scheduler may then stop a what-if as soon as its mean must end up
  // greater, and hands that candidate over as dominated (the pick is the
  // same as with every candidate simulated to the end, only cheaper).
  // kMakespan is the same promise for makespan_s: the what-if stops as
  // soon as the batch's last operator must finish later than the best
  // feasible candidate's.
  // kNone (the default): every candidate is simulated to the end.
  enum class Objective { kNone, kMeanCompletion, kMakespan };
  virtual Objective objective() const { return Objective::kNone; }
  // Index into candidates (outcomes has the same size), or
  // nullopt to defer the batch to a later round. "Nothing feasible" is a
  // nullopt, never an exception.
  virtual std::optional<std::size_t> choose(const Gmg& gmg, const Batch& batch, std::span<const Candidate> candidates,
                                            std::span<const Outcome> outcomes) = 0;
};

// ---- composable stages ----
//
// A placement policy may be a list of stages instead of one plugin (the
// policy's `stages` in TOML; docs/config.md): filters, in order, drop
// candidates; then every score prices each candidate left, and the one
// with the lowest weighted sum of costs is picked (ties to the lowest
// index); none left: the batch is deferred. The scheduler sees the list
// as one PlacementPolicy. Stages are not thread-safe: one instance per
// policy, called on the engine thread.

// One round as a stage sees it. `outcomes` has one entry per candidate;
// they are predictions only when some stage of the list needs_simulation().
struct StageRound {
  const Gmg& gmg;
  const Batch& batch;
  std::span<const Candidate> candidates;
  std::span<const Outcome> outcomes;
};

class BOOST_SYMBOL_VISIBLE CandidateFilter {
 public:
  virtual ~CandidateFilter() = default;
  // As PlacementPolicy::bind.
  virtual Status bind(const PolicyContext& /*ctx*/) { return Status::Ok(); }
  // Whether it reads the outcomes (the what-if then runs).
  virtual bool needs_simulation() const { return false; }
  // Promise: it drops only candidates whose outcome is not feasible (or
  // not finite), so a what-if cut short under the list's objective (see
  // PlacementPolicy::objective) changes no pick. False is always correct.
  virtual bool drops_only_infeasible() const { return false; }
  // Clears keep[i] for each candidate it rejects (keep has one flag per
  // candidate; those already cleared by an earlier filter stay cleared).
  virtual void filter(const StageRound& round, std::span<std::uint8_t> keep) = 0;
  // As PlacementPolicy::reasons, for the latest filter() call.
  virtual std::vector<std::string> reasons() const { return {}; }
};

class BOOST_SYMBOL_VISIBLE CandidateScore {
 public:
  virtual ~CandidateScore() = default;
  virtual Status bind(const PolicyContext& /*ctx*/) { return Status::Ok(); }
  virtual bool needs_simulation() const { return false; }
  // kMeanCompletion: its cost is exactly outcome.mean_completion_s (and
  // kMakespan: makespan_s) of a feasible candidate. When every score of a
  // list says the same and every filter drops only infeasible ones, the
  // list declares that objective and the scheduler may cut what-ifs short.
  virtual PlacementPolicy::Objective objective() const { return PlacementPolicy::Objective::kNone; }
  // Writes cost[i] for each kept candidate: lower is better; a NaN or
  // infinite cost drops the candidate. Entries of dropped candidates are
  // ignored.
  virtual void score(const StageRound& round, std::span<const std::uint8_t> keep, std::span<double> cost) = 0;
  virtual std::vector<std::string> reasons() const { return {}; }
};

// A cross-accelerator transfer waiting to start. `since` (when it became
// pending) then `id` order intents by age.
struct TransferIntent {
  std::uint64_t id = 0;
  AccelId src = kNoAccel, dst = kNoAccel;
  Nanos since = 0;
  std::int64_t bytes = 0;
};

// The default transfer rule, which a config that names no arbiter gets,
// for arbiters to use (the built-in "greedy" is this rule). Pending
// intents are taken oldest first (by `since`, then `id`); each starts when
// its source and destination are neither busy nor taken this round, so the
// result is maximal: every intent left out shares a port with one taken or
// one in flight. Indices are appended in that age order.
//
// Oldest-first alone does not prevent starvation when transfers last
// several rounds: the oldest intent may find its source free while its
// destination is busy, a younger one takes the source, and so on forever.
// With reserve_oldest (the default rule), when the oldest intent is blocked
// by a busy port, both its ports are withheld from younger intents this
// round; ports in flight always drain, so it starts as soon as both are
// free. Each intent thus waits at most D rounds as the oldest (D: the
// longest transfer, in rounds), hence at most k*D rounds in all with k
// intents pending at its arrival (k rounds when transfers finish within
// the round that started them). The price is that the withheld free port
// may idle for a while; without the reservation the matching is maximal
// over all intents.
//
// select() keeps TransferArbiter::select's contract. Not thread-safe
// (scratch buffers); allocates only when the number of pending intents or
// accelerators grows.
class OldestFirstRule {
 public:
  explicit OldestFirstRule(bool reserve_oldest = true) : reserve_oldest_(reserve_oldest) {}
  bool reserve_oldest() const { return reserve_oldest_; }
  void select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
              std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out);

 private:
  bool reserve_oldest_;
  std::vector<std::size_t> order_;
  std::vector<std::uint8_t> src_taken_, dst_taken_;
};

// Decides which pending transfers start now. Not thread-safe: one instance
// per backend, and one per what-if worker thread (implementations keep
// scratch buffers).
//
// Who calls it: the emulated cluster (offline ground truth) and the global
// simulator (what-if predictions) both call select() at the same points: at
// a time t, after every completion at t was applied and the accelerators
// picked their next operators, whenever at t an operator finished, a
// transfer finished or an intent appeared, and intents are pending.
// `pending` is in age order, oldest first. The transfers in `out` start at
// t, in `out` order. An index out of range, repeated, or naming a busy port
// is a bug: the emulated cluster fails the run with it, the simulator skips
// it. So that predictions match what the backend does, select() must depend
// only on its arguments (not on its own history): the scheduler makes each
// what-if worker its own instance with the same arguments and reuses it
// across simulations.
class BOOST_SYMBOL_VISIBLE TransferArbiter {
 public:
  virtual ~TransferArbiter() = default;
  // Appends to `out` the indices (into `pending`) to activate now: never two
  // with the same src or the same dst, never one whose src is set in
  // `src_busy` or whose dst is set in `dst_busy` (per-accelerator flags of
  // the transfers in flight, one per accelerator), never one naming an
  // accelerator beyond those flags. `out` is the caller's buffer so a round
  // allocates nothing; it is appended to, not cleared.
  virtual void select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
                      std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) = 0;
  // Fast path: whether select() picks exactly what the default rule,
  // OldestFirstRule{} (with its reservation), picks. The global simulator
  // then applies that rule inline instead of calling select() (same picks,
  // no virtual call, no intent list). Say true only when select() is that
  // rule; false, the default, is always correct. The answer must not
  // change over the arbiter's life: the scheduler asks once per arbiter.
  virtual bool uses_default_rule() const { return false; }
};

// Predicts op and transfer times and learns from measurements. predict_*
// and linear() are const and safe for concurrent readers while no
// observe_* or seed_linear runs (the what-if threads share one estimator).
class BOOST_SYMBOL_VISIBLE Estimator {
 public:
  virtual ~Estimator() = default;
  // Seconds, never negative.
  virtual double predict_op(OpKindId kind, AccelTypeId type, std::span<const double> features) const = 0;
  virtual double predict_transfer(AccelId src, AccelId dst, std::uint64_t bytes) const = 0;
  // Learns from one measurement. Fails (InvalidArgument, one line) on input
  // the model cannot use, e.g. a feature count that does not match.
  virtual Status observe_op(OpKindId kind, AccelTypeId type, std::span<const double> features, double seconds) = 0;
  virtual Status observe_transfer(AccelId src, AccelId dst, std::uint64_t bytes, double seconds) = 0;
  // Fast path: an estimator that is an EstimatorSet underneath hands it out,
  // read-only, so the simulator predicts with inline table lookups instead
  // of virtual calls (and the host reports it and snapshots it as a
  // calibration profile). Owned by the estimator, the same pointer for its
  // whole life, and it must predict exactly what predict_* do. Null for any
  // other model: the simulator then calls predict_* (slower, same results),
  // and what needs the linear form (priors, the calibration snapshot, the
  // estimator report) is skipped.
  virtual const EstimatorSet* linear() const { return nullptr; }
  // Setup, on the engine thread before the first prediction: the host's
  // priors (from the templates, the link classes and the config's
  // [estimators] prior; see seed_priors and apply_as_prior) reach the
  // linear form by `write`, called once with it; returns what `write`
  // returns. The only way the host changes the linear form. An estimator
  // whose linear() is null fails with FailedPrecondition (the default).
  virtual Status seed_linear(const std::function<Status(EstimatorSet&)>& /*write*/) {
    return FailedPrecondition("this estimator has no linear form to seed");
  }
};

// ---- registries ----

// Deletes a plugin object, then lets go of the library its code lives in
// (null for linked-in plugins), so the destructor runs while the library is
// still loaded. Letting go here, not when the deleter dies, is what makes
// `ptr.reset()` unload: unique_ptr keeps its deleter after a reset. The
// library's own code must therefore never drop the last PluginPtr of an
// object of its own library (it would return into unmapped code).
struct PluginDeleter {
  std::shared_ptr<const void> library;
  template <typename T>
  void operator()(T* p) noexcept {
    delete p;
    library.reset();
  }
};

// A plugin object. Keeps its library loaded for as long as it lives.
template <typename T>
using PluginPtr = std::unique_ptr<T, PluginDeleter>;

// Named factories for one extension point. Factories throw on bad arguments
// (see bad_arg); create() turns that into a Status naming the plugin.
template <typename T>
class PluginRegistry {
 public:
  using Factory = std::function<std::unique_ptr<T>(const PluginArgs& args)>;

  // `kind` names the extension point in messages, e.g. "placement policy".
  explicit PluginRegistry(std::string kind) : kind_(std::move(kind)) {}

  const std::string& kind() const { return kind_; }

  // Fails with AlreadyExists "placement policy 'x' is already registered",
  // or InvalidArgument on an empty name or factory.
  Status add(std::string name, Factory factory);

  // A new object from `args` (an object; null means no arguments). Fails
  // with NotFound "unknown placement policy 'x' (available: a, b)", or with
  // InvalidArgument "placement policy 'x': <what the factory threw>".
  Result<PluginPtr<T>> create(std::string_view name, const PluginArgs& args = nullptr) const;

  bool contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }
  // Sorted.
  std::vector<std::string> names() const;
  // "a, b, c", or "none".
  std::string available() const;

  // Moves every entry of `from` in, each keeping `library` loaded. Checks
  // first: on a duplicate nothing moves.
  Status check_disjoint(const PluginRegistry& from) const;
  void adopt(PluginRegistry&& from, const std::shared_ptr<const void>& library);

 private:
  struct Entry {
    // First member, so it dies last: the factory's code may be in it.
    std::shared_ptr<const void> library;
    Factory factory;
  };
  std::string kind_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// One registry per extension point.
struct PluginRegistries {
  PluginRegistry<PartitionSet> partition{"partition set"};
  PluginRegistry<PlacementPolicy> placement{"placement policy"};
  PluginRegistry<Estimator> estimator{"estimator"};
  PluginRegistry<TransferArbiter> arbiter{"transfer arbiter"};
  PluginRegistry<CandidateFilter> filter{"filter stage"};
  PluginRegistry<CandidateScore> score{"score stage"};

  // Moves every entry of `staged` in, all or nothing, each keeping
  // `library` loaded. Fails naming the first duplicate.
  Status adopt(PluginRegistries&& staged, const std::shared_ptr<const void>& library);
};

// A plugin library's entry point, exported under the one alias name that
// plugins/plugin_entry.hpp defines: registers the library's plugins.
using PluginEntry = Status(PluginRegistries& registries);

// ---- argument helpers for factories ----

// Throws std::invalid_argument "key 'k': problem".
[[noreturn]] void bad_arg(std::string_view key, std::string_view problem);
// Throws bad_arg for the first key of `args` not in `accepted`.
void check_keys(const PluginArgs& args, std::initializer_list<std::string_view> accepted);
// The value of an optional key when it is a number >= 0; `fallback` when
// the key is absent.
double non_negative_arg(const PluginArgs& args, std::string_view key, double fallback);
// Optional boolean key.
bool bool_arg(const PluginArgs& args, std::string_view key, bool fallback);
// The optional integer key `key` in [min, max] (min <= max); `fallback`
// (returned as is) when the key is absent. Anything else is bad_arg:
// "key 'seed': expected an integer in [0, 9223372036854775807], got 1e+30".
// A float is refused even when whole (4.0): TOML keeps integers and floats
// apart, so a float where an integer belongs is a mistake, and a cast of a
// huge or non-finite one would be undefined.
std::int64_t integer_arg(const PluginArgs& args, std::string_view key, std::int64_t fallback, std::int64_t min,
                         std::int64_t max);
// The same check for a value found elsewhere (an array element): `key`
// names it in the error ("groups[0][1]").
std::int64_t integer_value(const PluginArgs& value, std::string_view key, std::int64_t min, std::int64_t max);

// ---- PluginRegistry ----

template <typename T>
Status PluginRegistry<T>::add(std::string name, Factory factory) {
  if (name.empty()) return InvalidArgument(kind_ + " name must not be empty");
  if (!factory) return InvalidArgument(kind_ + " '" + name + "' has no factory");
  if (contains(name)) return AlreadyExists(kind_ + " '" + name + "' is already registered");
  entries_.emplace(std::move(name), Entry{nullptr, std::move(factory)});
  return Status::Ok();
}

template <typename T>
Result<PluginPtr<T>> PluginRegistry<T>::create(std::string_view name, const PluginArgs& args) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    return NotFound("unknown " + kind_ + " '" + std::string(name) + "' (available: " + available() + ")");
  const std::string who = kind_ + " '" + it->first + "': ";
  if (!args.is_null() && !args.is_object())
    return InvalidArgument(who + "arguments must be a table, not " + std::string(args.type_name()));
  static const PluginArgs kNoArgs = PluginArgs::object();
  std::unique_ptr<T> made;
  try {
    made = it->second.factory(args.is_null() ? kNoArgs : args);
  } catch (const std::exception& e) {
    // Copied out here: the exception object may belong to the library.
    return InvalidArgument(who + e.what());
  } catch (...) {
    return InvalidArgument(who + "factory threw a non-standard exception");
  }
  if (!made) return FailedPrecondition(who + "factory returned no object");
  return PluginPtr<T>(made.release(), PluginDeleter{it->second.library});
}

template <typename T>
std::vector<std::string> PluginRegistry<T>::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

template <typename T>
std::string PluginRegistry<T>::available() const {
  std::string out;
  for (const auto& [name, entry] : entries_) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

template <typename T>
Status PluginRegistry<T>::check_disjoint(const PluginRegistry& from) const {
  for (const auto& [name, entry] : from.entries_)
    if (contains(name)) return AlreadyExists(kind_ + " '" + name + "' is already registered");
  return Status::Ok();
}

template <typename T>
void PluginRegistry<T>::adopt(PluginRegistry&& from, const std::shared_ptr<const void>& library) {
  for (auto& [name, entry] : from.entries_) entries_.emplace(name, Entry{library, std::move(entry.factory)});
  from.entries_.clear();
}

}  // namespace slicesched
