// The LibTorch Llama model as an OpRunner: maps the scheduler's layer-group
// operators (embed, layers<g>, head of DenseDecoder::make_template) onto
// rt::LlamaModel calls on each accelerator's device, with the iteration
// plans the tenants hand over. Values are rt::Value handles; a transfer is
// rt::LlamaModel::copy_to onto the destination's device (NCCL between two
// GPUs unless the transport is "copy").
//
// On CUDA, each executor thread queues on a stream of its own, and an
// operator's or copy's time is what CUDA events on that stream measure
// (OpResult::device_ns), not host time around a sync.
module;
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/torch/cuda.h"
#include "executor/torch/runtime.h"

export module slicesched.executor.llama_runner;
import slicesched.executor.runner;
import slicesched.models.dense;
import slicesched.core.backend;
import slicesched.core.gmg;
import slicesched.core.ids;
import slicesched.core.status;
import slicesched.models.model;

export namespace slicesched {

// The model shape as the scheduler's template sees it, from a runtime
// config (sizes must match what the runtime allocates).
struct LlamaDims {
  std::int64_t vocab, hidden, layers, heads, kv_heads, mlp;
  int groups;
  int dtype_bytes;
};

// How values move between two CUDA accelerators.
enum class Transport { kNccl, kCopy };

// The runtime's config of a dense decoder: every shape of the model
// contract, q/k/v biases, tied embeddings and an explicit head_dim included.
// Its weights are random from `seed`, or, with `checkpoint` (a Hugging Face
// checkpoint directory), read from there (seed ignored; the files are
// opened when the rt::LlamaModel is made). Fails (one line) where
// rt::validate does, and for a block the runtime does not run (one that
// mixes Llama's parts with Phi's).
Result<rt::LlamaConfig> runtime_config(const DenseDecoder& model, std::uint64_t seed,
                                       const std::string& checkpoint = "");

// What a scheduler and an executor must agree on about the models they
// serve (the model part of wire::Fingerprint), as ordered (field, value)
// pairs: "models" (the count), then per model i "models[i].name", its
// shapes (vocab, hidden, layers, heads, kv_heads, mlp, head_dim, groups),
// RoPE and norm constants, dtype, biases and tied embeddings, and
// "models[i].weights": "weights_seed N" for random weights or
// "checkpoint <digest>" (checkpoint_digest). Throws nothing; a checkpoint
// whose files cannot be read gets a digest saying so.
std::vector<std::pair<std::string, std::string>> model_fingerprint(std::span<const rt::LlamaConfig> models);
// A digest of a Hugging Face checkpoint folder's weights: 64-bit FNV-1a
// over config.json and each *.safetensors file (sorted by name): its name,
// its size, its first and its last MiB (a safetensors file begins with its
// header: every tensor's name, dtype, shape and offsets). Two folders with
// the same files digest the same wherever they are; it reads at most 2 MiB
// a file, so it is not a proof against a file edited only in its middle.
std::string checkpoint_digest(const std::string& dir);

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
  // `devices[a]`: accelerator a's device ("cpu:0", "cuda:1", ...), each
  // valid on this machine (rt::cuda_ordinal must accept it). One model for
  // every template, on every accelerator, its operators found by their
  // names (embed, layers<g>, head). The model must outlive the runner.
  LlamaRunner(rt::LlamaModel& model, std::vector<std::string> devices, Transport transport = Transport::kNccl);
  // Several models, each on its accelerators.
  LlamaRunner(std::vector<ServedModel> models, std::vector<std::string> devices,
              Transport transport = Transport::kNccl);
  ~LlamaRunner() override;

  // CUDA start-up, before any work (nothing to do without CUDA devices):
  // peer access between the GPUs in use, one event timer per accelerator
  // thread, and with the NCCL transport a communicator per ordered pair of
  // GPUs in use. Fails naming the device or pair. Returns a one-line account
  // ("2 GPU(s), peer access 2 pair(s), NCCL 4 communicator(s)"), empty when
  // no accelerator is a GPU.
  Result<std::string> start_devices();

  // Makes every served model's weights resident on its accelerators;
  // returns the bytes per accelerator. Fails naming the model and device.
  Result<std::vector<std::int64_t>> load_weights();

  Result<std::shared_ptr<const void>> prepare(const Gmg& gmg, OpId op) override;
  // prepare() without a GMG (an executor process, which receives the
  // operator's description): operator `name` of served model `model` (an
  // index into the constructor's list), its role and layer group, over
  // `plan`. Fails on a model index out of range. Any thread.
  Result<std::shared_ptr<const void>> prepare_role(std::size_t model, OpRole role, int group, std::string name,
                                                   std::shared_ptr<const rt::StepPlan> plan) const;
  Result<OpResult> run(AccelId accel, const void* prepared, std::span<const Payload> inputs) override;
  Result<CopyResult> copy(const Payload& value, AccelId to) override;
  Status on_iteration(InstanceId instance, IterationPlan plan) override;
  // Forgets the plan of an instance taken back before it ran.
  void drop_iteration(InstanceId instance) override;
  // Swap to host memory: each sequence's part of every layer group's
  // cache is copied to host memory ("cpu") and kept until a plan brings it
  // back (its from_host sequences' parts are joined to the group's cache on
  // the operator's device), a plan recomputes it, or forget_swapped.
  Status swap_out(std::uint32_t tenant, std::span<const std::uint64_t> seqs, std::span<const Payload> caches) override;
  void forget_swapped(std::uint32_t tenant, std::span<const std::uint64_t> seqs) override;
  // Plans handed over whose head has not run yet (a preempted one counts
  // until dropped): what the runner holds for iterations in flight.
  std::size_t pending_plans();
  // Sequences whose caches are in host memory now.
  std::size_t host_sequences();
  // One sequence of an iteration plan in the runtime's terms (its sampling
  // included), for on_iteration and an executor process's plans.
  static rt::SeqStep runtime_step(IterationPlan::Seq s);

  const std::vector<std::string>& devices() const { return devices_; }
  static Payload wrap(const rt::Value& v);
  static const rt::Value& unwrap(const Payload& p);

 private:
  const ServedModel* served(TemplateId tmpl) const;
  void init_devices();  // the constructors' CUDA bookkeeping (ordinal_, timers' slots)
  std::vector<ServedModel> models_;
  bool by_name_ = false;  // the one-model constructor: every template, ops by name
  std::vector<std::string> devices_;
  Transport transport_;
  std::vector<int> ordinal_;  // per accelerator: its CUDA device, or -1 on a CPU device
  // Per accelerator, used only by its worker (op_timer_) or its transfer
  // thread (copy_timer_); made by start_devices().
  std::vector<std::unique_ptr<rt::cuda::EventTimer>> op_timer_, copy_timer_;
  std::unique_ptr<rt::cuda::NcclLinks> nccl_;
  std::mutex mu_;  // plans_: the engine thread writes, prepare reads (same thread today; cheap insurance)
  std::unordered_map<InstanceId, std::shared_ptr<const rt::StepPlan>> plans_;
  // Swapped-out caches in host memory, per (tenant, sequence): one KV
  // value per layer group. Then, per planned iteration until its head is
  // prepared, those its from_host sequences took back.
  using HostKey = std::pair<std::uint32_t, std::uint64_t>;
  std::map<HostKey, std::vector<rt::Value>> host_;
  std::unordered_map<InstanceId, std::vector<std::pair<HostKey, std::vector<rt::Value>>>> back_;
};

}  // namespace slicesched
