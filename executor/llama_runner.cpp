module;
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/cuda.h"
#include "executor/torch/runtime.h"

module slicesched.executor.llama_runner;
import slicesched.core.graph;
import slicesched.core.sampling;

namespace slicesched {

namespace {

struct Prepared {
  enum class Kind { kEmbed, kLayers, kHead } kind = Kind::kEmbed;
  int group = 0;
  rt::LlamaModel* runtime = nullptr;
  std::shared_ptr<const rt::StepPlan> plan;
  std::vector<rt::Value> from_host;  // layers: this group's parts of the caches back from host memory
  std::string name;                  // for messages
};

}  // namespace

Result<rt::LlamaConfig> runtime_config(const DenseDecoder& model, std::uint64_t seed, const std::string& checkpoint) {
  const DenseDecoderConfig& m = model.config();
  // The runtime runs Llama's block and Phi's (all of its parts at once).
  const bool llama = !m.parallel_block && m.gated_mlp && !m.layer_norm && !m.linear_bias && m.rotary_dim == 0;
  const bool phi = m.parallel_block && !m.gated_mlp && m.layer_norm && m.linear_bias && m.qkv_bias;
  if (!llama && !phi)
    return InvalidArgument("model '" + m.name + "' (model_type \"" + m.model_type +
                           "\"): live mode runs Llama's block (RMSNorm, attention, RMSNorm, SwiGLU MLP) or Phi's "
                           "(one LayerNorm, attention and a GELU MLP in parallel, biases), not a mix of the two");
  if (phi && m.tied_embeddings)
    return InvalidArgument("model '" + m.name + "' (model_type \"" + m.model_type +
                           "\"): live mode runs Phi's block with an LM head of its own (tie_word_embeddings false)");
  rt::LlamaConfig c;
  c.name = m.name;
  c.vocab = m.vocab, c.hidden = m.hidden, c.layers = m.layers, c.heads = m.heads, c.kv_heads = m.kv_heads;
  c.mlp = m.mlp, c.groups = m.groups;
  // Explicit only where it differs, so the runtime's own check of hidden %
  // heads still guards the usual case.
  c.explicit_head_dim = m.head_dim * m.heads == m.hidden ? 0 : m.head_dim;
  c.rope_theta = m.rope_theta, c.norm_eps = m.norm_eps;
  c.rope_factor = m.rope_factor, c.rope_low_freq_factor = m.rope_low_freq_factor;
  c.rope_high_freq_factor = m.rope_high_freq_factor, c.rope_original_context = m.rope_original_context;
  c.dtype = m.dtype == DType::kF32 ? "float32" : m.dtype == DType::kF16 ? "float16" : "bfloat16";
  c.qkv_bias = m.qkv_bias, c.tied_embeddings = m.tied_embeddings;
  c.parallel_block = phi, c.rotary_dim = m.rotary_dim, c.exact_gelu = m.hidden_act == "gelu";
  c.seed = seed;
  c.checkpoint = checkpoint;
  try {
    rt::validate(c);
  } catch (const std::exception& e) {
    return InvalidArgument(e.what());
  }
  return c;
}

namespace {

std::string number(double v) {
  char s[40];
  std::snprintf(s, sizeof s, "%.17g", v);
  return s;
}

struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(const char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(p[i]);
      h *= 1099511628211ull;
    }
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }  // (with its terminator: fields stay apart)
};

}  // namespace

std::string checkpoint_digest(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) &&
        (name == "config.json" || (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors")))
      files.push_back(it->path());
  }
  if (ec) return "unreadable (" + ec.message() + ")";
  std::sort(files.begin(), files.end());
  Fnv f;
  constexpr std::size_t kSpan = 1 << 20;
  std::string buf(kSpan, '\0');
  for (const fs::path& p : files) {
    const auto size = fs::file_size(p, ec);
    if (ec) return "unreadable (" + p.filename().string() + ": " + ec.message() + ")";
    f.add(p.filename().string());
    f.add(std::to_string(size));
    std::ifstream in(p, std::ios::binary);
    auto span = [&](std::uint64_t at, std::size_t n) {
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(n));
      f.add(buf.data(), static_cast<std::size_t>(in.gcount()));
    };
    const std::size_t head = static_cast<std::size_t>(std::min<std::uint64_t>(size, kSpan));
    span(0, head);
    if (size > kSpan) {  // the last MiB, or what the first left of it
      const std::uint64_t tail = std::max<std::uint64_t>(size - kSpan, kSpan);
      span(tail, static_cast<std::size_t>(size - tail));
    }
    if (!in) return "unreadable (" + p.filename().string() + ")";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
  return std::to_string(files.size()) + " file(s), digest " + hex;
}

