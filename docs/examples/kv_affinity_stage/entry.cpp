// The library's entry point: the one symbol the loader looks up.
#include <slicesched/plugin_entry.hpp>

import example.kv_affinity;

namespace {
slicesched::Status register_all(slicesched::PluginRegistries& r) { return example::register_kv_affinity(r); }
}  // namespace

SLICESCHED_PLUGIN_ENTRY(register_all)
