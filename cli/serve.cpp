// `slicesched serve CONFIG`: live serving. One policy of the config runs on
// the config's devices (CPU virtual accelerators or CUDA GPUs) through the
// same engine as simulate; trace tenants replay in real time (sped up by
// [live] time_scale). Ctrl-C or SIGTERM once drains (no new arrivals;
// admitted requests finish), twice cancels; either way the summary is
// written. A service manager's stop (SIGTERM) is a drain, like Ctrl-C.
// With --listen HOST:PORT (or [serve] listen) the tenants' streams are not
// replayed: an HTTP server takes OpenAI-compatible completions and batch
// jobs (cli/serve_http, serving/), and a drain also stops accepting them.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "local_executors.hpp"

import slicesched.config;
import slicesched.cli.live;
import slicesched.cli.serve_http;
import slicesched.cli.report;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.compose.setup;
import slicesched.core.calibration;
import slicesched.core.plugin;
import slicesched.engine.inbox;

namespace slicesched::cli {

namespace {

std::atomic<int> g_stop{0};
std::atomic<int> g_signal{0};  // the last one received, for the exit status
// With --listen: the counter the engine's wait watches (bumped after g_stop
// so a drain or cancel is seen at once). Lock-free atomics: signal-safe.
std::atomic<std::atomic<int>*> g_wake{nullptr};

extern "C" void on_interrupt(int sig) {
  g_signal = sig;
  const int n = g_stop.fetch_add(1) + 1;
  if (std::atomic<int>* w = g_wake.load()) w->fetch_add(1);
  const char* msg = n == 1 ? "\nslicesched: draining (admitted requests finish); Ctrl-C or SIGTERM again to cancel\n"
                           : "\nslicesched: cancelling\n";
  ssize_t ignored = write(STDERR_FILENO, msg, std::char_traits<char>::length(msg));
  (void)ignored;
}

}  // namespace

int serve(const ServeOptions& opt) {
  auto cfg = load_config(opt.config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "slicesched: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (opt.seed) cfg->seed = *opt.seed;
  try {
    const PolicyConfig* policy = value_or_fail(find_policy(cfg.value(), opt.policy));
    // Like simulate: a missing or bad profile stops serve before it starts.
    const std::optional<CalibrationProfile> prior = value_or_fail(read_prior(cfg.value()));
    PluginRegistries plugins;
    check(load_plugins(cfg.value(), plugins));
    if (opt.out) check_out(*opt.out, {policy->name}, opt.explain);

    g_stop = 0;
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
    LiveRunOptions lopt;
    // Executor children first (they load their weights while this one
    // builds the policy); gone, whatever way serve ends.
    std::unique_ptr<LocalExecutors> children;
    if (opt.spawn_local) {
      if (cfg->hosts.empty())
        fail(cfg->path +
             ": --spawn-local: the config has no [[hosts]] (executors to start); without it serve runs "
             "every accelerator in this process");
      std::vector<std::string> names;
      for (const HostConfig& h : cfg->hosts) names.push_back(h.name);
      children = std::make_unique<LocalExecutors>(cfg->path, names);
      lopt.addresses = children->addresses();
    }
    lopt.stop = &g_stop;
    lopt.trace_seconds = opt.trace_seconds;
    lopt.explain = opt.explain;
    std::vector<PolicyRun> runs;
    const std::string listen = opt.listen ? *opt.listen : cfg->serve.listen;
    // The drain's deadline: [serve] drain_timeout_s after the first signal,
    // what is still running is cancelled (as a second signal would) and
    // counted; the exit status stays that of a drain.
    std::mutex drain_mu;
    std::condition_variable drain_cv;
    bool run_over = false;
    std::atomic<bool> drain_expired{false};
    std::thread drain_clock([&] {
      std::unique_lock lk(drain_mu);
      while (!run_over && g_stop.load() == 0) drain_cv.wait_for(lk, std::chrono::milliseconds(50));
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(cfg->serve.drain_timeout_s);
      while (!run_over && g_stop.load() == 1 && std::chrono::steady_clock::now() < until)
        drain_cv.wait_for(lk, std::chrono::milliseconds(50));
      if (run_over || g_stop.load() != 1) return;
      drain_expired = true;
      g_stop.store(2);
      if (std::atomic<int>* w = g_wake.load()) w->fetch_add(1);
    });
    struct EndClock {
      std::mutex& mu;
      std::condition_variable& cv;
      bool& over;
      std::thread& t;
      ~EndClock() {
        {
          std::lock_guard lk(mu);
          over = true;
        }
        cv.notify_all();
        t.join();
      }
    } end_clock{drain_mu, drain_cv, run_over, drain_clock};
    if (!listen.empty())
      runs.push_back(serve_http(
          cfg.value(), *policy, plugins, prior ? &*prior : nullptr, listen,
          opt.batch_store ? *opt.batch_store : cfg->serve.batch_store, lopt, g_wake,
          HttpExtras{.chat_template = opt.chat_template.value_or(""),
                     .api_key = opt.api_key                         ? *opt.api_key
                                : std::getenv("SLICESCHED_API_KEY") ? std::string(std::getenv("SLICESCHED_API_KEY"))
                                                                    : std::string()}));
    else
      runs.push_back(run_live(cfg.value(), *policy, plugins, prior ? &*prior : nullptr, lopt));
    if (drain_expired) {
      std::size_t cancelled = 0;
      for (const auto& r : runs[0].requests) cancelled += r.error == kCancelledError;
      std::fprintf(stderr,
                   "slicesched: the drain took longer than %lld s ([serve] drain_timeout_s): %zu unfinished "
                   "request(s) cancelled\n",
                   static_cast<long long>(cfg->serve.drain_timeout_s), cancelled);
      g_stop = 1;  // (a drain, for the exit status)
    }
    // Back to the defaults: a signal while the summary is written ends the
    // process as usual (outputs are replaced atomically: nothing half-written).
    for (int sig : {SIGINT, SIGTERM}) signal(sig, SIG_DFL);

    // Serve has no baseline run beside it: SLO attainment is against the
    // stated TTFT target, or n/a.
    SloBasis slo{std::nullopt,
                 "serve runs no baseline; set [serve] ttft_slo_s (the online TTFT target in seconds) or give "
                 "--slo-threshold SECONDS"};
    if (opt.slo_threshold_s)
      slo = {opt.slo_threshold_s, "--slo-threshold"};
    else if (cfg->serve.ttft_slo_s > 0)
      slo = {cfg->serve.ttft_slo_s, "[serve] ttft_slo_s"};
    report(cfg.value(), runs, {.out = opt.out, .trace_seconds = opt.trace_seconds, .explain = opt.explain, .slo = slo});
    std::printf("served %s live in %.1f s wall\n", policy->name.c_str(), runs[0].wall_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slicesched: %s\n", e.what());
    // Stopped by a signal (e.g. while waiting for an executor): as a shell
    // reports a process it ended.
    return g_stop.load() >= 1 ? 128 + g_signal.load() : 2;
  }
  // Cancelled: 128 + the signal, as a shell reports a process it ended
  // (130 for Ctrl-C, 143 for SIGTERM); drained: 0.
  return g_stop.load() >= 2 ? 128 + g_signal.load() : 0;
}

}  // namespace slicesched::cli
