// The loadable library of the built-in stages.
#include "plugin_entry.hpp"

import slicesched.plugins.stages;
import slicesched.core.plugin;
import slicesched.core.status;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) { return slicesched::plugins::register_stages(r); }
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
