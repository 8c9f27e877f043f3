// The loadable library of transfer arbiter "serial".
#include "plugin_entry.hpp"

import slicesched.plugins.serial_arbiter;
import slicesched.core.plugin;
import slicesched.core.status;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) {
  return slicesched::plugins::register_serial_arbiter(r);
}
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
