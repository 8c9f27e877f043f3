// Placement "static": the baselines' pinned placement. The partition set
// (e.g. "explicit" with per-tenant groups) offers the pinned candidate first;
// this policy takes it without simulating.
module;
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

export module slicesched.plugins.static_placement;
import slicesched.core.plugin;

export namespace slicesched::plugins {

inline constexpr std::string_view kStaticPlacement = "static";

// Candidate 0; nullopt when there is none. Never asks for a what-if
// simulation, so `outcomes` is empty and ignored. Stateless.
class StaticPlacement final : public PlacementPolicy {
 public:
  bool needs_simulation() const override { return false; }
  std::optional<std::size_t> choose(const Gmg&, const Batch&, std::span<const Candidate> candidates,
                                    std::span<const Outcome>) override {
    if (candidates.empty()) return std::nullopt;
    return 0;
  }
};

// Registers "static" (takes no arguments).
Status register_static_placement(PluginRegistries& r) {
  return r.placement.add(std::string(kStaticPlacement), [](const PluginArgs& args) {
    check_keys(args, {});
    return std::make_unique<StaticPlacement>();
  });
}

}  // namespace slicesched::plugins
