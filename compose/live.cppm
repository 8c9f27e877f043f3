// Live runs, beside compose.offline: one policy of a config on real devices
// (CPU virtual accelerators, CUDA GPUs, or the executor processes of
// [[hosts]]), through the same engine, scheduler and plugins as simulate,
// with LiveCluster executors and the LibTorch Llama model. `serve` and
// `bench accuracy` run it. Built into the live runtime library only
// (cli/live_runtime.hpp): the offline commands never map LibTorch.
//
// Failures are Statuses with one line naming the config, the model or the
// accelerator.
module;
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/runtime.h"

export module slicesched.compose.live;
import slicesched.core.status;
import slicesched.core.ids;
import slicesched.core.graph;
import slicesched.core.gmg;
import slicesched.core.estimator;
import slicesched.core.calibration;
import slicesched.core.plugin;
import slicesched.config;
import slicesched.engine.observer;
import slicesched.engine.tenant;
import slicesched.engine.inbox;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.executor.runner;
import slicesched.executor.live_cluster;
import slicesched.executor.llama_runner;
import slicesched.executor.remote.remote_runner;

export namespace slicesched {

// A tenant of the live run as a front end routes to it: its engine index
// is its position in LiveSession::tenants().
struct ServedTenant {
  std::string name;
  bool online = true;
  std::size_t model = 0;  // index into cfg.models
  std::int64_t kv_budget_tokens = 0;
};

struct LiveOptions {
  const std::atomic<int>* stop = nullptr;  // EngineOptions::stop: 1 drains, 2 cancels (a signal)
  // The counter a signal handler bumps after `stop` (cli::StopSignals):
  // the session's inbox counts on it, so that a signal ends the engine's
  // wait. Null: the inbox's own. Must outlive the session.
  std::atomic<int>* wake = nullptr;
  // Requests come from inbox() (a front end) and the tenants' configured
  // streams are not replayed; the run lasts until a drain or a cancel.
  bool front_end = false;
  bool progress = true;  // say on stderr what was started (GPUs, executor processes)
  bool explain = false;  // record the scheduler's decisions (--explain)
  // With [[hosts]]: where each host's executor listens, in [[hosts]] order
  // (serve --spawn-local's private endpoints); empty: the config's addresses.
  std::vector<std::string> addresses;
  // Called (from an I/O thread) for each accelerator of an executor process
  // found lost, before the engine hears it.
  std::function<void(AccelId)> on_lost;
};

// One policy's live run, from its devices to its report. Owns what the run
// needs for as long as it may be used: the parts, the models, the runner
// (in-process, or the executor processes), the cluster and the inbox whose
// wake ends the engine's wait.
class LiveSession {
 public:
  // Checks the devices and the models, builds `policy`'s parts, loads the
  // weights (or connects the [[hosts]] executors, which load theirs) and
  // reserves them on the cluster: everything before the run. `cfg` and
  // `plugins` must outlive the session; `prior` is read here only.
  static Result<std::unique_ptr<LiveSession>> open(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                                   const PluginRegistries& plugins, const CalibrationProfile* prior,
                                                   LiveOptions opt = {});
  // Whatever way the session ends, executor processes are told to exit.
  ~LiveSession();
  LiveSession(const LiveSession&) = delete;
  LiveSession& operator=(const LiveSession&) = delete;

  const std::vector<ServedTenant>& tenants() const { return tenants_; }
  // Where a front end pushes requests (LiveOptions::front_end).
  RequestInbox& inbox() { return inbox_; }

  // Runs the engine until the window ends (replay) or a drain or cancel
  // (front end), with `observers` watching too, and returns what simulate
  // returns for a policy. `ro`'s stop, decisions and origin are the
  // session's. Once per session.
  Result<PolicyRun> run(RecordOptions ro, std::span<EngineObserver* const> observers = {});

 private:
  LiveSession(const ExperimentConfig& cfg, LiveOptions opt);
  Status start(const PolicyConfig& policy, const PluginRegistries& plugins, const CalibrationProfile* prior);

  const ExperimentConfig& cfg_;
  LiveOptions opt_;
  RequestInbox inbox_;
  std::unique_ptr<PolicyParts> parts_;
  std::vector<std::unique_ptr<rt::LlamaModel>> runtimes_;
  std::unique_ptr<OpRunner> runner_;
  RemoteRunner* remote_ = nullptr;  // runner_, with [[hosts]]
  // Where a lost executor's accelerators are reported (the runner's I/O
  // thread reads it): the cluster while it exists.
  std::atomic<LiveCluster*> lost_to_{nullptr};
  std::unique_ptr<LiveCluster> cluster_;
  std::vector<ServedTenant> tenants_;
  bool ran_ = false;
};

// Refuses an accelerator without a device, devices that do not exist here
// (cuda:N beyond the GPUs LibTorch sees), and a tensor-parallel group
// (simulated only), naming the accelerator or its `tp`.
Status check_devices(const ExperimentConfig& cfg);
// The same for the accelerators of [[hosts]] entry `host` only, on the
// machine of its executor process.
Status check_executor_devices(const ExperimentConfig& cfg, const std::string& host);

// [live] transport as the runner takes it.
Transport transport(const LiveConfig& live);

// The runtime's model config from [model].
Result<rt::LlamaConfig> runtime_model(const ModelConfig& m);
// runtime_model, then rt::validate; fails naming the model.
Result<rt::LlamaConfig> validated_runtime_model(const ModelConfig& m);
// The runtime model of config `c` (runtime_model(m)): a checkpoint's files
// are mapped and checked here; fails naming `m`'s checkpoint.
Result<std::unique_ptr<rt::LlamaModel>> load_runtime_model(const ModelConfig& m, const rt::LlamaConfig& c);

// What serve and the executor of [[hosts]] entry `host` compare at connect
// (wire::Fingerprint): the protocol version, the host entry and its
// accelerators, and `models` (runtime_model of each of cfg.models).
std::vector<std::pair<std::string, std::string>> executor_fingerprint(const ExperimentConfig& cfg,
                                                                      std::span<const rt::LlamaConfig> models,
                                                                      const std::string& host);

}  // namespace slicesched
