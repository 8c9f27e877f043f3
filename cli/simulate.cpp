// `slicesched simulate CONFIG`: offline capacity planning. Every policy of
// the config runs on the same engine against the emulated cluster; the
// result is a comparison table, summary.json, CSVs, Chrome traces and plots.
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.core.graph;
import slicesched.core.gmg;
import slicesched.core.estimator;
import slicesched.config;
import slicesched.compose.experiment;
import slicesched.compose.policy;
import slicesched.compose.run;
import slicesched.compose.offline;
import slicesched.cli.fail;
import slicesched.cli.progress;
import slicesched.cli.report;
import slicesched.cli.signals;
import slicesched.compose.setup;
import slicesched.core.ids;
import slicesched.core.plugin;
import slicesched.core.status;
import slicesched.simulator.profile;
import slicesched.models.model;
import slicesched.engine.tenant;

namespace slicesched::cli {

namespace {

// Prompts far past the measured profile's largest row (four times it) are
// said, not hidden: the profile extends a prompt's own attention linearly
// there, so their prefills run too fast (docs/ground-truth.md: a
// 32,000-token prompt 1.03 s on it, 2.08 s on the roofline). Each tenant's
// requests count once, whichever policies run it; models that play the
// roofline are left out.
void warn_prompts_past_profile(const ExperimentConfig& cfg, const Truths& truths,
                               const std::vector<std::unique_ptr<PolicyParts>>& parts) {
  const LayerProfile* profile = truths.layers                          ? &*truths.layers
                                : truths.typed && truths.typed->layers ? &*truths.typed->layers
                                                                       : nullptr;
  if (!profile || profile->largest_tokens() <= 0) return;
  const std::int64_t limit = 4 * profile->largest_tokens();
  const auto& off = cfg.ground_truth.off_profile_models;
  std::vector<std::string> seen;
  std::size_t count = 0;
  std::int64_t longest = 0;
  for (const auto& p : parts)
    for (const Tenant& t : p->tenants) {
      if (std::find(seen.begin(), seen.end(), t.spec().name) != seen.end()) continue;
      seen.push_back(t.spec().name);
      const Model* m = p->models.of(t.tmpl());
      if (m && std::find(off.begin(), off.end(), m->name()) != off.end()) continue;
      for (const RequestRecord& r : t.records())
        if (r.input_tokens > limit) {
          ++count;
          longest = std::max(longest, r.input_tokens);
        }
    }
  if (count > 0)
    std::fprintf(stderr,
                 "slicesched: ground truth: %zu request(s) have prompts past 4x the measured profile's largest row "
                 "(%lld tokens; the longest %lld): the profile extends a prompt's own attention linearly there, so "
                 "their prefills run too fast (docs/ground-truth.md); the roofline costs them from the shapes\n",
                 count, static_cast<long long>(profile->largest_tokens()), static_cast<long long>(longest));
}

}  // namespace

int simulate(const SimulateOptions& opt) {
  std::vector<ConfigOverride> overrides;
  for (const auto& s : opt.sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) fail("--set " + s + ": expected KEY=VALUE");
    overrides.push_back({s.substr(0, eq), s.substr(eq + 1)});
  }
  // (The prior is read with the ground truth, by load_truths.)
  const auto opened =
      value_or_fail(open_experiment(opt.config, {.overrides = overrides, .seed = opt.seed, .prior = false}));
  ExperimentConfig* const cfg = &opened->cfg;
  const PluginRegistries& plugins = opened->plugins;
  if (opt.skip_bad_lines)
    for (auto& t : cfg->tenants) t.stream.trace.skip_bad_lines = true;
  {
    const Truths truths = value_or_fail(load_truths(*cfg));
    const std::vector<TruthPlayed> played = truth_played(*cfg, truths);
    for (const std::string& line : ground_truth_lines(*cfg, played))
      std::fprintf(stderr, "slicesched: %s\n", line.c_str());
    std::vector<const PolicyConfig*> chosen;
    for (const std::string& name : opt.policies) {
      const PolicyConfig* p = value_or_fail(find_policy(*cfg, name));
      if (std::find(chosen.begin(), chosen.end(), p) != chosen.end()) fail("--policy " + name + ": given twice");
      chosen.push_back(p);
    }
    if (opt.policies.empty())
      for (const auto& p : cfg->policies) chosen.push_back(&p);
    // SLO attainment is against the baseline's p90 TTFT, never a run's own:
    // a --policy that leaves the baseline out runs it beside (not reported),
    // unless a threshold is given.
    const std::string& baseline_name = cfg->slo_baseline;
    const PolicyConfig* baseline = nullptr;
    if (!opt.slo_threshold_s &&
        std::none_of(chosen.begin(), chosen.end(), [&](const PolicyConfig* p) { return p->name == baseline_name; }))
      for (const auto& p : cfg->policies)
        if (p.name == baseline_name) baseline = &p;
    const std::size_t reported = chosen.size();
    if (baseline) chosen.push_back(baseline);
    // So is an --out the results could not be written to.
    if (opt.out) {
      std::vector<std::string> names;
      for (std::size_t k = 0; k < reported; ++k) names.push_back(chosen[k]->name);
      check_out(*opt.out, names, opt.explain);
    }
    // Every policy is built up front (side by side: each reads its
    // streams), once: a bad plugin name or argument, a bad trace or a
    // cluster the model does not fit stops the command before anything is
    // simulated, with the first policy's error.
    std::vector<std::unique_ptr<PolicyParts>> parts(chosen.size());
    std::vector<Status> built(chosen.size());
    // One policy: its what-ifs in parallel; several: one policy per core
    // instead (a baseline run beside is short: it simulates nothing).
    const bool parallel_whatifs = reported == 1;
    tbb::parallel_for(std::size_t{0}, chosen.size(), [&](std::size_t k) {
      auto made = build_policy(*cfg, *chosen[k], plugins,
                               {.prior = truths.prior ? &*truths.prior : nullptr,
                                .parallel = parallel_whatifs,
                                .explain = opt.explain,
                                .explain_s = opt.trace_seconds});
      if (made.ok())
        parts[k] = std::move(made).value();
      else
        built[k] = made.status();
    });
    for (std::size_t k = 0; k < built.size(); ++k)
      if (!built[k].ok() && k >= reported)  // (the baseline, run beside: say why it runs)
        check(Status(built[k].code(), built[k].message() + " (the SLO baseline, run beside --policy " +
                                          chosen[0]->name + " for the threshold; --slo-threshold SECONDS skips it)"));
      else
        check(built[k]);
    warn_prompts_past_profile(*cfg, truths, parts);

    // Ctrl-C (SIGINT) or SIGTERM: the first cancels the runs at their next
    // event and nothing is written (results cut short would look complete);
    // once writing has begun it finishes. A second one stops the process at
    // once (a file being written is then left under its temporary name,
    // never under its own).
    const StopSignals signals(
        {.second_kills = true,
         .first_cancels = true,
         .first_line = "\nslicesched: stopping: each run ends at its next event (a plugin still deciding returns "
                       "first); Ctrl-C again to stop now\n"});
    const auto t0 = std::chrono::steady_clock::now();
    // A policy that fails does not take the others' results with it: its
    // error is kept (one line naming it), the others run to the end, and
    // what finished is reported and written before the command fails.
    std::vector<std::optional<PolicyRun>> runs(chosen.size());
    std::vector<std::string> failures(chosen.size());
    auto run_one = [&](std::size_t k, RecordOptions ro) {
      ro.stop = &signals.stop();
      ro.timeline_s = opt.out ? opt.trace_seconds : -1;  // (only the Chrome trace reads it)
      ro.decisions = opt.explain && k < reported;
      ro.origin = "simulate " + cfg->path + ", policy " + chosen[k]->name;
      ro.keep_failed = true;  // a failed run's decisions and trace are what explain it
      auto run = run_offline(*cfg, *parts[k], truths, ro);
      parts[k].reset();  // what a run held is not needed for the report
      if (!run.ok())
        failures[k] = run.status().message();
      else if (!run->error.empty())
        failures[k] = run->error;
      if (run.ok() && (!run->error.empty() || !run->interrupted)) runs[k] = std::move(run).value();
    };
    if (chosen.size() == 1 || (reported == 1 && baseline)) {
      // The baseline beside (no what-ifs: about a fifth of SliceScheduler's
      // time) shares the cores with the policy's parallel what-ifs.
      if (baseline)
        tbb::parallel_invoke([&] { run_one(1, {}); },
                             [&] { run_one(0, {.progress = progress_printer(chosen[0]->name)}); });
      else
        run_one(0, {.progress = progress_printer(chosen[0]->name)});
      if (stderr_is_tty()) std::fprintf(stderr, "\n");
    } else {
      // Policies run side by side, one per core (each with serial
      // what-ifs), under one progress line over all of them.
      std::vector<std::atomic<double>> done(chosen.size());  // each run's finished fraction
      std::mutex print;
      const bool tty = stderr_is_tty();
      int last_pct = -1;
      auto report_progress = [&] {
        double sum = 0;
        for (const auto& d : done) sum += d.load(std::memory_order_relaxed);
        const int pct = static_cast<int>(100 * sum / static_cast<double>(done.size()));
        const std::lock_guard lock(print);
        if (pct == last_pct || (!tty && pct % 25 != 0)) return;
        last_pct = pct;
        if (tty)
          std::fprintf(stderr, "\r  %zu policies [%-40s] %3d%%", chosen.size(),
                       std::string(static_cast<std::size_t>(pct * 40 / 100), '#').c_str(), pct);
        else
          std::fprintf(stderr, "  %zu policies: %d%%\n", chosen.size(), pct);
      };
      tbb::parallel_for(std::size_t{0}, chosen.size(), [&](std::size_t k) {
        RecordOptions ro;
        ro.progress = [&, k](Nanos, std::size_t d, std::size_t total) {
          done[k].store(total ? static_cast<double>(d) / static_cast<double>(total) : 1.0, std::memory_order_relaxed);
          report_progress();
        };
        run_one(k, ro);
        // A failed run counts as over, and so does one whose window closed
        // with requests still running (they never reported 100 %).
        done[k].store(1.0, std::memory_order_relaxed);
        report_progress();
      });
      if (tty) std::fprintf(stderr, "\n");
    }
    if (signals.count() > 0) {
      std::fprintf(stderr, "\nslicesched: %s: stopped while simulating; nothing written\n", signals.name());
      return 128 + signals.last();  // 130 for SIGINT, 143 for SIGTERM
    }
    std::vector<PolicyRun> finished, failed_runs;
    for (std::size_t k = 0; k < reported; ++k)
      if (runs[k]) (runs[k]->error.empty() ? finished : failed_runs).push_back(std::move(*runs[k]));
    SloBasis slo = slo_basis(finished, baseline_name, opt.slo_threshold_s);
    // A baseline that ran and failed gives no threshold: say so, not that it did not run.
    if (!slo.threshold_s && !baseline_name.empty() &&
        std::any_of(failed_runs.begin(), failed_runs.end(),
                    [&](const PolicyRun& r) { return r.name == baseline_name; }))
      slo = {std::nullopt,
             "the baseline " + baseline_name + " failed, so it gives no threshold (give --slo-threshold SECONDS)"};
    if (baseline) {
      if (runs.back() && runs.back()->error.empty())
        slo = baseline_slo(runs.back()->metrics, baseline_name, ", run beside as the baseline");
      else
        slo = {std::nullopt, "the baseline " + baseline_name + " failed (below)"};
    }
    // A policy whose plugins take longer to decide than the time they
    // schedule could not keep up live: say so.
    for (const PolicyRun& r : finished) {
      double deciding = 0;
      for (const PluginRecord& x : r.plugins)
        if (x.use && deciding_plugin(x)) deciding += x.use->seconds();
      if (deciding > r.metrics.span_s && r.metrics.span_s > 0)
        std::fprintf(stderr,
                     "slicesched: warning: policy '%s': its placement policy and partition sets took %.3f s of wall "
                     "time to decide %.3f s of simulated time (timing.json)\n",
                     r.name.c_str(), deciding, r.metrics.span_s);
    }
    if (!finished.empty() || !failed_runs.empty())
      report(*cfg, finished,
             {.out = opt.out,
              .trace_seconds = opt.trace_seconds,
              .explain = opt.explain,
              .slo = slo,
              .ground_truth = ground_truth_json(played),
              .failed = &failed_runs});
    std::size_t failed = 0;
    for (std::size_t k = 0; k < failures.size(); ++k)
      if (!failures[k].empty()) {
        ++failed;
        // The same failure in several policies (e.g. a shared input) is said once.
        if (std::find(failures.begin(), failures.begin() + static_cast<std::ptrdiff_t>(k), failures[k]) ==
            failures.begin() + static_cast<std::ptrdiff_t>(k))
          std::fprintf(stderr, "slicesched: %s\n", failures[k].c_str());
      }
    if (failed > 0) return 2;
    if (signals.count() > 0) {
      std::fprintf(stderr, "slicesched: %s: came while writing; every output was written\n", signals.name());
      return 128 + signals.last();  // 130 for SIGINT, 143 for SIGTERM
    }
    std::printf("%zu polic%s simulated in %.1f s wall\n", finished.size(), finished.size() == 1 ? "y" : "ies",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 0;
}

}  // namespace slicesched::cli
