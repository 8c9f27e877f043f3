// The loadable library of placement "static".
#include "plugin_entry.hpp"

import slicesched.plugins.static_placement;
import slicesched.core.plugin;
import slicesched.core.status;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) {
  return slicesched::plugins::register_static_placement(r);
}
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
