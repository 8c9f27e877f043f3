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
export import slicesched.models.dense;

export namespace slicesched {

// The model shape as the scheduler's template sees it, from a runtime
// config (sizes must match what the runtime allocates).
struct LlamaDims {
  std::int64_t vocab, hidden, layers, heads, kv_heads, mlp;
  int groups;
  int dtype_bytes;
};

// The runtime's config of a dense decoder, its weights random from `seed`.
// Fails (one line) on what the LibTorch runtime does not implement: tied
// embeddings, q/k/v biases, a head dimension other than hidden / heads.
Result<rt::LlamaConfig> runtime_config(const DenseDecoder& model, std::uint64_t seed);

// One model the runner serves: the operators of template `tmpl` run on
// `runtime` (which must outlive the runner), mapped through the model
// contract `model` (its ModelOp roles: embed, a layer group, the head), and
// its weights are loaded on `accels`.
struct ServedModel {
  TemplateId tmpl = 0;
  rt::LlamaModel* runtime = nullptr;
  std::shared_ptr<const Model> model;
  std::vector<AccelId> accels;
};

class LlamaRunner final : public OpRunner {
 public:
  // `devices[a]`: accelerator a's device ("cpu:0", "cuda:1", ...). One
  // model for every template, on every accelerator, its operators found by
  // their names (embed, layers<g>, head). The model must outlive the runner.
  LlamaRunner(rt::LlamaModel& model, std::vector<std::string> devices);
  // Several models, each on its accelerators.
  LlamaRunner(std::vector<ServedModel> models, std::vector<std::string> devices);

  // Makes every served model's weights resident on its accelerators;
  // returns the bytes per accelerator. Fails naming the model and device.
  Result<std::vector<std::int64_t>> load_weights();

  Result<std::shared_ptr<const void>> prepare(const Gmg& gmg, OpId op) override;
  Result<OpResult> run(AccelId accel, const void* prepared, std::span<const Payload> inputs) override;
  Result<Payload> copy(const Payload& value, AccelId to) override;
  Status on_iteration(InstanceId instance, IterationPlan plan) override;

  const std::vector<std::string>& devices() const { return devices_; }
  static Payload wrap(const rt::Value& v);
  static const rt::Value& unwrap(const Payload& p);

 private:
  const ServedModel* served(TemplateId tmpl) const;
  std::vector<ServedModel> models_;
  bool by_name_ = false;  // the one-model constructor: every template, ops by name
  std::vector<std::string> devices_;
  std::vector<char> cuda_;  // per accelerator: its device is a GPU (streams to bind and drain)
  std::mutex mu_;           // plans_: the engine thread writes, prepare reads (same thread today; cheap insurance)
  std::unordered_map<InstanceId, std::shared_ptr<const rt::StepPlan>> plans_;
};

}  // namespace slicesched
