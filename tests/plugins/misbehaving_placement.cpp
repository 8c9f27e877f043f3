// A plugin library of placement policies that fail on purpose, for the CLI
// tests of what simulate does when one policy of several fails:
// "always-defer" defers every batch (the engine ends in a deadlock), and
// "throws-at-choose" throws from choose() at its first batch.
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>

#include "plugin_entry.hpp"

import slicesched.core.plugin;

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

Status register_all(PluginRegistries& r) {
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
