// The subcommands of `slicesched`, each in its own file. Plain declarations
// so main.cpp stays a thin CLI11 front end.
#pragma once

#include <cstdint>
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

int demo();

}  // namespace slicesched::cli