std::vector<std::pair<std::string, std::string>> model_fingerprint(std::span<const rt::LlamaConfig> models) {
  std::vector<std::pair<std::string, std::string>> fp{{"models", std::to_string(models.size())}};
  for (std::size_t i = 0; i < models.size(); ++i) {
    const rt::LlamaConfig& c = models[i];
    const std::string m = "models[" + std::to_string(i) + "].";
    auto add = [&](const char* k, std::string v) { fp.emplace_back(m + k, std::move(v)); };
    add("name", c.name);
    add("vocab", std::to_string(c.vocab));
    add("hidden", std::to_string(c.hidden));
    add("layers", std::to_string(c.layers));
    add("heads", std::to_string(c.heads));
    add("kv_heads", std::to_string(c.kv_heads));
    add("mlp", std::to_string(c.mlp));
    add("head_dim", std::to_string(c.head_dim()));
    add("groups", std::to_string(c.groups));
    add("dtype", c.dtype);
    add("rope_theta", number(c.rope_theta));
    add("rope_scaling", c.rope_factor == 0
                            ? std::string("none")
                            : "llama3 factor " + number(c.rope_factor) + ", low " + number(c.rope_low_freq_factor) +
                                  ", high " + number(c.rope_high_freq_factor) + ", original context " +
                                  std::to_string(c.rope_original_context));
    add("norm_eps", number(c.norm_eps));
    add("qkv_bias", c.qkv_bias ? "true" : "false");
    add("tied_embeddings", c.tied_embeddings ? "true" : "false");
    add("block", c.parallel_block ? "parallel, rotary_dim " + std::to_string(c.rotary_dim) +
                                        (c.exact_gelu ? ", erf GELU" : ", tanh GELU")
                                  : std::string("llama"));
    add("weights", c.checkpoint.empty() ? "weights_seed " + std::to_string(c.seed)
                                        : "checkpoint " + checkpoint_digest(c.checkpoint));
  }
  return fp;
}

LlamaRunner::LlamaRunner(rt::LlamaModel& model, std::vector<std::string> devices, Transport transport)
    : by_name_(true), devices_(std::move(devices)), transport_(transport) {
  ServedModel m;
  m.runtime = &model;
  for (AccelId a = 0; a < devices_.size(); ++a) m.accels.push_back(a);
  models_.push_back(std::move(m));
  init_devices();
}

LlamaRunner::LlamaRunner(std::vector<ServedModel> models, std::vector<std::string> devices, Transport transport)
    : models_(std::move(models)), devices_(std::move(devices)), transport_(transport) {
  init_devices();
}

void LlamaRunner::init_devices() {
  for (const std::string& d : devices_) ordinal_.push_back(rt::cuda_ordinal(d));
  op_timer_.resize(devices_.size());
  copy_timer_.resize(devices_.size());
}

LlamaRunner::~LlamaRunner() = default;

