// slicesched: the command-line front end.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"SliceScheduler: operator-level scheduling of LLM inference across a GPU cluster"};
  app.require_subcommand(1);

  auto* demo = app.add_subcommand("demo", "Simulate a small cluster and print its timeline summary");

  slicesched::cli::SimulateOptions sim;
  auto* simulate =
      app.add_subcommand("simulate", "Offline capacity planning: run every policy of CONFIG on the emulated cluster");
  simulate->add_option("config", sim.config, "Experiment TOML (e.g. configs/experiments/colocation.toml)")->required();
  simulate->add_option("--policy", sim.policy, "Run only this policy");
  simulate->add_option("--out", sim.out, "Write summary.json, CSVs, Chrome traces and plots into this folder");
  simulate->add_option("--seed", sim.seed, "Override the config's seed");
  simulate->add_flag("--skip-bad-lines", sim.skip_bad_lines, "Skip and count corrupt trace lines instead of failing");
  simulate->add_option("--trace-seconds", sim.trace_seconds, "Simulated seconds covered by the Chrome traces")
      ->check(CLI::NonNegativeNumber);

  auto* bench = app.add_subcommand("bench", "Benchmarks that print their figures");
  bench->require_subcommand(1);
  slicesched::cli::BenchSimulatorOptions sim_opt;
  auto* bench_sim =
      bench->add_subcommand("simulator", "Simulated operators per ms, one thread, snapshot build included");
  bench_sim->add_option("--accelerators,-n", sim_opt.accelerators, "Cluster sizes")->check(CLI::PositiveNumber);
  bench_sim->add_option("--ops,-k", sim_opt.ops, "Unsimulated operators accumulated")->check(CLI::PositiveNumber);
  bench_sim->add_option("--repeats", sim_opt.repeats, "Runs per point (median reported)")->check(CLI::Range(1, 100));
  bench_sim->add_flag("--json", sim_opt.json, "Print one JSON object instead of the table");

  slicesched::cli::BenchSchedulerOptions sched_opt;
  auto* bench_sched = bench->add_subcommand("scheduler", "Latency of one scheduling round (what-if over candidates)");
  bench_sched->add_option("--accelerators,-n", sched_opt.accelerators, "Cluster size")->check(CLI::Range(1, 1024));
  bench_sched->add_option("--candidates,-c", sched_opt.candidates, "Candidate placements per round")
      ->check(CLI::Range(1, 1024));
  bench_sched->add_option("--horizon", sched_opt.horizon, "Operators already queued per accelerator")
      ->check(CLI::Range(0, 1000));
  bench_sched->add_option("--rounds", sched_opt.rounds, "Rounds measured")->check(CLI::Range(1, 1000000));
  bench_sched->add_flag("--json", sched_opt.json, "Print one JSON object");

  CLI11_PARSE(app, argc, argv);
  try {
    if (demo->parsed()) return slicesched::cli::demo();
    if (simulate->parsed()) return slicesched::cli::simulate(sim);
    if (bench_sim->parsed()) return slicesched::cli::bench_simulator(sim_opt);
    if (bench_sched->parsed()) return slicesched::cli::bench_scheduler(sched_opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "slicesched: %s\n", e.what());
    return 1;
  }
  return 0;
}
