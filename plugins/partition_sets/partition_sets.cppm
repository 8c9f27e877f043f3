// The built-in partition sets: "singles", "pairs", "quads", "all" (fixed
// groups by accelerator id) and "explicit" (groups from the configuration).
// All use the contiguous split (op i of n on group member floor(i*m/n)).
module;
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

export module slicesched.plugins.partition_sets;
import slicesched.core.plugin;
// Interface partitions: the primary interface must export every one.
export import :contiguous;
export import :fixed_groups;
export import :explicit_groups;

export namespace slicesched::plugins {

// Registers the five sets. Only "explicit" takes arguments (see
// ExplicitGroups); the others refuse any key.
Status register_partition_sets(PluginRegistries& r) {
  struct Fixed {
    std::string_view name;
    std::size_t width;
  };
  for (Fixed f : {Fixed{"singles", 1}, Fixed{"pairs", 2}, Fixed{"quads", 4}, Fixed{"all", 0}}) {
    Status s = r.partition.add(std::string(f.name), [width = f.width](const PluginArgs& args) {
      check_keys(args, {});
      return std::make_unique<FixedGroups>(width);
    });
    if (!s.ok()) return s;
  }
  return r.partition.add("explicit", [](const PluginArgs& args) { return std::make_unique<ExplicitGroups>(args); });
}

}  // namespace slicesched::plugins