Result<std::string> LlamaRunner::start_devices() {
  std::vector<int> gpus;
  for (int o : ordinal_)
    if (o >= 0 && std::find(gpus.begin(), gpus.end(), o) == gpus.end()) gpus.push_back(o);
  if (gpus.empty()) return std::string();
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

const ServedModel* LlamaRunner::served(TemplateId tmpl) const {
  if (by_name_) return &models_.front();
  for (const ServedModel& m : models_)
    if (m.tmpl == tmpl) return &m;
  return nullptr;
}

Payload LlamaRunner::wrap(const rt::Value& v) {
  if (v.empty()) return {};
  return Payload{std::make_shared<const rt::Value>(v), v.bytes()};
}

const rt::Value& LlamaRunner::unwrap(const Payload& p) { return *static_cast<const rt::Value*>(p.value.get()); }

Result<std::vector<std::int64_t>> LlamaRunner::load_weights() {
  std::vector<std::int64_t> bytes(devices_.size(), 0);
  for (const ServedModel& m : models_) {
    std::vector<std::string> ops{"embed", "head"};
    for (int g = 0; g < m.runtime->config().groups; ++g) ops.push_back("layers" + std::to_string(g));
    for (AccelId a : m.accels) {
      try {
        for (const auto& op : ops) bytes[a] += m.runtime->load(op, devices_[a]);
      } catch (const std::exception& e) {
        return FailedPrecondition("loading " + m.runtime->config().name + " onto device '" + devices_[a] +
                                  "': " + e.what());
      }
    }
  }
  return bytes;
}

rt::SeqStep LlamaRunner::runtime_step(IterationPlan::Seq s) {
  rt::SeqStep step{s.seq, s.position, std::move(s.tokens), nullptr};
  if (s.sampling) {
    const SamplingParams& p = *s.sampling;
    auto r = std::make_shared<rt::Sampling>();
    r->temperature = p.temperature, r->top_p = p.top_p, r->min_p = p.min_p, r->top_k = p.top_k, r->seed = p.seed;
    r->presence_penalty = p.presence_penalty, r->frequency_penalty = p.frequency_penalty;
    r->repetition_penalty = p.repetition_penalty, r->logprobs = p.logprobs;
    r->history = std::move(s.history);
    r->prompt_tokens = s.prompt_tokens;
    step.sampling = std::move(r);
  }
  return step;
}

Status LlamaRunner::on_iteration(InstanceId instance, IterationPlan plan) {
  std::lock_guard lk(mu_);
  for (const auto& s : plan.seqs)
    if (s.from_host && !host_.contains({plan.tenant, s.seq}))
      return FailedPrecondition("llama runner: sequence " + std::to_string(s.seq) + " of tenant " +
                                std::to_string(plan.tenant) +
                                " comes back from host memory, but none of its KV cache was swapped out");
  std::vector<std::pair<HostKey, std::vector<rt::Value>>> back;
  for (const auto& s : plan.seqs) {
    const HostKey key{plan.tenant, s.seq};
    if (s.from_host) {
      auto it = host_.find(key);
      back.emplace_back(key, std::move(it->second));
      host_.erase(it);
    } else if (s.position == 0) {
      host_.erase(key);  // recomputed from its prompt: a copy kept of it is stale
    }
  }
  if (!back.empty()) back_[instance] = std::move(back);
  auto p = std::make_shared<rt::StepPlan>();
  p->seqs.reserve(plan.seqs.size());
  for (auto& s : plan.seqs) p->seqs.push_back(runtime_step(std::move(s)));
  plans_[instance] = std::move(p);
  return Status::Ok();
}

void LlamaRunner::drop_iteration(InstanceId instance) {
  std::lock_guard lk(mu_);
  plans_.erase(instance);
  // What it took back from host memory is there again.
  if (auto it = back_.find(instance); it != back_.end()) {
    for (auto& [key, parts] : it->second) host_[key] = std::move(parts);
    back_.erase(it);
  }
}

Status LlamaRunner::swap_out(std::uint32_t tenant, std::span<const std::uint64_t> seqs,
                             std::span<const Payload> caches) {
  std::vector<std::uint64_t> todo;
  {
    std::lock_guard lk(mu_);
    for (std::uint64_t s : seqs)
      if (!host_.contains({tenant, s})) todo.push_back(s);
  }
  std::map<HostKey, std::vector<rt::Value>> out;
  for (std::uint64_t s : todo) {
    std::vector<rt::Value> parts;
    try {
      for (const Payload& c : caches) parts.push_back(rt::LlamaModel::select_kv(unwrap(c), s, "cpu"));
    } catch (const std::exception& e) {
      return FailedPrecondition("llama runner: swapping out sequence " + std::to_string(s) + " of tenant " +
                                std::to_string(tenant) + ": " + e.what());
    }
    out.emplace(HostKey{tenant, s}, std::move(parts));
  }
  std::lock_guard lk(mu_);
  host_.merge(out);
  return Status::Ok();
}

void LlamaRunner::forget_swapped(std::uint32_t tenant, std::span<const std::uint64_t> seqs) {
  std::lock_guard lk(mu_);
  for (std::uint64_t s : seqs) host_.erase({tenant, s});
}

std::size_t LlamaRunner::host_sequences() {
  std::lock_guard lk(mu_);
  return host_.size();
}

std::size_t LlamaRunner::pending_plans() {
  std::lock_guard lk(mu_);
  return plans_.size();
}

Result<std::shared_ptr<const void>> LlamaRunner::prepare(const Gmg& gmg, OpId op) {
  const OpRecord& r = gmg.op(op);
  const std::string& name = gmg.templates().get(r.tmpl).ops()[r.tmpl_op].name;
  auto p = std::make_shared<Prepared>();
  p->name = gmg.op_name(op);
  const ServedModel* m = served(r.tmpl);
  if (!m) return InvalidArgument("llama runner: no model serves " + p->name);
  p->runtime = m->runtime;
  if (m->model) {
    const ModelOp& mo = m->model->ops()[r.tmpl_op];
    p->kind = mo.role == OpRole::kEmbed  ? Prepared::Kind::kEmbed
              : mo.role == OpRole::kHead ? Prepared::Kind::kHead
                                         : Prepared::Kind::kLayers;
    p->group = mo.group;
  } else if (name == "embed") {
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
  if (auto b = back_.find(r.instance); b != back_.end() && p->kind == Prepared::Kind::kLayers)
    for (const auto& [key, parts] : b->second)
      for (const rt::Value& v : parts)
        if (v.group() == p->group) p->from_host.push_back(v);
  // The head is the instance's last operator: nothing needs the plan after.
  if (p->kind == Prepared::Kind::kHead) {
    plans_.erase(it);
    back_.erase(r.instance);
  }
  return std::shared_ptr<const void>(std::move(p));
}

Result<std::shared_ptr<const void>> LlamaRunner::prepare_role(std::size_t model, OpRole role, int group,
                                                              std::string name,
                                                              std::shared_ptr<const rt::StepPlan> plan) const {
  if (model >= models_.size())
    return InvalidArgument("llama runner: " + name + " names model " + std::to_string(model) + " of " +
                           std::to_string(models_.size()));
  auto p = std::make_shared<Prepared>();
  p->name = std::move(name);
  p->runtime = models_[model].runtime;
  p->kind = role == OpRole::kEmbed  ? Prepared::Kind::kEmbed
            : role == OpRole::kHead ? Prepared::Kind::kHead
                                    : Prepared::Kind::kLayers;
  p->group = group;
  p->plan = std::move(plan);
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
      out.output = wrap(p.runtime->embed(*p.plan, device));
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
      // Caches back from host memory join the group's cache here.
      rt::Value joined;
      if (!p.from_host.empty()) {
        std::vector<rt::Value> parts{kv ? *kv : kNone};
        for (const rt::Value& h : p.from_host) parts.push_back(rt::LlamaModel::copy_to(h, device));
        joined = rt::LlamaModel::join_kv(parts, device);
        kv = &joined;
      }
      rt::Value kv_out;
      out.output = wrap(p.runtime->layers(p.group, *hidden, kv ? *kv : kNone, *p.plan, device, kv_out));
      out.retained = wrap(kv_out);
      break;
    }
    case Prepared::Kind::kHead: {
      if (inputs.empty()) return InvalidArgument("llama runner: " + p.name + " has no input");
      rt::LlamaModel::Sampled sampled = p.runtime->head_sampled(unwrap(inputs[0]), *p.plan, device);
      out.tokens = std::move(sampled.tokens);
      for (rt::Logprobs& l : sampled.logprobs) out.logprobs.push_back({l.chosen, std::move(l.top)});
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
