// Live runs: one policy of a config on real devices, through the same
// engine, scheduler and plugins as simulate, with LiveCluster executors and
// the LibTorch Llama model. Used by `serve`, `bench accuracy` and `bench
// overhead`. Failures throw std::runtime_error with a one-line message.
module;
#include <atomic>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/runtime.h"

export module slicesched.cli.live;
import slicesched.compose.run;
import slicesched.executor.llama_runner;
import slicesched.config;
import slicesched.core.calibration;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.engine.inbox;
import slicesched.engine.observer;

export namespace slicesched::cli {

// A tenant of the live run as a front end routes to it: its engine index
// is its position in the list on_ready gets.
struct ServedTenant {
  std::string name;
  bool online = true;
  std::size_t model = 0;  // index into cfg.models
  std::int64_t kv_budget_tokens = 0;
};

struct LiveRunOptions {
  const std::atomic<int>* stop = nullptr;  // see EngineOptions::stop
  bool progress = true;
  double trace_seconds = 60;                        // the timeline kept for the Chrome trace
  bool explain = false;                             // record the scheduler's decisions
  std::span<EngineObserver* const> observers = {};  // watch the run too (the caller's)
  // With [[hosts]]: where each host's executor listens, in [[hosts]] order
  // (serve --spawn-local's private endpoints); empty: the config's addresses.
  std::vector<std::string> addresses;
  // A live front end: requests come from this inbox (the caller's) and the
  // tenants' configured streams are not replayed; the run lasts until the
  // inbox closes (a drain or cancel through `stop`). Null: replay.
  RequestInbox* inbox = nullptr;
  // Called on this thread once the devices are ready and before the engine
  // starts (a front end starts listening then). May throw to abort the run.
  std::function<void(const std::vector<ServedTenant>&)> on_ready;
  // Called (from an I/O thread) for each accelerator of an executor process
  // found lost, before the engine hears it.
  std::function<void(AccelId)> on_lost;
};

// Runs `policy` of `cfg` live on the config's devices and returns what
// simulate returns for a policy (metrics, requests, timeline, estimators,
// predictions, the calibration snapshot). Prompts are synthetic token ids
// from the seed. `prior`: the config's [estimators] prior (read_prior(cfg),
// read by the caller before anything runs), or null when it has none.
PolicyRun run_live(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                   const CalibrationProfile* prior, const LiveRunOptions& opt = {});

// Refuses an accelerator without a device, and devices that do not exist
// here (cuda:N beyond the GPUs LibTorch sees), naming the accelerator.
void check_devices(const ExperimentConfig& cfg);
// The same for the accelerators of [[hosts]] entry `host` only, on the
// machine of its executor process.
void check_executor_devices(const ExperimentConfig& cfg, const std::string& host);

// [live] transport as the runner takes it.
Transport transport(const LiveConfig& live);

// The runtime's model config from [model].
rt::LlamaConfig runtime_model(const ModelConfig& m);

// What serve and the executor of [[hosts]] entry `host` compare at connect
// (wire::Fingerprint): the protocol version, the host entry and its
// accelerators, and `models` (runtime_model of each of cfg.models).
std::vector<std::pair<std::string, std::string>> executor_fingerprint(const ExperimentConfig& cfg,
                                                                      std::span<const rt::LlamaConfig> models,
                                                                      const std::string& host);

}  // namespace slicesched::cli
