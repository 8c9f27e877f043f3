// The LibTorch Llama model as an OpRunner: maps the scheduler's layer-group
// operators (embed, layers<g>, head of llama::make_template) onto
// rt::LlamaModel calls on each accelerator's device, with the iteration
// plans the tenants hand over. Values are rt::Value handles; a transfer is
// rt::LlamaModel::copy_to onto the destination's device.
module;
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "executor/torch/runtime.h"

export module slicesched.executor.llama;
export import slicesched.executor.runner;

export namespace slicesched {

// The model shape as the scheduler's template sees it, from a runtime
// config (sizes must match what the runtime allocates).
struct LlamaDims {
  std::int64_t vocab, hidden, layers, heads, kv_heads, mlp;
  int groups;
  int dtype_bytes;
};

class LlamaRunner final : public OpRunner {
 public:
  // `devices[a]`: accelerator a's device ("cpu:0", "cuda:1", ...). The
  // model must outlive the runner.
  LlamaRunner(rt::LlamaModel& model, std::vector<std::string> devices);

  // Makes every operator's weights resident on every accelerator; returns
  // the bytes per accelerator. Fails naming the device.
  Result<std::vector<std::int64_t>> load_weights();

  Result<std::shared_ptr<const void>> prepare(const Gmg& gmg, OpId op) override;
  Result<OpResult> run(AccelId accel, const void* prepared, std::span<const Payload> inputs) override;
  Result<Payload> copy(const Payload& value, AccelId to) override;
  Status on_iteration(InstanceId instance, IterationPlan plan) override;

  const std::vector<std::string>& devices() const { return devices_; }
  static Payload wrap(const rt::Value& v);
  static const rt::Value& unwrap(const Payload& p);

 private:
  rt::LlamaModel& model_;
  std::vector<std::string> devices_;
  std::vector<char> cuda_;  // per accelerator: its device is a GPU (streams to bind and drain)
  std::mutex mu_;           // plans_: the engine thread writes, prepare reads (same thread today; cheap insurance)
  std::unordered_map<InstanceId, std::shared_ptr<const rt::StepPlan>> plans_;
};

}  // namespace slicesched
