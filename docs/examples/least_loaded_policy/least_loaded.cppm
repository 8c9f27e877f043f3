// Placement "least-loaded", an out-of-tree example (docs/plugins.md): of the
// candidates the what-if simulation found feasible, the one whose whole
// batch is predicted to be done first (lowest makespan_s), i.e. whose
// accelerators have the least queued work ahead of it. "simulation-guided"
// instead minimises the batch's mean completion time.
module;
#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>

export module example.least_loaded;
export import slicesched.core.plugin;

namespace example {

using namespace slicesched;

// Candidates within `tolerance_s` of the best makespan count as ties, and a
// tie goes to the lowest index (the partition set's preference order), so a
// round is deterministic. A non-finite makespan counts as infeasible.
// nullopt when nothing is feasible: the batch waits for a later round.
// Stateless apart from its argument.
export class LeastLoaded final : public PlacementPolicy {
 public:
  explicit LeastLoaded(double tolerance_s) : tolerance_s_(tolerance_s) {}

  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate> candidates,
                                    std::span<const Outcome> outcomes) override {
    const std::size_t n = candidates.size() < outcomes.size() ? candidates.size() : outcomes.size();
    auto usable = [&](std::size_t i) { return outcomes[i].feasible && std::isfinite(outcomes[i].makespan_s); };
    std::optional<double> best;
    for (std::size_t i = 0; i < n; ++i)
      if (usable(i) && (!best || outcomes[i].makespan_s < *best)) best = outcomes[i].makespan_s;
    if (!best) return std::nullopt;
    for (std::size_t i = 0; i < n; ++i)
      if (usable(i) && outcomes[i].makespan_s <= *best + tolerance_s_) return i;
    return std::nullopt;  // unreachable: the best one qualifies
  }

 private:
  double tolerance_s_;
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
