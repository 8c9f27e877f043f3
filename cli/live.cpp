module;
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "executor/torch/runtime.h"

module slicesched.cli.live;

import slicesched.executor.live;
import slicesched.executor.llama;

namespace slicesched::cli {

rt::LlamaConfig runtime_model(const ModelConfig& m) {
  rt::LlamaConfig c;
  c.name = m.name;
  c.vocab = m.vocab, c.hidden = m.hidden, c.layers = m.layers, c.heads = m.heads, c.kv_heads = m.kv_heads;
  c.mlp = m.mlp, c.groups = m.groups;
  c.rope_theta = m.rope_theta;
  c.dtype = m.dtype;
  c.seed = m.weights_seed;
  return c;
}

void check_devices(const ExperimentConfig& cfg) {
  if (!cfg.faults.empty())
    fail(cfg.path + ": faults: [[faults]] are simulated only (slicesched simulate); live serving loses real devices");
  const int gpus = rt::cuda_device_count();
  for (const auto& a : cfg.accelerators) {
    if (a.device.empty())
      fail(cfg.path + ": cluster: accelerator '" + a.name +
           "' has no device (live mode needs device = \"cpu:N\" or \"cuda:N\")");
    if (a.device.rfind("cuda", 0) == 0) {
      const auto colon = a.device.find(':');
      const int index = colon == std::string::npos ? 0 : std::stoi(a.device.substr(colon + 1));
      if (index >= gpus)
        fail(cfg.path + ": cluster: accelerator '" + a.name + "': unknown device '" + a.device + "' (" +
             (gpus == 0 ? std::string("no CUDA device is visible to LibTorch here")
                        : std::to_string(gpus) + " CUDA device(s) visible)") +
             ")");
    }
  }
}

PolicyRun run_live(const ExperimentConfig& cfg, const PolicyConfig& policy, const PluginRegistries& plugins,
                   const CalibrationProfile* prior, const LiveRunOptions& opt) {
  check_devices(cfg);
  check_weights_fit(cfg);
  const rt::LlamaConfig model_cfg = runtime_model(cfg.model);
  try {
    rt::validate(model_cfg);
  } catch (const std::exception& e) {
    fail(cfg.path + ": model: " + e.what());
  }
  rt::set_cpu_threads(cfg.live.threads);
  auto parts = build_policy(cfg, policy, plugins, prior, cfg.live.time_scale);
  for (Tenant& t : parts->tenants)
    t.set_prompts([model_cfg, seed = cfg.seed + t.id()](std::uint64_t request, std::int64_t n) {
      return rt::synthetic_prompt(model_cfg, seed, request, n);
    });

  rt::LlamaModel model(model_cfg);
  std::vector<std::string> devices;
  std::vector<std::int64_t> budgets;
  for (const auto& a : cfg.accelerators) {
    devices.push_back(a.device);
    budgets.push_back(a.hbm_bytes);
  }
  LlamaRunner runner(model, devices);
  // Weights first: the cluster's clock starts when it is built, and
  // requests arriving during a load would wait for it.
  auto weights = runner.load_weights();
  if (!weights.ok()) fail(cfg.path + ": " + weights.status().message());
  LiveCluster cluster(budgets, runner, *parts->arbiter);
  cluster.set_interrupt(opt.stop);
  for (AccelId a = 0; a < devices.size(); ++a)
    if (Status s = cluster.reserve_resident(a, weights.value()[a]); !s.ok())
      fail(cfg.path + ": cluster: accelerator '" + cfg.accelerators[a].name + "': " + s.message());

  EngineOptions eopt;
  eopt.stop_at = cfg.duration_s > 0 ? static_cast<Nanos>(cfg.duration_s / cfg.live.time_scale * 1e9) : -1;
  eopt.stop = opt.stop;
  Engine engine(*parts->gmg, parts->tenants, *parts->scheduler, *parts->estimator, cluster, eopt);
  // Said once everything is loaded: from here a signal drains or cancels.
  if (opt.stop)
    std::fprintf(stderr,
                 "slicesched: serving %s on %zu accelerator(s); Ctrl-C or SIGTERM drains, a second one cancels\n",
                 policy.name.c_str(), devices.size());
  const auto t0 = std::chrono::steady_clock::now();
  auto result = engine.run(opt.progress ? progress_printer(policy.name) : ProgressFn{});
  if (opt.progress && stderr_is_tty()) std::fprintf(stderr, "\n");
  if (!result.ok()) fail("policy '" + policy.name + "': " + result.status().message());
  std::size_t failed = 0;
  for (const auto& r : result->requests) failed += !r.error.empty();
  if (failed) {
    for (const auto& r : result->requests)
      if (!r.error.empty()) {
        std::fprintf(stderr, "slicesched: %zu request(s) failed; the first: %s\n", failed, r.error.c_str());
        break;
      }
  }
  if (result->interrupted)
    std::fprintf(stderr, "slicesched: interrupted: %zu of %zu request(s) finished\n",
                 static_cast<std::size_t>(std::count_if(result->requests.begin(), result->requests.end(),
                                                        [](const RequestRecord& r) { return r.done >= 0; })),
                 result->requests.size());
  return collect_run(cfg, policy, *parts, result.value(), cluster.log(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     "serve " + cfg.path + ", policy " + policy.name);
}

}  // namespace slicesched::cli
