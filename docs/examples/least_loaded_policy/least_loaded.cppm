// Placement "least-loaded", an out-of-tree example (docs/plugins.md): the
// candidate whose busiest accelerator has the least work queued on it,
// without a what-if. A queue's work is what the estimator prices the
// operators issued there and not done yet at (price_op, with the
// estimator the run hands over in bind()). "simulation-guided" instead
// simulates each candidate and minimises the batch's mean completion.
module;
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

export module example.least_loaded;
export import slicesched.core.views;

namespace example {

using namespace slicesched;

// Candidates whose load is within `tolerance_s` of the least count as
// ties, and a tie goes to the lowest index (the partition set's preference
// order), so a round is deterministic. A candidate naming an accelerator
// the cluster lacks is skipped; nullopt when none is left. Keeps the
// latest round's loads for reasons().
export class LeastLoaded final : public PlacementPolicy {
 public:
  explicit LeastLoaded(double tolerance_s) : tolerance_s_(tolerance_s) {}

  bool needs_simulation() const override { return false; }

  Status bind(const PolicyContext& ctx) override {
    if (!ctx.estimator) return FailedPrecondition("least-loaded needs the policy's estimator");
    est_ = ctx.estimator;
    return Status::Ok();
  }

  std::optional<std::size_t> choose(const Gmg& gmg, const Batch&, std::span<const Candidate> candidates,
                                    std::span<const Outcome>) override {
    // Seconds of work queued per accelerator.
    queued_.assign(gmg.accels().size(), 0.0);
    for (OpId op : gmg.issued_ops()) {
      const AccelId a = gmg.op(op).accel;
      if (auto priced = price_op(*est_, gmg, op, a); priced.ok()) queued_[a] += priced.value();
    }
    // A candidate's load: its busiest accelerator's.
    load_.assign(candidates.size(), -1.0);
    std::optional<double> best;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      double load = 0;
      for (AccelId a : candidates[i].accel) {
        if (a >= queued_.size()) {
          load = -1;
          break;
        }
        load = queued_[a] > load ? queued_[a] : load;
      }
      load_[i] = load;
      if (load >= 0 && (!best || load < *best)) best = load;
    }
    pick_.reset();
    if (!best) return std::nullopt;
    for (std::size_t i = 0; i < candidates.size() && !pick_; ++i)
      if (load_[i] >= 0 && load_[i] <= *best + tolerance_s_) pick_ = i;
    return pick_;
  }

  std::vector<std::string> reasons() const override {
    if (!pick_) return {"no candidate on accelerators the cluster has"};
    double most = 0;
    for (double l : load_) most = l > most ? l : most;
    char line[160];
    std::snprintf(line, sizeof line,
                  "least queued work: %.6f s on its busiest accelerator (most loaded candidate: %.6f s)", load_[*pick_],
                  most);
    return {line};
  }

 private:
  double tolerance_s_;
  const Estimator* est_ = nullptr;
  std::vector<double> queued_, load_;
  std::optional<std::size_t> pick_;
};

// Registers "least-loaded"; its one optional argument is
// `tolerance_s` (a number >= 0, default 0).
export Status register_least_loaded(PluginRegistries& r) {
  return r.placement.add("least-loaded", [](const PluginArgs& args) {
    check_keys(args, {"tolerance_s"});
    return std::make_unique<LeastLoaded>(non_negative_arg(args, "tolerance_s", 0.0));
  });
}

}  // namespace example
