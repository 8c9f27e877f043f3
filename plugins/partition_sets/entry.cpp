// The loadable library of the built-in partition sets.
#include "plugin_entry.hpp"

import slicesched.plugins.partition_sets;
import slicesched.core.plugin;
import slicesched.core.status;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) {
  return slicesched::plugins::register_partition_sets(r);
}
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
