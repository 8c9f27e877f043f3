// The loadable library of estimator "online-linear".
#include "plugin_entry.hpp"

import slicesched.plugins.online_linear;
import slicesched.core.plugin;
import slicesched.core.status;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) {
  return slicesched::plugins::register_online_linear(r);
}
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
