module;
#include <cxxabi.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

module slicesched.compose.guard;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.estimator;

namespace slicesched {

std::string describe_current_exception() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (!type) return "an unknown exception";
  int status = 0;
  char* demangled = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : type->name();
  std::free(demangled);
  return "a non-standard exception of type " + name;
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
constexpr bool kCounter = true;
std::int64_t ticks_now() { return static_cast<std::int64_t>(__rdtsc()); }
#else
constexpr bool kCounter = false;
std::int64_t ticks_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
#endif

// Both clocks when the first guard was made: seconds() scales ticks by
// the steady clock's time since then over the ticks since then.
struct Epoch {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  std::int64_t ticks = ticks_now();
};
const Epoch& epoch() {
  static const Epoch e;
  return e;
}

double seconds_per_tick() {
  if (!kCounter) return 1e-9;
  const Epoch& e = epoch();
  // At least a millisecond apart, so the ratio is not the reads' noise.
  auto wall = std::chrono::steady_clock::now();
  std::int64_t ticks = ticks_now();
  while (wall - e.wall < std::chrono::milliseconds(1) || ticks <= e.ticks) {
    wall = std::chrono::steady_clock::now();
    ticks = ticks_now();
  }
  return std::chrono::duration<double>(wall - e.wall).count() / static_cast<double>(ticks - e.ticks);
}

// Runs `f`, a call into the plugin `who`; anything it throws comes out as
// a PluginFailure naming it (one already named passes through).
// Counts one call and its time into `use` (null: nothing), however it ends.
struct Timed {
  PluginUse* use;
  std::int64_t t0 = use ? ticks_now() : 0;
  ~Timed() {
    if (!use) return;
    use->calls.fetch_add(1, std::memory_order_relaxed);
    use->ticks.fetch_add(ticks_now() - t0, std::memory_order_relaxed);
  }
};

template <typename F>
auto call(const std::string& who, const std::shared_ptr<PluginUse>& use, F&& f) -> decltype(f()) {
  const Timed timed{use.get()};
  try {
    return f();
  } catch (const PluginFailure&) {
    throw;
  } catch (...) {
    throw PluginFailure(who + " threw: " + describe_current_exception());
  }
}

class GuardedPartitionSet final : public PartitionSet {
 public:
  GuardedPartitionSet(PluginPtr<PartitionSet> inner, std::string who, std::shared_ptr<PluginUse> use)
      : inner_(std::move(inner)), who_(std::move(who)), use_(std::move(use)) {}
  Status bind(const AcceleratorSet& accels) override {
    return call(who_, use_, [&] { return inner_->bind(accels); });
  }
  std::vector<Candidate> candidates(const Gmg& gmg, const Batch& batch) override {
    std::vector<Candidate> cands = call(who_, use_, [&] { return inner_->candidates(gmg, batch); });
    check(gmg, batch, cands);
    return cands;
  }
  void candidates_into(const Gmg& gmg, const Batch& batch, std::vector<Candidate>& out) override {
    call(who_, use_, [&] { inner_->candidates_into(gmg, batch, out); });
    check(gmg, batch, out);
  }

 private:
  void check(const Gmg& gmg, const Batch& batch, const std::vector<Candidate>& cands) const {
    for (const Candidate& c : cands) {
      if (c.accel.size() != batch.ops.size())
        throw PluginFailure(who_ + ": candidate '" + c.label + "' places " + std::to_string(c.accel.size()) +
                            " operator(s) of a batch of " + std::to_string(batch.ops.size()));
      for (AccelId a : c.accel)
        if (!gmg.accels().contains(a))
          throw PluginFailure(who_ + ": candidate '" + c.label + "' names accelerator " + std::to_string(a) +
                              ", which the cluster does not have (it has " + std::to_string(gmg.accels().size()) + ")");
    }
  }

