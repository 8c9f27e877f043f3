// The built-in stages a policy's `stages` list is made of (docs/config.md):
//   filter "feasible":        keeps candidates the what-if found feasible
//                             with a finite mean completion;
//   score "mean-completion":  cost = the outcome's mean_completion_s;
//   score "makespan":         cost = the outcome's makespan_s;
//   score "candidate-order":  cost = the candidate's index (the partition
//                             sets' preference order; no simulation).
// [feasible, mean-completion] is simulation-guided; [candidate-order]
// alone is static.
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

export module slicesched.plugins.stages;
import slicesched.core.plugin;

export namespace slicesched::plugins {

// Stateless.
class FeasibleFilter final : public CandidateFilter {
 public:
  bool needs_simulation() const override { return true; }
  bool drops_only_infeasible() const override { return true; }
  void filter(const StageRound& round, std::span<std::uint8_t> keep) override {
    for (std::size_t i = 0; i < keep.size() && i < round.outcomes.size(); ++i) {
      const Outcome& o = round.outcomes[i];
      if (!o.feasible || !std::isfinite(o.mean_completion_s) || !std::isfinite(o.makespan_s)) keep[i] = 0;
    }
  }
};

// Cost = one field of a feasible outcome (not finite for any other: dropped).
class OutcomeScore final : public CandidateScore {
 public:
  explicit OutcomeScore(PlacementPolicy::Objective what) : what_(what) {}
  bool needs_simulation() const override { return true; }
  PlacementPolicy::Objective objective() const override { return what_; }
  void score(const StageRound& round, std::span<const std::uint8_t> keep, std::span<double> cost) override {
    for (std::size_t i = 0; i < cost.size() && i < round.outcomes.size(); ++i) {
      const Outcome& o = round.outcomes[i];
      if (!keep[i]) continue;
      cost[i] = !o.feasible ? NAN : what_ == PlacementPolicy::Objective::kMakespan ? o.makespan_s : o.mean_completion_s;
    }
  }

 private:
  PlacementPolicy::Objective what_;
};

class CandidateOrderScore final : public CandidateScore {
 public:
  void score(const StageRound&, std::span<const std::uint8_t>, std::span<double> cost) override {
    for (std::size_t i = 0; i < cost.size(); ++i) cost[i] = static_cast<double>(i);
  }
};

// Registers the four built-in stages (none takes arguments).
Status register_stages(PluginRegistries& r) {
  if (Status s = r.filter.add("feasible",
                              [](const PluginArgs& args) {
                                check_keys(args, {});
                                return std::make_unique<FeasibleFilter>();
                              });
      !s.ok())
    return s;
  if (Status s = r.score.add("mean-completion",
                             [](const PluginArgs& args) {
                               check_keys(args, {});
                               return std::make_unique<OutcomeScore>(PlacementPolicy::Objective::kMeanCompletion);
                             });
      !s.ok())
    return s;
  if (Status s = r.score.add("makespan",
                             [](const PluginArgs& args) {
                               check_keys(args, {});
                               return std::make_unique<OutcomeScore>(PlacementPolicy::Objective::kMakespan);
                             });
      !s.ok())
    return s;
  return r.score.add("candidate-order", [](const PluginArgs& args) {
    check_keys(args, {});
    return std::make_unique<CandidateOrderScore>();
  });
}

}  // namespace slicesched::plugins
