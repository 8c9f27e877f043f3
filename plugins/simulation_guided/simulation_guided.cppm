// Placement "simulation-guided" (the paper's policy): of the candidates the
// what-if simulation found feasible, the one whose batch ops complete
// soonest on average.
module;
#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

export module slicesched.plugins.simulation_guided;
import slicesched.core.plugin;

export namespace slicesched::plugins {

inline constexpr std::string_view kSimulationGuided = "simulation-guided";

// Lowest mean_completion_s among feasible outcomes; ties go to the lowest
// index (the partition set's preference order), so a round is
// deterministic. A non-finite mean counts as infeasible. nullopt when none
// is feasible: the batch waits for a later round. Stateless.
class SimulationGuided final : public PlacementPolicy {
 public:
  Objective objective() const override { return Objective::kMeanCompletion; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate> candidates,
                                    std::span<const Outcome> outcomes) override {
    std::optional<std::size_t> best;
    const std::size_t n = candidates.size() < outcomes.size() ? candidates.size() : outcomes.size();
    for (std::size_t i = 0; i < n; ++i) {
      const Outcome& o = outcomes[i];
      if (!o.feasible || !std::isfinite(o.mean_completion_s)) continue;
      if (!best || o.mean_completion_s < outcomes[*best].mean_completion_s) best = i;
    }
    return best;
  }
};

// Registers "simulation-guided" (takes no arguments).
Status register_simulation_guided(PluginRegistries& r) {
  return r.placement.add(std::string(kSimulationGuided), [](const PluginArgs& args) {
    check_keys(args, {});
    return std::make_unique<SimulationGuided>();
  });
}

}  // namespace slicesched::plugins
