// `slicesched executor --listen ADDR --config CONFIG --host NAME`: the
// accelerators the config gives host NAME, as a process `slicesched serve`
// drives over ZeroMQ (executor/remote). It loads its models' weights onto
// its devices, then serves until the scheduler says shutdown, the
// scheduler goes silent ([live] executor_timeout_ms), or SIGINT/SIGTERM.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "executor/torch/runtime.h"

import slicesched.config;
import slicesched.compose.live;
import slicesched.executor.llama_runner;
import slicesched.executor.remote.executor_server;
import slicesched.cli.fail;
import slicesched.cli.signals;
import slicesched.compose.setup;
import slicesched.core.ids;
import slicesched.core.status;

namespace slicesched::cli {

namespace {

// A tcp:// endpoint's port must be a port (ZeroMQ takes 99999 and listens
// on what it wraps to); "" when `listen` is fine, else the one line.
std::string bad_listen(const std::string& listen) {
  // inproc:// lives inside one process: serve, in another, could never reach it.
  if (listen.rfind("inproc://", 0) == 0)
    return "--listen " + listen +
           ": an inproc:// endpoint is not reachable from another process (expected "
           "tcp://HOST:PORT or ipc://PATH)";
  if (listen.rfind("tcp://", 0) != 0) return "";
  const auto colon = listen.rfind(':');
  const std::string port = colon < 6 ? std::string() : listen.substr(colon + 1);
  if (port == "*") return "";
  const std::string expected = "(expected tcp://HOST:PORT with PORT 1 to 65535, or * for any)";
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return "--listen " + listen + ": no port " + expected;
  if (const int p = std::stoi(port); p < 1 || p > 65535)
    return "--listen " + listen + ": port " + port + " is out of range " + expected;
  return "";
}

}  // namespace

int executor(const ExecutorOptions& opt) {
  if (const std::string bad = bad_listen(opt.listen); !bad.empty()) fail(bad);
  const ExperimentConfig cfg = value_or_fail(load_config(opt.config));
  const HostConfig* host = nullptr;
  std::string names;
  for (const HostConfig& h : cfg.hosts) {
    if (h.name == opt.host) host = &h;
    names += (names.empty() ? "" : ", ") + h.name;
  }
  if (!host)
    fail(cfg.path + ": --host " + opt.host + ": no [[hosts]] entry of that name" +
         (names.empty() ? " (the config has no [[hosts]])" : " (known: " + names + ")"));
  check(check_executor_devices(cfg, opt.host));
  rt::set_cpu_threads(cfg.live.threads);

  // The runner indexes accelerators as the scheduler does (config order,
  // every host); another host's accelerators get a placeholder device
  // that nothing here ever runs on.
  std::vector<std::string> devices;
  ExecutorServerOptions so{opt.listen, opt.host, cfg.live.heartbeat_ms, cfg.live.executor_timeout_ms, {}};
  for (AccelId a = 0; a < cfg.accelerators.size(); ++a) {
    const AcceleratorConfig& ac = cfg.accelerators[a];
    const bool mine = ac.host == opt.host;
    devices.push_back(mine ? ac.device : "cpu");
    if (mine) so.accels.push_back({a, ac.name, ac.device, ac.hbm_bytes, 0});
  }
  if (so.accels.empty()) fail(host->where + ": host '" + opt.host + "' has no accelerator (give one `host = ...`)");
  const auto held = residency(cfg);
  std::vector<std::unique_ptr<rt::LlamaModel>> runtimes;
  std::vector<ServedModel> served;
  std::vector<rt::LlamaConfig> model_cfgs;
  for (std::size_t i = 0; i < cfg.models.size(); ++i) {
    const rt::LlamaConfig mc = value_or_fail(validated_runtime_model(cfg.models[i]));
    model_cfgs.push_back(mc);
    runtimes.push_back(value_or_fail(load_runtime_model(cfg.models[i], mc)));
    ServedModel m{static_cast<TemplateId>(i), runtimes.back().get(), nullptr, {}};
    for (const auto& x : so.accels)
      if (std::find(held[x.id].begin(), held[x.id].end(), i) != held[x.id].end()) m.accels.push_back(x.id);
    served.push_back(std::move(m));
  }
  LlamaRunner runner(std::move(served), devices, transport(cfg.live));
  auto gpus = runner.start_devices();
  if (!gpus.ok()) fail(cfg.path + ": " + gpus.status().message());
  auto weights = runner.load_weights();
  if (!weights.ok()) fail(cfg.path + ": " + weights.status().message());
  for (auto& x : so.accels) {
    x.weights = weights.value()[x.id];
    if (x.weights > x.budget)
      fail(cfg.path + ": cluster: accelerator '" + x.name + "' cannot hold its weights (" + std::to_string(x.weights) +
           " bytes, hbm " + std::to_string(x.budget) + ")");
  }
  so.fingerprint = executor_fingerprint(cfg, model_cfgs, opt.host);
  ExecutorServer server(runner, so);
  const StopSignals signals(StopSignals::Options{});
  // Said once the endpoint is bound, not before.
  check(server.bind());
  std::fprintf(stderr, "slicesched executor '%s': %zu accelerator(s), listening on %s\n", opt.host.c_str(),
               so.accels.size(), opt.listen.c_str());
  const Status s = server.serve(&signals.stop());
  std::fprintf(stderr, "slicesched executor '%s': %s\n", opt.host.c_str(), server.summary().c_str());
  if (!s.ok()) fail(s.message(), 1);
  return 0;
}

}  // namespace slicesched::cli