  PluginPtr<PartitionSet> inner_;
  std::string who_;
  std::shared_ptr<PluginUse> use_;
};

class GuardedPlacement final : public PlacementPolicy {
 public:
  GuardedPlacement(PluginPtr<PlacementPolicy> inner, std::string who, std::shared_ptr<PluginUse> use)
      : inner_(std::move(inner)), who_(std::move(who)), use_(std::move(use)) {}
  // bind() and reasons() are not counted: reasons() runs only when the run
  // records decisions, and the counts in summary.json must not depend on it.
  Status bind(const PolicyContext& ctx) override {
    return call(who_, nullptr, [&] { return inner_->bind(ctx); });
  }
  std::vector<std::string> reasons() const override {
    return call(who_, nullptr, [&] { return inner_->reasons(); });
  }
  bool needs_simulation() const override {
    return call(who_, nullptr, [&] { return inner_->needs_simulation(); });
  }
  Objective objective() const override {
    return call(who_, nullptr, [&] { return inner_->objective(); });
  }
  std::optional<std::size_t> choose(const Gmg& gmg, const Batch& batch, std::span<const Candidate> candidates,
                                    std::span<const Outcome> outcomes) override {
    return call(who_, use_, [&] { return inner_->choose(gmg, batch, candidates, outcomes); });
  }

 private:
  PluginPtr<PlacementPolicy> inner_;
  std::string who_;
  std::shared_ptr<PluginUse> use_;
};

class GuardedArbiter final : public TransferArbiter {
 public:
  GuardedArbiter(PluginPtr<TransferArbiter> inner, std::string who, std::shared_ptr<PluginUse> use)
      : inner_(std::move(inner)), who_(std::move(who)), use_(std::move(use)) {}
  void select(std::span<const TransferIntent> pending, std::span<const std::uint8_t> src_busy,
              std::span<const std::uint8_t> dst_busy, std::vector<std::size_t>& out) override {
    call(who_, use_, [&] { inner_->select(pending, src_busy, dst_busy, out); });
  }
  bool uses_default_rule() const override {
    return call(who_, nullptr, [&] { return inner_->uses_default_rule(); });
  }

 private:
  PluginPtr<TransferArbiter> inner_;
  std::string who_;
  std::shared_ptr<PluginUse> use_;
};

// The most one operator or transfer may be predicted to take: 11.6 days.
// A what-if adds up the times of everything issued in nanoseconds; below
// this, even thousands of them stay far inside an int64.
constexpr double kMaxPredictionSeconds = 1e6;

class GuardedEstimator final : public Estimator {
 public:
  GuardedEstimator(PluginPtr<Estimator> inner, std::string who, std::shared_ptr<PluginUse> use)
      : inner_(std::move(inner)), who_(std::move(who)), use_(std::move(use)) {}
  // A prediction is seconds, finite, never negative and at most
  // kMaxPredictionSeconds (EstimatorPlugin's contract): NaN or -1 became 0 s
  // and infinity 1e9 s in the what-ifs, which then placed on nonsense
  // without a word; and a few finite ones near 1e9 s summed past int64's
  // nanoseconds, so a what-if ranked the slowest candidate first.
  double predict_op(OpKindId kind, AccelTypeId type, std::span<const double> features) const override {
    const double s = call(who_, use_, [&] { return inner_->predict_op(kind, type, features); });
    if (!(s >= 0 && s <= kMaxPredictionSeconds))
      refuse(s, "operator kind " + std::to_string(kind) + " on accelerator type " + std::to_string(type));
    return s;
  }
  double predict_transfer(AccelId src, AccelId dst, std::uint64_t bytes) const override {
    const double s = call(who_, use_, [&] { return inner_->predict_transfer(src, dst, bytes); });
    if (!(s >= 0 && s <= kMaxPredictionSeconds))
      refuse(s, "a transfer of " + std::to_string(bytes) + " bytes from accelerator " + std::to_string(src) + " to " +
                    std::to_string(dst));
    return s;
  }
  // A failure it returns names it (it was told as the placement policy's).
  Status observe_op(OpKindId kind, AccelTypeId type, std::span<const double> features, double seconds) override {
    return named(call(who_, use_, [&] { return inner_->observe_op(kind, type, features, seconds); }));
  }
  Status observe_transfer(AccelId src, AccelId dst, std::uint64_t bytes, double seconds) override {
    return named(call(who_, use_, [&] { return inner_->observe_transfer(src, dst, bytes, seconds); }));
  }
  const EstimatorSet* linear() const override {
    return call(who_, nullptr, [&] { return inner_->linear(); });
  }
  Status seed_linear(const std::function<Status(EstimatorSet&)>& write) override {
    return call(who_, use_, [&] { return inner_->seed_linear(write); });
  }

