module;
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "executor/torch/cuda.h"
#include "executor/torch/runtime.h"

module slicesched.compose.live;

import slicesched.core.ids;
import slicesched.core.shape;
import slicesched.core.graph;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.estimator;
import slicesched.core.backend;
import slicesched.config;
import slicesched.engine.observer;
import slicesched.engine.tenant;
import slicesched.engine.inbox;
import slicesched.compose.setup;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.executor.runner;
import slicesched.executor.live_cluster;
import slicesched.executor.llama_runner;
import slicesched.executor.remote.remote_runner;
import slicesched.executor.remote.wire;
import slicesched.core.status;

namespace slicesched {

Result<rt::LlamaConfig> runtime_model(const ModelConfig& m) {
  auto model = build_model(m);
  if (!model.ok()) return model.status();
  auto c = runtime_config(*model.value(), m.weights_seed, m.checkpoint);
  if (!c.ok()) return Status(c.status().code(), m.where + ": " + c.status().message());
  return c;
}

Result<rt::LlamaConfig> validated_runtime_model(const ModelConfig& m) {
  auto c = runtime_model(m);
  if (!c.ok()) return c;
  try {
    rt::validate(c.value());
  } catch (const std::exception& e) {
    return InvalidArgument(m.where + ": " + e.what());
  }
  return c;
}

Result<std::unique_ptr<rt::LlamaModel>> load_runtime_model(const ModelConfig& m, const rt::LlamaConfig& c) {
  try {  // LibTorch says what is wrong with a checkpoint by throwing
    return std::make_unique<rt::LlamaModel>(c);
  } catch (const std::exception& e) {
    return InvalidArgument(m.where + ".checkpoint: " + e.what());
  }
}

std::vector<std::pair<std::string, std::string>> executor_fingerprint(const ExperimentConfig& cfg,
                                                                      std::span<const rt::LlamaConfig> models,
                                                                      const std::string& host) {
  std::vector<wire::HostAccel> accels;
  for (const auto& a : cfg.accelerators)
    if (a.host == host) accels.push_back({a.name, a.device, a.hbm_bytes});
  wire::Fingerprint fp = wire::host_fingerprint(host, accels, cfg.live.heartbeat_ms, cfg.live.executor_timeout_ms);
  for (auto& kv : model_fingerprint(models)) fp.push_back(std::move(kv));
  return fp;
}

Transport transport(const LiveConfig& live) { return live.transport == "copy" ? Transport::kCopy : Transport::kNccl; }

namespace {

// The HBM budgets the config gives the accelerators on each GPU must fit in
// what the GPU has free now (cudaMemGetInfo): otherwise the scheduler would
// plan with memory that is not there and the run would end in an
// out-of-memory error instead of this one line.
Status check_gpu_memory(const ExperimentConfig& cfg) {
  std::map<int, std::pair<std::int64_t, std::vector<std::string>>> by_gpu;  // ordinal -> budget, accelerators
  for (const auto& a : cfg.accelerators) {
    const int o = rt::cuda_ordinal(a.device);
    if (o < 0) continue;
    by_gpu[o].first += a.hbm_bytes;
    by_gpu[o].second.push_back("'" + a.name + "'");
  }
  auto gib = [](std::int64_t b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f GiB", static_cast<double>(b) / (1ll << 30));
    return std::string(s);
  };
  if (!by_gpu.empty()) rt::cuda::release_cached();
  for (const auto& [o, v] : by_gpu) {
    const auto [free, total] = rt::cuda::mem_info(o);
    if (v.first <= free) continue;
    std::string names;
    for (const auto& n : v.second) names += (names.empty() ? "" : ", ") + n;
    return ResourceExhausted(cfg.path + ": cluster: accelerator(s) " + names + " on cuda:" + std::to_string(o) +
                             " have " + gib(v.first) + " of HBM in all, but cuda:" + std::to_string(o) + " has " +
                             gib(free) + " free of " + gib(total) + " (cudaMemGetInfo); lower hbm_gib");
  }
  return Status::Ok();
}

// `host`: only that host's accelerators ("" every one): they are this
// machine's. With [[hosts]] and no `host`, the devices are other machines':
// only their presence is checked here.
Status check_devices_of(const ExperimentConfig& cfg, const std::string* host) {
  // Every live command (serve, calibrate, the executors, bench overhead and
  // accuracy) runs an accelerator as one device, unsharded.
  for (const AcceleratorConfig& a : cfg.accelerators)
    if (a.tp > 1)
      return InvalidArgument(a.tp_where +
                             ": a tensor-parallel group is simulated only; live commands run each accelerator as one "
                             "device (set tp = 1)");
  const int gpus = rt::cuda_device_count();
  for (const auto& a : cfg.accelerators) {
    if (a.device.empty())
      return InvalidArgument(cfg.path + ": cluster: accelerator '" + a.name +
                             "' has no device (live mode needs device = \"cpu:N\" or \"cuda:N\")");
    if ((host && a.host != *host) || (!host && !cfg.hosts.empty())) continue;
    if (a.device.rfind("cuda", 0) == 0) {
      const auto colon = a.device.find(':');
      const int index = colon == std::string::npos ? 0 : std::stoi(a.device.substr(colon + 1));
      if (index >= gpus)
        return NotFound(cfg.path + ": cluster: accelerator '" + a.name + "': unknown device '" + a.device + "' (" +
                        (gpus == 0 ? std::string("no CUDA device is visible to LibTorch here")
                                   : std::to_string(gpus) + " CUDA device(s) visible)") +
                        ")");
    }
  }
  if (!host && cfg.hosts.empty()) return check_gpu_memory(cfg);
  return Status::Ok();
}

}  // namespace

Status check_devices(const ExperimentConfig& cfg) { return check_devices_of(cfg, nullptr); }

Status check_executor_devices(const ExperimentConfig& cfg, const std::string& host) {
  return check_devices_of(cfg, &host);
}

LiveSession::LiveSession(const ExperimentConfig& cfg, LiveOptions opt)
    : cfg_(cfg), opt_(std::move(opt)), inbox_(opt_.wake) {}

Result<std::unique_ptr<LiveSession>> LiveSession::open(const ExperimentConfig& cfg, const PolicyConfig& policy,
                                                       const PluginRegistries& plugins, const CalibrationProfile* prior,
                                                       LiveOptions opt) {
  std::unique_ptr<LiveSession> s(new LiveSession(cfg, std::move(opt)));
  if (Status started = s->start(policy, plugins, prior); !started.ok()) return started;
  return s;
}

LiveSession::~LiveSession() {
  // Nothing calls into the cluster once it is gone: not a push (the
  // inbox's waker), not a lost executor (the runner's I/O thread).
  inbox_.set_waker({});
  lost_to_ = nullptr;
  cluster_.reset();
  if (remote_) remote_->shutdown();
}

Status LiveSession::start(const PolicyConfig& policy, const PluginRegistries& plugins,
                          const CalibrationProfile* prior) {
  const ExperimentConfig& cfg = cfg_;
  if (Status s = check_devices(cfg); !s.ok()) return s;
  if (Status s = check_weights_fit(cfg); !s.ok()) return s;
  // In-process runners keep swapped caches in this process's memory;
  // executor processes do not move a KV cache to host memory and back yet.
  for (const TenantConfig& t : cfg.tenants)
    if (!cfg.hosts.empty() && t.swap_preempted &&
        std::find(policy.tenants.begin(), policy.tenants.end(), t.name) != policy.tenants.end())
      return InvalidArgument(cfg.path + ": tenants." + t.name +
                             ".preemption_mode: \"swap\" needs the accelerators in this process; with [[hosts]] "
                             "executors, use \"recompute\"");
  // Likewise a prefill lane's hand-off (through host memory).
  for (const TenantConfig& t : cfg.tenants)
    if (!cfg.hosts.empty() && prefill_lanes_of(policy, t) > 0 &&
        std::find(policy.tenants.begin(), policy.tenants.end(), t.name) != policy.tenants.end()) {
      // (named where the count comes from: the policy's table, or the tenant)
      const bool by_policy = std::any_of(policy.prefill_lanes.begin(), policy.prefill_lanes.end(),
                                         [&](const auto& e) { return e.first == t.name; });
      return InvalidArgument(cfg.path + ": " +
                             (by_policy ? "policies." + policy.name + ".prefill_lanes." + t.name
                                        : "tenants." + t.name + ".prefill_lanes") +
                             ": prefill lanes hand KV caches over through this process's memory; with [[hosts]] "
                             "executors, set it to 0");
    }
  std::vector<rt::LlamaConfig> model_cfgs;
  for (const ModelConfig& m : cfg.models) {
    // Live executors load a model whole on each holder.
    if (!m.spread.empty())
      return InvalidArgument(
          m.where + ".spread: a model spread over accelerators is simulated only; serve loads each model whole");
    auto mc = validated_runtime_model(m);
    if (!mc.ok()) return mc.status();
    model_cfgs.push_back(std::move(mc).value());
  }
  rt::set_cpu_threads(cfg.live.threads);
  auto parts =
      build_policy(cfg, policy, plugins, {.prior = prior, .time_scale = cfg.live.time_scale, .explain = opt_.explain});
  if (!parts.ok()) return parts.status();
  parts_ = std::move(parts).value();
  auto model_index = [&](TemplateId tmpl) {
    return static_cast<std::size_t>(std::find(parts_->tmpls.begin(), parts_->tmpls.end(), tmpl) -
                                    parts_->tmpls.begin());
  };
  if (opt_.front_end)
    for (Tenant& t : parts_->tenants) t.drop_stream();
  for (Tenant& t : parts_->tenants)
    t.set_prompts(
        [model_cfg = model_cfgs[model_index(t.tmpl())], seed = cfg.seed + t.id()](
            std::uint64_t request, std::int64_t n) { return rt::synthetic_prompt(model_cfg, seed, request, n); });

  // Each model is loaded on the accelerators that hold it (residency()).
  std::vector<ServedModel> served;
  const auto held = residency(cfg);
  for (std::size_t i = 0; i < cfg.models.size(); ++i) {
    auto model = load_runtime_model(cfg.models[i], model_cfgs[i]);
    if (!model.ok()) return model.status();
    runtimes_.push_back(std::move(model).value());
    ServedModel m{parts_->tmpls[i], runtimes_.back().get(), parts_->models.shared(parts_->tmpls[i]), {}};
    for (AccelId a = 0; a < held.size(); ++a)
      if (std::find(held[a].begin(), held[a].end(), i) != held[a].end()) m.accels.push_back(a);
    served.push_back(std::move(m));
  }
  std::vector<std::string> devices;
  std::vector<std::int64_t> budgets;
  for (const auto& a : cfg.accelerators) {
    devices.push_back(a.device);
    budgets.push_back(a.hbm_bytes);
  }
  // One process (every accelerator a thread here), or executor processes
  // ([[hosts]]) that own the accelerators, their weights and values.
  Result<std::vector<std::int64_t>> weights = std::vector<std::int64_t>{};
  if (cfg.hosts.empty()) {
    auto local = std::make_unique<LlamaRunner>(std::move(served), devices, transport(cfg.live));
    auto gpus = local->start_devices();
    if (!gpus.ok()) return Status(gpus.status().code(), cfg.path + ": " + gpus.status().message());
    if (opt_.progress && !gpus->empty()) std::fprintf(stderr, "slicesched: %s\n", gpus->c_str());
    // Weights first: the cluster's clock starts when it is built, and
    // requests arriving during a load would wait for it.
    weights = local->load_weights();
    runner_ = std::move(local);
  } else {
    std::vector<ExecutorEndpoint> hosts;
    for (std::size_t h = 0; h < cfg.hosts.size(); ++h)
      hosts.push_back({cfg.hosts[h].name, opt_.addresses.empty() ? cfg.hosts[h].address : opt_.addresses[h],
                       executor_fingerprint(cfg, model_cfgs, cfg.hosts[h].name)});
    std::vector<std::size_t> accel_host;
    std::vector<std::string> names;
    for (const auto& a : cfg.accelerators) {
      names.push_back(a.name);
      for (std::size_t h = 0; h < cfg.hosts.size(); ++h)
        if (cfg.hosts[h].name == a.host) accel_host.push_back(h);
    }
    std::vector<RemoteModel> models;
    for (std::size_t i = 0; i < served.size(); ++i) models.push_back({served[i].tmpl, i, served[i].model});
    RemoteOptions ro{cfg.live.heartbeat_ms, cfg.live.executor_timeout_ms, RemoteOptions{}.connect_ms, {}};
    char me[256] = "?";
    (void)gethostname(me, sizeof me - 1);
    ro.name = "'" + std::string(me) + " pid " + std::to_string(getpid()) + ", serve " + cfg.path + "'";
    ro.stop = opt_.stop;
    // GPU values between executors go over NCCL unless the config says
    // copy (then as bytes over ZeroMQ, as CPU values always do).
    if (transport(cfg.live) == Transport::kNccl) ro.nccl_id = [] { return rt::cuda::nccl_unique_id(); };
    auto r = std::make_unique<RemoteRunner>(hosts, accel_host, models, ro);
    r->on_lost([this](AccelId a) {
      if (opt_.on_lost) opt_.on_lost(a);
      std::fprintf(
          stderr,
          "\nslicesched: accelerator '%s' is lost (executor '%s' stopped answering); its work is placed again\n",
          cfg_.accelerators[a].name.c_str(), cfg_.accelerators[a].host.c_str());
      if (LiveCluster* c = lost_to_.load()) c->lose(a);
    });
    remote_ = r.get();
    runner_ = std::move(r);
    weights = remote_->connect(names);
    if (opt_.progress && weights.ok())
      std::fprintf(stderr, "slicesched: %zu executor process(es) connected, %zu NCCL link(s) between them\n",
                   hosts.size(), remote_->nccl_links());
  }
  if (!weights.ok()) return Status(weights.status().code(), cfg.path + ": " + weights.status().message());
  cluster_ = std::make_unique<LiveCluster>(budgets, *runner_, *parts_->plugins.arbiter);
  lost_to_ = cluster_.get();
  // The engine's one wake: the inbox's counter, which a push, the close,
  // a drain's deadline and a signal bump; a push also ends the wait at once.
  cluster_->set_interrupt(&inbox_.counter());
  inbox_.set_waker([c = cluster_.get()] { c->wake(); });
  if (opt_.front_end) {
    parts_->engine.inbox = &inbox_;
    parts_->engine.stop_at = -1;  // a server runs until it is stopped, not to duration_s
  }
  for (AccelId a = 0; a < devices.size(); ++a)
    if (Status s = cluster_->reserve_resident(a, weights.value()[a]); !s.ok())
      return Status(s.code(), cfg.path + ": cluster: accelerator '" + cfg.accelerators[a].name + "': " + s.message());
  for (const Tenant& t : parts_->tenants)
    tenants_.push_back({t.spec().name, t.spec().online, model_index(t.tmpl()), t.spec().kv_budget_tokens});
  return Status::Ok();
}

Result<PolicyRun> LiveSession::run(RecordOptions ro, std::span<EngineObserver* const> observers) {
  if (ran_) return FailedPrecondition("a live session runs once");
  ran_ = true;
  const std::string& policy = parts_->policy.name;
  // Said once everything is loaded: from here a signal drains or cancels.
  if (opt_.stop)
    std::fprintf(stderr,
                 "slicesched: serving %s on %zu accelerator(s); Ctrl-C or SIGTERM drains, a second one cancels\n",
                 policy.c_str(), cfg_.accelerators.size());
  ro.decisions = opt_.explain;
  ro.stop = opt_.stop;
  ro.origin = "serve " + cfg_.path + ", policy " + policy;
  const bool progress = static_cast<bool>(ro.progress);
  auto run = run_recorded(cfg_, *parts_, *cluster_, ro, observers);
  if (progress && isatty(fileno(stderr))) std::fprintf(stderr, "\n");
  if (!run.ok()) return run.status();
  PolicyRun result = std::move(run).value();
  if (opt_.front_end) {
    // The configured streams were never replayed: the load offered is what
    // the clients sent, over the run's span.
    Nanos span = 0;
    for (const auto& r : result.requests) span = std::max({span, r.arrival, r.done});
    result.offered.clear();
    for (const std::string& name : result.tenant_names)
      result.offered.push_back({name, 0, 0, 0, static_cast<double>(span) / 1e9});
    for (const auto& r : result.requests)
      if (r.tenant < result.offered.size()) {
        OfferedLoad& o = result.offered[r.tenant];
        ++o.requests;
        o.input_tokens += r.input_tokens;
        o.output_tokens += r.output_tokens;
      }
  }
  std::size_t failed = 0;
  for (const auto& r : result.requests) failed += !r.error.empty();
  if (failed) {
    for (const auto& r : result.requests)
      if (!r.error.empty()) {
        std::fprintf(stderr, "slicesched: %zu request(s) failed; the first: %s\n", failed, r.error.c_str());
        break;
      }
  }
  if (result.interrupted)  // (finished: ended with every token; the failed and cancelled ones are not)
    std::fprintf(
        stderr, "slicesched: interrupted: %zu of %zu request(s) finished\n",
        static_cast<std::size_t>(std::count_if(result.requests.begin(), result.requests.end(),
                                               [](const RequestRecord& r) { return r.done >= 0 && r.error.empty(); })),
        result.requests.size());
  return result;
}

}  // namespace slicesched
