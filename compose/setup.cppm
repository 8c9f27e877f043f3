// The pieces every command builds from a config in the same way: the
// cluster, the model template, request streams, plugin arguments, and the
// checks made before anything runs. Failures are Statuses with a one-line
// message naming the config, the tenant or the policy.
module;
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

export module slicesched.compose.setup;
import slicesched.core.plugin;
import slicesched.config;
import slicesched.models.dense;
import slicesched.workload.trace;
import slicesched.core.status;
import slicesched.core.accel;

export namespace slicesched {

// The tenant's requests (trace, constant or Poisson stream). A synthetic
// stream is generated only up to `window_s` (the measurement window; < 0:
// all of it), the rest counted in Trace::beyond_cut: what arrives after the
// window is never replayed.
Result<Trace> make_stream(const TenantConfig& t, std::uint64_t seed, double window_s = -1);
// Prints `line` (and a newline) on stderr unless this process printed it
// already: every policy builds its streams, and a note about one (lines
// skipped, requests cut) read twice with two policies. Thread-safe.
void note_once(const std::string& line);
Result<std::shared_ptr<AcceleratorSet>> make_cluster(const ExperimentConfig& cfg);
// The config's model, built (make_model).
Result<std::shared_ptr<const DenseDecoder>> build_model(const ModelConfig& m);
// Every accelerator holds the full weights of each model resident on it
// (residency(); any policy may put any of their operators there): refuses
// a cluster they do not fit, naming the accelerator.
Status check_weights_fit(const ExperimentConfig& cfg);
// The tenant of that name (the config reader checked that policies name
// only known tenants).
Result<const TenantConfig*> tenant_config(const ExperimentConfig& cfg, const std::string& name);
// Partition-set arguments name tenants; plugins see tenant ids, one per
// tenant instance (a policy's tenants in order, each taking `instances`
// ids). `offline0 = [4]` pins every instance to group 4; with instances = 2,
// `offline0 = [[4], [5]]` pins instance 0 to group 4 and instance 1 to 5.
Result<PluginArgs> tenant_ids(const ExperimentConfig& cfg, const PolicyConfig& p, PluginArgs args);

}  // namespace slicesched
