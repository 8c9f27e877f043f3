// A plugin library of plugins that fail on purpose, for the CLI tests of
// what simulate does when one policy of several fails (each failure must
// end in one line naming the plugin):
//   placement "always-defer"      defers every batch (the engine ends in a deadlock)
//   placement "throws-at-choose"  throws a std::runtime_error from choose()
//   placement "throws-int"        throws 42 from choose()
//   placement "invalid-pick"      picks an index past the candidates
//   partition set "throws-candidates"  throws from candidates()
//   partition set "unknown-accelerator" offers accelerator 99
//   arbiter "throws-select"       throws from select()
//   arbiter "never-starts"        never starts a transfer
//   placement "slow-static"       takes candidate 0 after sleeping `ms` milliseconds
//   partition set "throws-bind"   throws from bind()
//   estimator "nan-estimator"     predicts NaN seconds for every operator
//   estimator "huge-estimator"    predicts 1e7 s (finite, but past the 1e6 s cap) for every operator
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "plugin_entry.hpp"

import slicesched.core.plugin;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.gmg;

namespace {

using namespace slicesched;

class AlwaysDefer final : public PlacementPolicy {
 public:
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate>,
                                    std::span<const Outcome>) override {
    return std::nullopt;
  }
};

class ThrowsAtChoose final : public PlacementPolicy {
 public:
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate>,
                                    std::span<const Outcome>) override {
    throw std::runtime_error("choose() failed on purpose");
  }
};

class ThrowsInt final : public PlacementPolicy {
 public:
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate>,
                                    std::span<const Outcome>) override {
    throw 42;
  }
};

class InvalidPick final : public PlacementPolicy {
 public:
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate> candidates,
                                    std::span<const Outcome>) override {
    return candidates.size() + 5;
  }
};

// Static placement that takes `ms` of wall time per choice: deciding
// outlasts the simulated time it schedules.
class SlowStatic final : public PlacementPolicy {
 public:
  explicit SlowStatic(std::int64_t ms) : ms_(ms) {}
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate> candidates,
                                    std::span<const Outcome>) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    if (candidates.empty()) return std::nullopt;
    return 0;
  }

 private:
  std::int64_t ms_;
};

class ThrowsCandidates final : public PartitionSet {
 public:
  std::vector<Candidate> candidates(const Gmg&, const Batch&) override {
    throw std::logic_error("candidates() failed on purpose");
  }
};

class UnknownAccelerator final : public PartitionSet {
 public:
  std::vector<Candidate> candidates(const Gmg&, const Batch& batch) override {
    return {Candidate{"nowhere", std::vector<AccelId>(batch.ops.size(), 99)}};
  }
};

class ThrowsBind final : public PartitionSet {
 public:
  Status bind(const AcceleratorSet&) override { throw std::runtime_error("bind() failed on purpose"); }
  std::vector<Candidate> candidates(const Gmg&, const Batch&) override { return {}; }
};

class NanEstimator final : public Estimator {
 public:
  double predict_op(OpKindId, AccelTypeId, std::span<const double>) const override {
    return std::numeric_limits<double>::quiet_NaN();
  }
  double predict_transfer(AccelId, AccelId, std::uint64_t) const override { return 1e-6; }
  Status observe_op(OpKindId, AccelTypeId, std::span<const double>, double) override { return Status::Ok(); }
  Status observe_transfer(AccelId, AccelId, std::uint64_t, double) override { return Status::Ok(); }
};

class HugeEstimator final : public Estimator {
 public:
  double predict_op(OpKindId, AccelTypeId, std::span<const double>) const override { return 1e7; }
  double predict_transfer(AccelId, AccelId, std::uint64_t) const override { return 1e-6; }
  Status observe_op(OpKindId, AccelTypeId, std::span<const double>, double) override { return Status::Ok(); }
  Status observe_transfer(AccelId, AccelId, std::uint64_t, double) override { return Status::Ok(); }
};

// Predicts fine, but refuses what it is told: the failure names it.
class RefusesObservation final : public Estimator {
 public:
  double predict_op(OpKindId, AccelTypeId, std::span<const double>) const override { return 1e-3; }
  double predict_transfer(AccelId, AccelId, std::uint64_t) const override { return 1e-6; }
  Status observe_op(OpKindId, AccelTypeId, std::span<const double>, double) override {
    return FailedPrecondition("observe_op() refused on purpose");
  }
  Status observe_transfer(AccelId, AccelId, std::uint64_t, double) override { return Status::Ok(); }
};

class ThrowsSelect final : public TransferArbiter {
 public:
  void select(std::span<const TransferIntent>, std::span<const std::uint8_t>, std::span<const std::uint8_t>,
              std::vector<std::size_t>&) override {
    throw std::runtime_error("select() failed on purpose");
  }
};

class NeverStarts final : public TransferArbiter {
 public:
  void select(std::span<const TransferIntent>, std::span<const std::uint8_t>, std::span<const std::uint8_t>,
              std::vector<std::size_t>&) override {}
};

template <typename T, typename Registry>
Status add(Registry& registry, const char* name) {
  return registry.add(name, [](const PluginArgs& args) {
    check_keys(args, {});
    return std::make_unique<T>();
  });
}

Status register_more(PluginRegistries& r) {
  for (Status s : {add<ThrowsInt>(r.placement, "throws-int"), add<InvalidPick>(r.placement, "invalid-pick"),
                   add<ThrowsCandidates>(r.partition, "throws-candidates"), add<ThrowsBind>(r.partition, "throws-bind"),
                   add<NanEstimator>(r.estimator, "nan-estimator"), add<HugeEstimator>(r.estimator, "huge-estimator"),
                   add<RefusesObservation>(r.estimator, "refuses-observation"),
                   add<UnknownAccelerator>(r.partition, "unknown-accelerator"),
                   add<ThrowsSelect>(r.arbiter, "throws-select"), add<NeverStarts>(r.arbiter, "never-starts")})
    if (!s.ok()) return s;
  return Status::Ok();
}

Status register_all(PluginRegistries& r) {
  if (Status s = register_more(r); !s.ok()) return s;
  if (Status s = r.placement.add("slow-static",
                                 [](const PluginArgs& args) {
                                   check_keys(args, {"ms"});
                                   return std::make_unique<SlowStatic>(integer_arg(args, "ms", 10, 0, 10'000));
                                 });
      !s.ok())
    return s;
  if (Status s = r.placement.add("always-defer",
                                 [](const PluginArgs& args) {
                                   check_keys(args, {});
                                   return std::make_unique<AlwaysDefer>();
                                 });
      !s.ok())
    return s;
  return r.placement.add("throws-at-choose", [](const PluginArgs& args) {
    check_keys(args, {});
    return std::make_unique<ThrowsAtChoose>();
  });
}

}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
