// `slicesched serve CONFIG`: live serving. One policy of the config runs on
// the config's devices (CPU virtual accelerators or CUDA GPUs) through the
// same engine as simulate (compose/live); trace tenants replay in real time
// (sped up by [live] time_scale). Ctrl-C or SIGTERM once drains (no new
// arrivals; admitted requests finish), twice cancels; either way the summary
// is written. A service manager's stop (SIGTERM) is a drain, like Ctrl-C.
// With --listen HOST:PORT (or [serve] listen) the tenants' streams are not
// replayed: an HTTP server takes OpenAI-compatible completions and batch
// jobs (compose/live_http, serving/), and a drain also stops accepting them.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "local_executors.hpp"

import slicesched.config;
import slicesched.engine.inbox;
import slicesched.engine.observer;
import slicesched.compose.experiment;
import slicesched.compose.run;
import slicesched.compose.live;
import slicesched.compose.live_http;
import slicesched.cli.fail;
import slicesched.cli.progress;
import slicesched.cli.report;
import slicesched.cli.signals;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.compose.setup;
import slicesched.core.calibration;
import slicesched.core.plugin;
import slicesched.engine.inbox;

namespace slicesched::cli {

int serve(const ServeOptions& opt) {
  const auto opened =
      value_or_fail(open_experiment(opt.config, {.seed = opt.seed, .one_policy = true, .policy = opt.policy}));
  const ExperimentConfig& cfg = opened->cfg;
  const PolicyConfig& policy = *opened->policy;
  std::error_code ec;
  const bool out_existed = opt.out && std::filesystem::exists(*opt.out, ec);
  if (opt.out) check_out(*opt.out, {policy.name}, opt.explain);

  StopSignals signals({.first_line = "\nslicesched: draining (admitted requests finish); Ctrl-C or SIGTERM again to "
                                     "cancel\n",
                       .later_line = "\nslicesched: cancelling\n"});
  // Stopped by a signal (e.g. while waiting for an executor): as a shell
  // reports a process it ended.
  // An --out folder this made and nothing was written to goes again.
  auto failed = [&](const Status& s) {
    std::error_code e;
    if (opt.out && !out_existed && std::filesystem::is_empty(*opt.out, e)) std::filesystem::remove(*opt.out, e);
    fail(s.message(), signals.count() >= 1 ? 128 + signals.last() : 2);
  };
  LiveOptions lopt{.stop = &signals.stop(), .wake = &signals.wake(), .explain = opt.explain};
  // Executor children first (they load their weights while this one
  // builds the policy); gone, whatever way serve ends.
  std::unique_ptr<LocalExecutors> children;
  if (opt.spawn_local) {
    if (cfg.hosts.empty())
      fail(cfg.path +
           ": --spawn-local: the config has no [[hosts]] (executors to start); without it serve runs "
           "every accelerator in this process");
    // What every executor would refuse is refused here, once, before any
    // starts (each child would print the same line).
    if (Status s = check_devices(cfg); !s.ok()) failed(s);
    for (const ModelConfig& m : cfg.models)
      if (auto c = validated_runtime_model(m); !c.ok()) failed(c.status());
    std::vector<std::string> names;
    for (const HostConfig& h : cfg.hosts) names.push_back(h.name);
    children = std::make_unique<LocalExecutors>(cfg.path, names);
    lopt.addresses = children->addresses();
  }
  // The drain's deadline: [serve] drain_timeout_s after the first signal,
  // what is still running is cancelled (as a second signal would) and
  // counted; the exit status stays that of a drain.
  const DrainDeadline deadline(signals, cfg.serve.drain_timeout_s);
  const std::string listen = opt.listen ? *opt.listen : cfg.serve.listen;
  // The session is declared before the front end, which pushes into its
  // inbox: the front end stops (and its server with it) first.
  std::unique_ptr<LiveSession> session;
  std::unique_ptr<HttpFront> front;
  if (!listen.empty()) {
    const char* env_key = std::getenv("SLICESCHED_API_KEY");
    // An empty key would turn authentication off without a word: a user
    // who set one (an unset shell variable expands to "") meant one.
    if (opt.api_key && opt.api_key->empty())
      failed(InvalidArgument("--api-key: expected a non-empty key (leave the option out to serve without one)"));
    if (!opt.api_key && env_key && *env_key == '\0')
      failed(InvalidArgument("SLICESCHED_API_KEY: set but empty (unset it to serve without a key)"));
    auto made = HttpFront::open(cfg, listen, opt.batch_store ? *opt.batch_store : cfg.serve.batch_store,
                                {.chat_template = opt.chat_template.value_or(""),
                                 .api_key = opt.api_key ? *opt.api_key
                                            : env_key   ? std::string(env_key)
                                                        : ""});
    if (!made.ok()) failed(made.status());
    front = std::move(made).value();
    lopt.front_end = true;
    lopt.progress = false;  // (no stream to count progress against)
    lopt.on_lost = front->lost_hook();
  }
  auto made = LiveSession::open(cfg, policy, opened->plugins, opened->prior_or_null(), lopt);
  if (!made.ok()) failed(made.status());
  session = std::move(made).value();
  if (front)
    if (Status s = front->start(*session); !s.ok()) failed(s);
  RecordOptions ro;
  ro.timeline_s = opt.out ? opt.trace_seconds : -1;  // (only the Chrome trace reads it)
  if (!front) ro.progress = progress_printer(policy.name);
  ro.keep_failed = true;  // (what it served before a failure is written, marked failed, as simulate does)
  auto run = session->run(ro, front ? front->observers() : std::span<EngineObserver* const>{});
  // Whatever way the run ended: batch results that arrived are written,
  // and every waiting client is answered, before the server goes.
  const Status stopped = front ? front->stop() : Status::Ok();
  if (!run.ok()) failed(run.status());
  if (!stopped.ok()) failed(stopped);
  std::vector<PolicyRun> runs;
  runs.push_back(std::move(run).value());
  if (!runs[0].error.empty()) {
    // Failed part way (a plugin threw, every executor lost, a deadlock):
    // summary.json says so, with the requests as they were, the CSVs and
    // the trace; a server's clients were answered above.
    signals.restore();
    const std::string error = runs[0].error;
    std::vector<PolicyRun> none;
    if (opt.out)
      report(cfg, none,
             {.out = opt.out,
              .trace_seconds = opt.trace_seconds,
              .explain = opt.explain,
              .slo = SloBasis{std::nullopt, "the run failed"},
              .failed = &runs});
    failed(FailedPrecondition(error));
  }
  if (deadline.expired()) {
    std::size_t cancelled = 0;
    for (const auto& r : runs[0].requests) cancelled += r.error == kCancelledError;
    std::fprintf(stderr,
                 "slicesched: the drain took longer than %lld s ([serve] drain_timeout_s): %zu unfinished "
                 "request(s) cancelled\n",
                 static_cast<long long>(cfg.serve.drain_timeout_s), cancelled);
  }
  // Back to the defaults: a signal while the summary is written ends the
  // process as usual (outputs are replaced atomically: nothing half-written).
  signals.restore();

  // Serve has no baseline run beside it: SLO attainment is against the
  // stated TTFT target, or n/a.
  SloBasis slo{std::nullopt,
               "serve runs no baseline; set [serve] ttft_slo_s (the online TTFT target in seconds) or give "
               "--slo-threshold SECONDS"};
  if (opt.slo_threshold_s)
    slo = {opt.slo_threshold_s, "--slo-threshold"};
  else if (cfg.serve.ttft_slo_s > 0)
    slo = {cfg.serve.ttft_slo_s, "[serve] ttft_slo_s"};
  report(cfg, runs, {.out = opt.out, .trace_seconds = opt.trace_seconds, .explain = opt.explain, .slo = slo});
  std::printf("served %s live in %.1f s wall\n", policy.name.c_str(), runs[0].wall_s);
  // Cancelled: 128 + the signal, as a shell reports a process it ended
  // (130 for Ctrl-C, 143 for SIGTERM); drained (or cancelled by the drain's
  // deadline): 0.
  return signals.count() >= 2 && !deadline.expired() ? 128 + signals.last() : 0;
}

}  // namespace slicesched::cli
