// The subcommands of `slicesched`, each in its own file. Plain declarations
// so main.cpp stays a thin CLI11 front end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace slicesched::cli {

struct BenchSimulatorOptions {
  std::vector<int> accelerators{8, 64, 512};
  std::vector<std::int64_t> ops{1'000, 10'000, 100'000, 1'000'000};
  int repeats = 3;
  bool json = false;
};
int bench_simulator(const BenchSimulatorOptions& opt);

struct BenchSchedulerOptions {
  int accelerators = 64;
  int candidates = 8;
  int horizon = 3;  // operators already queued per accelerator
  int rounds = 1000;
  bool json = false;
  // Every pair and every quad of the cluster as candidates (what
  // cluster-1000.toml's partition sets offer) instead of `candidates` groups.
  bool cluster_wide = false;
};
int bench_scheduler(const BenchSchedulerOptions& opt);

// `slicesched bench roofline` (bench_roofline.cpp).
struct BenchRooflineOptions {
  std::string profile;  // the measured profile to predict
  std::string type;     // its accelerator type
  std::string model = "llama3-8b";
  int tp = 1;
  std::vector<std::string> fit;             // "CSV@TYPE": fit on these (else read a fit file)
  std::optional<std::string> efficiencies;  // the fit file (default: configs/accelerators/roofline-fit.toml)
  std::optional<std::string> write;         // save the fit here
  std::string accelerator_dir;              // type tables (default: configs/accelerators)
  std::string command_line;                 // recorded in a written fit
  bool json = false;
};
int bench_roofline(const BenchRooflineOptions& opt);

// `slicesched validate` (validate.cpp).
struct ValidateOptions {
  std::string data;                         // published measurements (default: default_validation_csv())
  std::optional<std::string> efficiencies;  // the fit file (default: configs/accelerators/roofline-fit.toml)
  std::string accelerator_dir;              // type tables the rows play (default: configs/accelerators)
  double iteration_overhead_us = 0;         // fixed cost per iteration
  double request_overhead_us = 0;           // fixed cost per request
  double sequence_overhead_us = 0;          // fixed cost per sequence in each iteration
  bool breakdown = false;                   // print each row's time per kind of work
  bool json = false;
};
int validate(const ValidateOptions& opt);

struct SimulateOptions {
  std::string config;
  std::vector<std::string> policies;  // run only these policies (empty: every one)
  std::optional<std::string> out;     // write summary.json, CSVs, traces and plots here
  std::optional<std::uint64_t> seed;  // overrides the config's seed
  double trace_seconds = 60;          // Chrome traces cover the first this many simulated seconds
  bool skip_bad_lines = false;        // skip (and count) corrupt trace lines in every trace stream
  std::vector<std::string> sets;      // "KEY=VALUE" config overrides
  bool explain = false;               // record every scheduling round (decisions.jsonl, the trace's scheduler lane)
  // SLO attainment's TTFT threshold; none: the p90 TTFT of Static-Online
  // (run beside as the baseline when --policy names another).
  std::optional<double> slo_threshold_s;
};
int simulate(const SimulateOptions& opt);

// `slicesched explain DIR --request ID`: the rounds that placed one
// request's operators, from DIR/decisions.jsonl.
struct ExplainOptions {
  std::string dir;
  std::uint64_t request = 0;
  std::optional<std::string> policy;  // default: every policy in the file
};
int explain(const ExplainOptions& opt);

struct SweepOptions {
  std::string config;
  std::vector<std::string> sets;      // "[NAME:]KEY=V1,V2,..."
  std::vector<std::string> policies;  // report only these (all when empty)
  std::string out;
  int jobs = 0;                      // 0: every core
  std::optional<std::string> shard;  // "I/N"
};
int sweep(const SweepOptions& opt);

struct SweepMergeOptions {
  std::vector<std::string> dirs;
  std::string out;
};
int sweep_merge(const SweepMergeOptions& opt);

struct PlanOptions {
  std::string config;
  std::string policy;
  std::string vary;                     // "KEY=LO..HI"
  std::vector<std::string> objectives;  // "FIGURE<=X"
  std::vector<std::string> sets;        // fixed overrides "KEY=V" applied to every point
  bool json = false;
};
int plan(const PlanOptions& opt);

struct ServeOptions {
  std::string config;
  std::optional<std::string> policy;  // required when the config has several
  std::optional<std::string> out;     // summary.json, CSVs, trace and plots, as simulate
  std::optional<std::uint64_t> seed;
  double trace_seconds = 60;
  bool explain = false;  // as simulate's --explain
  // Start the config's [[hosts]] executors as child processes here (on
  // ipc:// endpoints of a private folder instead of their addresses).
  bool spawn_local = false;
  // HOST:PORT: serve HTTP (OpenAI-compatible) instead of replaying the
  // tenants' streams; overrides [serve] listen.
  std::optional<std::string> listen;
  std::optional<std::string> batch_store;    // overrides [serve] batch_store
  std::optional<double> slo_threshold_s;     // overrides [serve] ttft_slo_s
  std::optional<std::string> chat_template;  // a Jinja file for every model's chat completions
  std::optional<std::string> api_key;        // Bearer key on /v1/* (else SLICESCHED_API_KEY)
};
// Only built with LibTorch (live mode); main says so otherwise.
int serve(const ServeOptions& opt);

// `slicesched executor --listen ADDR --config CONFIG --host NAME`: one
// host's accelerators as a process the scheduler (serve) drives.
struct ExecutorOptions {
  std::string listen, config, host;
};
int executor(const ExecutorOptions& opt);
// `slicesched devices`: the visible CUDA devices (live mode only).
int devices();

// Live mode too (LibTorch): calibration and the live benchmarks.
struct CalibrateOptions {
  std::string config;
  std::string out;                     // the profile to write
  int warmup = 2;                      // untimed runs per shape
  int repeats = 5;                     // timed runs per shape (the median counts)
  bool dry_run = false;                // print the shape grid and stop (no device needed)
  std::optional<std::string> samples;  // also write every measurement as CSV
};
int calibrate(const CalibrateOptions& opt);

struct BenchOverheadOptions {
  std::string config;
  int requests = 1000;                     // prefills of one token each
  int rounds = 3;                          // best of this many, each way
  int lanes = 2;                           // the tenant's iterations in flight
  std::optional<std::string> accelerator;  // default: the config's first
  std::optional<std::string> policy;       // default: the config's first
  bool json = false;
};
int bench_overhead(const BenchOverheadOptions& opt);

struct BenchAccuracyOptions {
  std::string config;
  std::optional<std::string> policy;        // default: the config's first
  std::optional<std::string> profile_out;   // also keep the calibration profile here
  std::optional<std::string> observations;  // also write the live run's measurements and predictions as CSV
  std::optional<std::string> samples;       // also write the calibration's points as CSV (as calibrate --samples)
  std::optional<double> time_scale;         // overrides [live] time_scale (both runs)
  int warmup = 2, repeats = 5;              // calibration, as calibrate
  bool json = false;
};
int bench_accuracy(const BenchAccuracyOptions& opt);

}  // namespace slicesched::cli
