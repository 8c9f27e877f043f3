// The loadable library of "simulation-guided".
#include "plugin_entry.hpp"

import slicesched.plugins.simulation_guided;
import slicesched.core.plugin;
import slicesched.core.status;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) {
  return slicesched::plugins::register_simulation_guided(r);
}
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
