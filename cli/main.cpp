// slicesched: the command-line front end.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "commands.hpp"
#include "live_runtime.hpp"

import slicesched.cli.fail;

namespace {

// CLI11's PositiveNumber and NonNegativeNumber let "nan" through (no
// comparison with NaN fails) and "inf": these do not.
CLI::Validator finite_at_least(double min, bool strictly, const char* what) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        const bool ok =
            !s.empty() && end == s.c_str() + s.size() && std::isfinite(v) && (strictly ? v > min : v >= min);
        return ok ? std::string() : std::string("expected ") + what + ", got '" + s + "'";
      },
      what);
}
const CLI::Validator kFinitePositive = finite_at_least(0, true, "a finite number > 0");
const CLI::Validator kFiniteNonNegative = finite_at_least(0, false, "a finite number >= 0");

// An integer in [0, 2^63 - 1] written in digits: CLI11 reads "-1" into an
// unsigned option as 2^64 - 1.
const CLI::Validator kId(
    [](std::string& s) -> std::string {
      const bool digits = !s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos;
      if (digits && (s.size() < 19 || s <= "9223372036854775807")) return {};
      return "expected an integer in [0, 9223372036854775807], got '" + s + "'";
    },
    "INT in [0, 2^63-1]");

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"SliceScheduler: operator-level scheduling of LLM inference across a GPU cluster"};
  app.require_subcommand(1);

  slicesched::cli::SimulateOptions sim;
  auto* simulate =
      app.add_subcommand("simulate", "Offline capacity planning: run every policy of CONFIG on the emulated cluster");
  simulate->add_option("config", sim.config, "Experiment TOML (e.g. configs/experiments/colocation.toml)")->required();
  simulate->add_option("--policy", sim.policies, "Run only this policy (repeatable)");
  simulate->add_option("--out", sim.out, "Write summary.json, CSVs, Chrome traces and plots into this folder");
  simulate->add_option("--seed", sim.seed, "Override the config's seed")->check(kId);
  simulate->add_option("--set", sim.sets, "KEY=VALUE: override one config value (repeatable), as in sweep");
  simulate->add_flag("--skip-bad-lines", sim.skip_bad_lines, "Skip and count corrupt trace lines instead of failing");
  simulate->add_option("--trace-seconds", sim.trace_seconds, "Simulated seconds covered by the Chrome traces")
      ->check(kFiniteNonNegative);
  simulate
      ->add_option("--slo-threshold", sim.slo_threshold_s,
                   "Online TTFT threshold in seconds for SLO attainment (default: the p90 TTFT of the config's "
                   "slo_baseline policy, run beside when --policy leaves it out)")
      ->check(kFinitePositive);
  simulate->add_flag("--explain", sim.explain,
                     "Record every scheduling round of the traced seconds: decisions.jsonl and the trace's "
                     "scheduler lane (see `slicesched explain`)");

  slicesched::cli::ExplainOptions explain_opt;
  auto* explain = app.add_subcommand("explain", "Print the scheduling rounds that placed one request's operators");
  explain->add_option("dir", explain_opt.dir, "An --out folder written with --explain")->required();
  explain->add_option("--request", explain_opt.request, "The request's id (its row in requests_<policy>.csv)")
      ->required()
      ->check(kId);
  explain->add_option("--policy", explain_opt.policy, "Only this policy's rounds");

  slicesched::cli::SweepOptions sweep_opt;
  auto* sweep =
      app.add_subcommand("sweep", "Capacity planning: every policy at every point of a grid of config values");
  sweep->add_option("config", sweep_opt.config, "Experiment TOML")->required();
  sweep
      ->add_option("--set", sweep_opt.sets,
                   "[NAME:]KEY=V1,V2,...: a swept key (dotted TOML path, e.g. tenants.offline0.stream.constant_rate)")
      ->required();
  sweep->add_option("--policy", sweep_opt.policies, "Report only this policy (repeatable)");
  sweep->add_option("--out", sweep_opt.out, "Write sweep.csv, sweep.json, sweep_wall.csv and plots/ here")->required();
  sweep->add_option("--jobs,-j", sweep_opt.jobs, "Runs at once (default: every core)")->check(CLI::Range(1, 1024));
  sweep->add_option("--shard", sweep_opt.shard, "I/N: run only every N-th point, starting at I");

  slicesched::cli::SweepMergeOptions merge_opt;
  auto* sweep_merge = app.add_subcommand("sweep-merge", "Merge the shards of one sweep into one sweep.csv");
  sweep_merge->add_option("dirs", merge_opt.dirs, "The shards' --out folders")->required();
  sweep_merge->add_option("--out", merge_opt.out, "Write the merged sweep.csv, sweep.json and plots/ here")->required();

  slicesched::cli::PlanOptions plan_opt;
  auto* plan = app.add_subcommand("plan", "Capacity planning: the smallest value of a key at which objectives hold");
  plan->add_option("config", plan_opt.config, "Experiment TOML")->required();
  plan->add_option("--policy", plan_opt.policy, "The policy to plan for")->required();
  plan->add_option("--vary", plan_opt.vary,
                   "KEY=LO..HI or KEY=V1,V2,...: the integer key searched (e.g. cluster.accelerators[0].count=2..16, "
                   "cluster.accelerators[0].tp=2,4,8)")
      ->required();
  plan->add_option("--objective", plan_opt.objectives, "FIGURE<=X or >=, < , > (repeatable, all must hold)")
      ->required();
  plan->add_option("--set", plan_opt.sets, "KEY=VALUE fixed for every point (repeatable)");
  plan->add_flag("--json", plan_opt.json, "Print one JSON object (answer, points)");

  auto* bench = app.add_subcommand("bench", "Benchmarks that print their figures");
  bench->require_subcommand(1);
  slicesched::cli::ServeOptions serve_opt;
  auto* serve = app.add_subcommand("serve", "Live serving: run one policy of CONFIG on its devices (LibTorch)");
  serve->add_option("config", serve_opt.config, "Experiment TOML with devices (e.g. configs/live/tiny-cpu.toml)")
      ->required();
  serve->add_option("--policy", serve_opt.policy, "The policy to serve (required when CONFIG has several)");
  serve->add_option("--out", serve_opt.out, "Write summary.json, CSVs, the Chrome trace and plots into this folder");
  serve->add_option("--seed", serve_opt.seed, "Override the config's seed")->check(kId);
  serve->add_option("--trace-seconds", serve_opt.trace_seconds, "Seconds covered by the Chrome trace")
      ->check(kFinitePositive);
  serve
      ->add_option("--slo-threshold", serve_opt.slo_threshold_s,
                   "Online TTFT target in seconds for SLO attainment (overrides [serve] ttft_slo_s)")
      ->check(kFinitePositive);
  serve->add_flag("--explain", serve_opt.explain, "Record every scheduling round of the traced seconds, as simulate");
  serve->add_flag("--spawn-local", serve_opt.spawn_local,
                  "Start the config's [[hosts]] executors as child processes on this machine");
  serve->add_option("--listen", serve_opt.listen,
                    "Serve HTTP on HOST:PORT (OpenAI-compatible completions and batches; port 0: any free port) "
                    "instead of replaying the tenants' streams");
  serve->add_option("--batch-store", serve_opt.batch_store,
                    "The batch API's SQLite file (overrides [serve] batch_store)");
  serve->add_option("--chat-template", serve_opt.chat_template,
                    "A Jinja chat template file for /v1/chat/completions (overrides every model's "
                    "tokenizer_config.json chat_template)");
  serve->add_option("--api-key", serve_opt.api_key,
                    "Require 'Authorization: Bearer KEY' on /v1/* (else SLICESCHED_API_KEY; /health and /metrics "
                    "stay open)");
  slicesched::cli::ExecutorOptions exec_opt;
  auto* executor = app.add_subcommand(
      "executor", "Live serving across processes: run one [[hosts]] entry's accelerators for `serve` to drive");
  executor->add_option("--listen", exec_opt.listen, "ZeroMQ endpoint to listen on (tcp://0.0.0.0:5555, ipc:///path)")
      ->required();
  executor->add_option("--config", exec_opt.config, "The experiment TOML the scheduler serves")->required();
  executor->add_option("--host", exec_opt.host, "This host's [[hosts]] name")->required();

  auto* devices =
      app.add_subcommand("devices", "The CUDA devices live mode sees (cuda:N), with CUDA and NCCL versions");

  slicesched::cli::BenchSimulatorOptions sim_opt;
  auto* bench_sim =
      bench->add_subcommand("simulator", "Simulated operators per ms, one thread, snapshot build included");
  bench_sim->add_option("--accelerators,-n", sim_opt.accelerators, "Cluster sizes")->check(CLI::Range(1, 100000));
  bench_sim->add_option("--ops,-k", sim_opt.ops, "Unsimulated operators accumulated")->check(CLI::Range(1, 10000000));
  bench_sim->add_option("--repeats", sim_opt.repeats, "Runs per point (median reported)")->check(CLI::Range(1, 100));
  bench_sim->add_flag("--json", sim_opt.json, "Print one JSON object instead of the table");

  slicesched::cli::BenchSchedulerOptions sched_opt;
  auto* bench_sched = bench->add_subcommand("scheduler", "Latency of one scheduling round (what-if over candidates)");
  bench_sched->add_option("--accelerators,-n", sched_opt.accelerators, "Cluster size")->check(CLI::Range(1, 100000));
  bench_sched->add_option("--candidates,-c", sched_opt.candidates, "Candidate placements per round")
      ->check(CLI::Range(1, 1024));
  bench_sched->add_option("--horizon", sched_opt.horizon, "Operators already queued per accelerator")
      ->check(CLI::Range(0, 1000));
  bench_sched->add_option("--rounds", sched_opt.rounds, "Rounds measured")->check(CLI::Range(1, 1000000));
  bench_sched->add_flag("--json", sched_opt.json, "Print one JSON object");
  bench_sched->add_flag("--cluster-wide", sched_opt.cluster_wide,
                        "Candidates: every pair and every quad of the cluster (overrides --candidates)");

  slicesched::cli::BenchRooflineOptions roof_opt;
  auto* bench_roof = bench->add_subcommand(
      "roofline", "Roofline ground truth vs a measured profile it was not fitted on: MAPE per kind of work");
  bench_roof->add_option("--profile", roof_opt.profile, "Profile to predict (LLMServingSim layers or Vidur mlp CSV)");
  bench_roof->add_option("--type", roof_opt.type, "Its accelerator type (a name or alias in configs/accelerators)");
  bench_roof->add_option(
      "--model", roof_opt.model,
      "Preset whose shapes the profile measured (llama3-8b, llama2-7b, llama2-70b, codellama-34b, internlm-20b, ...)");
  bench_roof->add_option("--tp", roof_opt.tp, "Tensor parallelism of the rows used")->check(CLI::Range(1, 64));
  bench_roof->add_option("--fit", roof_opt.fit, "CSV@TYPE to fit the efficiencies on (repeatable)");
  bench_roof->add_option("--efficiencies", roof_opt.efficiencies,
                         "Fit file to use when no --fit (default: configs/accelerators/roofline-fit.toml)");
  bench_roof->add_option("--write", roof_opt.write, "Save the fitted efficiencies as TOML here");
  bench_roof->add_option("--accelerators", roof_opt.accelerator_dir, "Folder of accelerator type tables");
  bench_roof->add_flag("--json", roof_opt.json, "Print one JSON object (mape_pct, per kind)");

  slicesched::cli::ValidateOptions val_opt;
  auto* validate = app.add_subcommand(
      "validate", "Replay published single-GPU measurements on the roofline: published, simulated, ratio per row");
  validate->add_option(
      "data", val_opt.data,
      "Published measurements CSV (default: TensorRT-LLM's A100 tables, data/validation/trtllm_a100.csv)");
  validate->add_option("--efficiencies", val_opt.efficiencies,
                       "Fit file for every row (default: each type's own, as its table names it, e.g. "
                       "roofline-fit-a100.toml for the A100; else configs/accelerators/roofline-fit.toml)");
  validate->add_option("--accelerators", val_opt.accelerator_dir,
                       "Folder of accelerator type tables the rows play (floors use the shipped ones)");
  validate->add_option("--iteration-overhead-us", val_opt.iteration_overhead_us, "Fixed cost per iteration")
      ->check(CLI::Range(0.0, 1e6));
  validate->add_option("--request-overhead-us", val_opt.request_overhead_us, "Fixed cost per request")
      ->check(CLI::Range(0.0, 1e6));
  validate
      ->add_option("--sequence-overhead-us", val_opt.sequence_overhead_us, "Fixed cost per sequence in each iteration")
      ->check(CLI::Range(0.0, 1e6));
  validate->add_flag("--json", val_opt.json, "Print one JSON object");
  validate->add_flag("--breakdown", val_opt.breakdown, "Print where each row's simulated time goes, per kind of work");

  slicesched::cli::CalibrateOptions cal_opt;
  auto* calibrate = app.add_subcommand(
      "calibrate", "Time CONFIG's model operators and copies on its devices; write a calibration profile (LibTorch)");
  calibrate->add_option("config", cal_opt.config, "Experiment TOML with devices (e.g. configs/live/tiny-cpu.toml)")
      ->required();
  calibrate->add_option("--out", cal_opt.out, "The profile to write (slicesched-calibration/2 JSON)");
  calibrate->add_option("--warmup", cal_opt.warmup, "Untimed runs per shape")->check(CLI::Range(0, 1000));
  calibrate->add_option("--repeats", cal_opt.repeats, "Timed runs per shape (the median counts)")
      ->check(CLI::Range(1, 1000));
  calibrate->add_option("--samples", cal_opt.samples, "Also write every measurement and its fit as CSV");
  calibrate->add_flag("--dry-run", cal_opt.dry_run, "Print the shape grid and stop (needs no device)");

  slicesched::cli::BenchOverheadOptions ovh_opt;
  auto* bench_ovh = bench->add_subcommand(
      "overhead", "Executor overhead: one-token prefills through SliceScheduler vs a direct LibTorch loop");
  bench_ovh->add_option("config", ovh_opt.config, "Experiment TOML with devices")->required();
  bench_ovh->add_option("--requests", ovh_opt.requests, "Prefills per run")->check(CLI::Range(1, 10000000));
  bench_ovh->add_option("--rounds", ovh_opt.rounds, "Runs each way (the best counts)")->check(CLI::Range(1, 100));
  bench_ovh->add_option("--lanes", ovh_opt.lanes, "The tenant's iterations in flight")->check(CLI::Range(1, 64));
  bench_ovh->add_option("--accelerator", ovh_opt.accelerator, "Run on this accelerator (default: the first)");
  bench_ovh->add_option("--policy", ovh_opt.policy, "Take placement, arbiter and estimator from this policy");
  bench_ovh->add_flag("--json", ovh_opt.json, "Print one JSON object");

  slicesched::cli::BenchAccuracyOptions acc_opt;
  auto* bench_acc = bench->add_subcommand(
      "accuracy", "Simulator accuracy: calibrate, serve live, simulate the same run; compare times and estimators");
  bench_acc->add_option("config", acc_opt.config, "Experiment TOML with devices")->required();
  bench_acc->add_option("--policy", acc_opt.policy, "The policy to run (default: the first)");
  bench_acc->add_option("--profile-out", acc_opt.profile_out, "Also write the calibration profile here");
  bench_acc
      ->add_option("--time-scale", acc_opt.time_scale,
                   "Override [live] time_scale: arrivals this many times sooner (a saturated run)")
      ->check(kFinitePositive);
  bench_acc->add_option("--observations", acc_opt.observations,
                        "Also write every live measurement and its calibrated prediction as CSV");
  bench_acc->add_option("--samples", acc_opt.samples, "Also write every calibration measurement and its fit as CSV");
  bench_acc->add_option("--warmup", acc_opt.warmup, "Calibration: untimed runs per shape")->check(CLI::Range(0, 1000));
  bench_acc->add_option("--repeats", acc_opt.repeats, "Calibration: timed runs per shape")->check(CLI::Range(1, 1000));
  bench_acc->add_flag("--json", acc_opt.json, "Print one JSON object");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help: the help text, exit 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, as every other error, and exit 2 (CLI11's own codes are
    // 100 and up, and its message is followed by a second line).
    std::fprintf(stderr, "slicesched: %s (see --help)\n", e.what());
    return 2;
  }
  // A command's figures on a stdout that could not take them (a full disk,
  // a closed pipe) are lost: that is a failure, not exit 0.
  auto stdout_ok = [](int rc) {
    std::cout.flush();
    errno = 0;
    const bool flushed = std::fflush(stdout) == 0;
    if (flushed && !std::ferror(stdout) && std::cout.good()) return rc;
    // (an earlier write's error leaves no errno to name)
    std::fprintf(stderr, "slicesched: standard output: write failed (%s)\n",
                 errno ? std::strerror(errno) : "disk full, or a closed pipe?");
    return rc == 0 ? 2 : rc;
  };
  return stdout_ok([&]() -> int {
    try {
      if (simulate->parsed()) return slicesched::cli::simulate(sim);
      if (explain->parsed()) return slicesched::cli::explain(explain_opt);
      if (sweep->parsed()) return slicesched::cli::sweep(sweep_opt);
      if (sweep_merge->parsed()) return slicesched::cli::sweep_merge(merge_opt);
      if (plan->parsed()) return slicesched::cli::plan(plan_opt);
      if (serve->parsed() || executor->parsed() || devices->parsed() || calibrate->parsed() || bench_ovh->parsed() ||
          bench_acc->parsed()) {
        // LibTorch, CUDA and Python are mapped only here (cli/live_runtime.hpp).
        std::string error;
        const slicesched::cli::LiveCommands* live = slicesched::cli::live_commands(error);
        if (live == nullptr) throw slicesched::cli::CommandError(error);
        if (serve->parsed()) return live->serve(serve_opt);
        if (executor->parsed()) return live->executor(exec_opt);
        if (devices->parsed()) return live->devices();
        if (calibrate->parsed()) return live->calibrate(cal_opt);
        if (bench_ovh->parsed()) return live->bench_overhead(ovh_opt);
        return live->bench_accuracy(acc_opt);
      }
      if (validate->parsed()) return slicesched::cli::validate(val_opt);
      if (bench_roof->parsed()) {
        roof_opt.command_line = "slicesched";
        for (int i = 1; i < argc; ++i) roof_opt.command_line += std::string(" ") + argv[i];
        return slicesched::cli::bench_roofline(roof_opt);
      }
      if (bench_sim->parsed()) return slicesched::cli::bench_simulator(sim_opt);
      if (bench_sched->parsed()) return slicesched::cli::bench_scheduler(sched_opt);
    } catch (const slicesched::cli::CommandError& e) {
      // The one place a command's failure is printed (cli/fail.cppm).
      std::fprintf(stderr, "slicesched: %s\n", e.what());
      return e.status;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "slicesched: %s\n", e.what());
      return 2;
    }
    return 0;
  }());
}
