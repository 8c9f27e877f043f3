// A placement policy made of stages (a policy's `stages` in TOML): the
// filters in order, then the weighted sum of the scores, lowest wins. How
// plugins stack: each stage is its own plugin, from any library.
module;
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

export module slicesched.plugins.stages.staged;
import slicesched.core.plugin;

export namespace slicesched::plugins {

struct FilterStage {
  PluginPtr<CandidateFilter> plugin;
  std::string name;  // in reasons
};

struct ScoreStage {
  PluginPtr<CandidateScore> plugin;
  std::string name;
  double weight = 1;  // finite, > 0 (the config checks)
};

// Candidate i survives when every filter keeps it and every score gives it
// a finite cost; the pick is the survivor with the lowest sum over scores
// of weight * cost, ties to the lowest index; none: deferred. With one
// score of weight 1 the sum is that score's cost exactly, so [feasible,
// mean-completion] picks what simulation-guided picks.
//
// needs_simulation() and objective() are asked of the stages once, at
// construction: the list needs a what-if if any stage does, and declares
// an objective when every score declares the same one and every filter
// drops only infeasible candidates. Not thread-safe, like any policy.
class StagedPlacement final : public PlacementPolicy {
 public:
  StagedPlacement(std::vector<FilterStage> filters, std::vector<ScoreStage> scores);
  Status bind(const PolicyContext& ctx) override;
  bool needs_simulation() const override { return simulate_; }
  Objective objective() const override { return objective_; }
  std::optional<std::size_t> choose(const Gmg& gmg, const Batch& batch, std::span<const Candidate> candidates,
                                    std::span<const Outcome> outcomes) override;
  // Per filter how many candidates it left, the pick's cost per score, and
  // whatever each stage says of itself. Built on demand (only --explain asks).
  std::vector<std::string> reasons() const override;

 private:
  std::vector<FilterStage> filters_;
  std::vector<ScoreStage> scores_;
  bool simulate_ = false;
  Objective objective_ = Objective::kNone;
  // The latest choose(), for reasons().
  std::size_t offered_ = 0;
  std::vector<std::size_t> left_after_;  // per filter
  std::size_t scored_ = 0;               // survivors of every score
  std::optional<std::size_t> pick_;
  std::vector<double> pick_costs_;  // per score, the pick's cost
  double pick_total_ = 0;
  std::vector<std::uint8_t> keep_, kept_before_;
  std::vector<double> cost_, total_;
};

}  // namespace slicesched::plugins
