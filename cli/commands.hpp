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
};
int bench_scheduler(const BenchSchedulerOptions& opt);

int demo();

struct SimulateOptions {
  std::string config;
  std::optional<std::string> policy;  // run only this policy
  std::optional<std::string> out;     // write summary.json, CSVs, traces and plots here
  std::optional<std::uint64_t> seed;  // overrides the config's seed
  double trace_seconds = 60;          // Chrome traces cover the first this many simulated seconds
  bool skip_bad_lines = false;        // skip (and count) corrupt trace lines in every trace stream
};
int simulate(const SimulateOptions& opt);

}  // namespace slicesched::cli
