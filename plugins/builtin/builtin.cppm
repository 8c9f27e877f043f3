// Every built-in plugin, linked in: what the CLI and the tests register
// before loading any plugin library.
module;
#include <initializer_list>

export module slicesched.plugins.builtin;
import slicesched.core.plugin;
import slicesched.plugins.simulation_guided;
import slicesched.plugins.static_placement;
import slicesched.plugins.partition_sets;
import slicesched.plugins.online_linear;
import slicesched.plugins.greedy_arbiter;
import slicesched.plugins.serial_arbiter;
import slicesched.plugins.stages;

export namespace slicesched::plugins {

// Registers every built-in into `r`. Fails (and stops) on the first name
// already taken.
Status register_builtins(PluginRegistries& r) {
  for (auto add : {register_simulation_guided, register_static_placement, register_partition_sets,
                   register_online_linear, register_greedy_arbiter, register_serial_arbiter, register_stages})
    if (Status s = add(r); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace slicesched::plugins
