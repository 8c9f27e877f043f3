module;
#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/cuda.h"
#include "executor/torch/runtime.h"

module slicesched.executor.llama;

namespace slicesched {

namespace {

struct Prepared {
  enum class Kind { kEmbed, kLayers, kHead } kind = Kind::kEmbed;
  int group = 0;
  std::shared_ptr<const rt::StepPlan> plan;
  std::string name;  // for messages
};

}  // namespace

LlamaRunner::LlamaRunner(rt::LlamaModel& model, std::vector<std::string> devices, Transport transport)
    : model_(model), devices_(std::move(devices)), transport_(transport) {
  for (const std::string& d : devices_) ordinal_.push_back(rt::cuda_ordinal(d));
  op_timer_.resize(devices_.size());
  copy_timer_.resize(devices_.size());
}

LlamaRunner::~LlamaRunner() = default;

Result<std::string> LlamaRunner::start_devices() {
  std::vector<int> gpus;
  for (int o : ordinal_)
    if (o >= 0 && std::find(gpus.begin(), gpus.end(), o) == gpus.end()) gpus.push_back(o);
  if (gpus.empty()) return std::string("no GPU in use");
  std::sort(gpus.begin(), gpus.end());
  std::string account = std::to_string(gpus.size()) + " GPU(s)";
  try {
    const auto peers = rt::cuda::enable_peer_access(gpus);
    account += ", peer access " + std::to_string(peers.size()) + " pair(s)";
    for (std::size_t a = 0; a < devices_.size(); ++a) {
      if (ordinal_[a] < 0) continue;
      op_timer_[a] = std::make_unique<rt::cuda::EventTimer>(ordinal_[a]);
      copy_timer_[a] = std::make_unique<rt::cuda::EventTimer>(ordinal_[a]);
    }
    if (transport_ == Transport::kNccl) {
      nccl_ = std::make_unique<rt::cuda::NcclLinks>(gpus);
      account += ", NCCL " + std::to_string(nccl_->communicators()) + " communicator(s)";
    } else {
      account += ", copies through LibTorch (transport = \"copy\")";
    }
  } catch (const std::exception& e) {
    return FailedPrecondition(std::string("starting the GPUs: ") + e.what());
  }
  return account;
}

Payload LlamaRunner::wrap(const rt::Value& v) {
  if (v.empty()) return {};
  return Payload{std::make_shared<const rt::Value>(v), v.bytes()};
}

const rt::Value& LlamaRunner::unwrap(const Payload& p) { return *static_cast<const rt::Value*>(p.value.get()); }

Result<std::vector<std::int64_t>> LlamaRunner::load_weights() {
  std::vector<std::string> ops{"embed", "head"};
  for (int g = 0; g < model_.config().groups; ++g) ops.push_back("layers" + std::to_string(g));
  std::vector<std::int64_t> bytes(devices_.size(), 0);
  for (std::size_t a = 0; a < devices_.size(); ++a) {
    try {
      for (const auto& op : ops) bytes[a] += model_.load(op, devices_[a]);
    } catch (const std::exception& e) {
      return FailedPrecondition("loading " + model_.config().name + " onto device '" + devices_[a] + "': " + e.what());
    }
  }
  return bytes;
}

Status LlamaRunner::on_iteration(InstanceId instance, IterationPlan plan) {
  auto p = std::make_shared<rt::StepPlan>();
  p->seqs.reserve(plan.seqs.size());
  for (auto& s : plan.seqs) p->seqs.push_back({s.seq, s.position, std::move(s.tokens)});
  std::lock_guard lk(mu_);
  plans_[instance] = std::move(p);
  return Status::Ok();
}

Result<std::shared_ptr<const void>> LlamaRunner::prepare(const Gmg& gmg, OpId op) {
  const OpRecord& r = gmg.op(op);
  const std::string& name = gmg.templates().get(r.tmpl).ops()[r.tmpl_op].name;
  auto p = std::make_shared<Prepared>();
  p->name = gmg.op_name(op);
  if (name == "embed") {
    p->kind = Prepared::Kind::kEmbed;
  } else if (name == "head") {
    p->kind = Prepared::Kind::kHead;
  } else if (name.rfind("layers", 0) == 0) {
    p->kind = Prepared::Kind::kLayers;
    try {
      p->group = std::stoi(name.substr(6));
    } catch (const std::exception&) {
      return InvalidArgument("llama runner: operator '" + name + "' is not embed, layers<g> or head");
    }
  } else {
    return InvalidArgument("llama runner: operator '" + name + "' is not embed, layers<g> or head");
  }
  std::lock_guard lk(mu_);
  auto it = plans_.find(r.instance);
  if (it == plans_.end()) return FailedPrecondition("llama runner: no iteration plan for " + p->name);
  p->plan = it->second;
  // The head is the instance's last operator: nothing needs the plan after.
  if (p->kind == Prepared::Kind::kHead) plans_.erase(it);
  return std::shared_ptr<const void>(std::move(p));
}

Result<OpResult> LlamaRunner::run(AccelId accel, const void* prepared, std::span<const Payload> inputs) {
  const auto& p = *static_cast<const Prepared*>(prepared);
  const std::string& device = devices_[accel];
  // On CUDA each executor thread queues on its own stream, and the operator
  // is done only when its stream is: its time is the events' around it, and
  // the worker waits on the last event (not a device sync) before reporting.
  rt::cuda::EventTimer* timer = op_timer_[accel].get();
  if (ordinal_[accel] >= 0) rt::LlamaModel::bind_thread_stream(device);
  if (timer) timer->start();
  OpResult out;
  switch (p.kind) {
    case Prepared::Kind::kEmbed:
      out.output = wrap(model_.embed(*p.plan, device));
      break;
    case Prepared::Kind::kLayers: {
      // Inputs: the hidden state, and (after the first iteration) the KV
      // cache this group's previous iteration retained.
      const rt::Value* hidden = nullptr;
      const rt::Value* kv = nullptr;
      static const rt::Value kNone;
      for (const Payload& in : inputs) {
        const rt::Value& v = unwrap(in);
        (v.kind() == rt::Value::Kind::kKv ? kv : hidden) = &v;
      }
      if (!hidden) return InvalidArgument("llama runner: " + p.name + " has no hidden-state input");
      rt::Value kv_out;
      out.output = wrap(model_.layers(p.group, *hidden, kv ? *kv : kNone, *p.plan, device, kv_out));
      out.retained = wrap(kv_out);
      break;
    }
    case Prepared::Kind::kHead: {
      if (inputs.empty()) return InvalidArgument("llama runner: " + p.name + " has no input");
      out.tokens = model_.head(unwrap(inputs[0]), *p.plan, device);
      break;
    }
  }
  if (timer) {
    timer->stop();
    out.device_ns = timer->wait_ns();
  } else if (ordinal_[accel] >= 0) {  // start_devices() not called: drain the stream at least
    rt::LlamaModel::synchronize(device);
  }
  return out;
}

Result<CopyResult> LlamaRunner::copy(const Payload& value, AccelId to) {
  // Queued on the receiving thread's streams (its own on the source GPU
  // too, for NCCL's send half); complete before it is reported.
  const rt::Value& v = unwrap(value);
  const std::string& device = devices_[to];
  const int from = rt::cuda_ordinal(v.device());
  if (from >= 0) rt::LlamaModel::bind_thread_stream(v.device());
  if (ordinal_[to] >= 0) rt::LlamaModel::bind_thread_stream(device);
  rt::cuda::EventTimer* timer = copy_timer_[to].get();
  if (timer) timer->start();
  CopyResult out;
  out.value = wrap(rt::LlamaModel::copy_to(v, device, nccl_.get()));
  if (timer) {
    timer->stop();
    out.device_ns = timer->wait_ns();
  } else if (ordinal_[to] >= 0) {
    rt::LlamaModel::synchronize(device);
  }
  return out;
}

}  // namespace slicesched