 private:
  Status named(Status s) const { return s.ok() ? s : Status(s.code(), who_ + ": " + s.message()); }
  [[noreturn]] void refuse(double s, const std::string& what) const {
    char b[32];
    std::snprintf(b, sizeof b, "%g", s);
    throw PluginFailure(who_ + " predicted " + b + " s for " + what + " (expected seconds, from 0 to 1e6)");
  }
  PluginPtr<Estimator> inner_;
  std::string who_;
  std::shared_ptr<PluginUse> use_;
};

class GuardedFilter final : public CandidateFilter {
 public:
  GuardedFilter(PluginPtr<CandidateFilter> inner, std::string who, std::shared_ptr<PluginUse> use)
      : inner_(std::move(inner)), who_(std::move(who)), use_(std::move(use)) {}
  Status bind(const PolicyContext& ctx) override {
    return call(who_, nullptr, [&] { return inner_->bind(ctx); });
  }
  bool needs_simulation() const override {
    return call(who_, nullptr, [&] { return inner_->needs_simulation(); });
  }
  bool drops_only_infeasible() const override {
    return call(who_, nullptr, [&] { return inner_->drops_only_infeasible(); });
  }
  void filter(const StageRound& round, std::span<std::uint8_t> keep) override {
    call(who_, use_, [&] { inner_->filter(round, keep); });
  }
  std::vector<std::string> reasons() const override {
    return call(who_, nullptr, [&] { return inner_->reasons(); });
  }

 private:
  PluginPtr<CandidateFilter> inner_;
  std::string who_;
  std::shared_ptr<PluginUse> use_;
};

class GuardedScore final : public CandidateScore {
 public:
  GuardedScore(PluginPtr<CandidateScore> inner, std::string who, std::shared_ptr<PluginUse> use)
      : inner_(std::move(inner)), who_(std::move(who)), use_(std::move(use)) {}
  Status bind(const PolicyContext& ctx) override {
    return call(who_, nullptr, [&] { return inner_->bind(ctx); });
  }
  bool needs_simulation() const override {
    return call(who_, nullptr, [&] { return inner_->needs_simulation(); });
  }
  PlacementPolicy::Objective objective() const override {
    return call(who_, nullptr, [&] { return inner_->objective(); });
  }
  void score(const StageRound& round, std::span<const std::uint8_t> keep, std::span<double> cost) override {
    call(who_, use_, [&] { inner_->score(round, keep, cost); });
  }
  std::vector<std::string> reasons() const override {
    return call(who_, nullptr, [&] { return inner_->reasons(); });
  }

 private:
  PluginPtr<CandidateScore> inner_;
  std::string who_;
  std::shared_ptr<PluginUse> use_;
};

template <typename Guarded, typename T>
PluginPtr<T> wrap(PluginPtr<T> inner, std::string who, std::shared_ptr<PluginUse> use) {
  epoch();  // before the first call is timed
  return PluginPtr<T>(new Guarded(std::move(inner), std::move(who), std::move(use)), PluginDeleter{});
}

}  // namespace

double PluginUse::seconds() const { return static_cast<double>(ticks.load()) * seconds_per_tick(); }

PluginPtr<PartitionSet> guard(PluginPtr<PartitionSet> inner, std::string who, std::shared_ptr<PluginUse> use) {
  return wrap<GuardedPartitionSet>(std::move(inner), std::move(who), std::move(use));
}
PluginPtr<PlacementPolicy> guard(PluginPtr<PlacementPolicy> inner, std::string who, std::shared_ptr<PluginUse> use) {
  return wrap<GuardedPlacement>(std::move(inner), std::move(who), std::move(use));
}
PluginPtr<TransferArbiter> guard(PluginPtr<TransferArbiter> inner, std::string who, std::shared_ptr<PluginUse> use) {
  return wrap<GuardedArbiter>(std::move(inner), std::move(who), std::move(use));
}
PluginPtr<Estimator> guard(PluginPtr<Estimator> inner, std::string who, std::shared_ptr<PluginUse> use) {
  return wrap<GuardedEstimator>(std::move(inner), std::move(who), std::move(use));
}

PluginPtr<CandidateFilter> guard(PluginPtr<CandidateFilter> inner, std::string who, std::shared_ptr<PluginUse> use) {
  return wrap<GuardedFilter>(std::move(inner), std::move(who), std::move(use));
}
PluginPtr<CandidateScore> guard(PluginPtr<CandidateScore> inner, std::string who, std::shared_ptr<PluginUse> use) {
  return wrap<GuardedScore>(std::move(inner), std::move(who), std::move(use));
}

}  // namespace slicesched
