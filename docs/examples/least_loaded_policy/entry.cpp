// The library's entry point: the one symbol the loader looks up.
#include <slicesched/plugin_entry.hpp>

import example.least_loaded;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) { return example::register_least_loaded(r); }
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
