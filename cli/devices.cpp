// `slicesched devices`: the CUDA devices this process sees, as live mode
// will use them (what `cuda:N` in a config names), with the CUDA and NCCL
// versions in use. "no CUDA device is visible" (exit 0) where there is none.
#include <cstdint>
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "executor/torch/cuda.h"

namespace slicesched::cli {

int devices() {
  const auto ds = rt::cuda::devices();
  if (ds.empty()) {
    std::printf("no CUDA device is visible\n");
    return 0;
  }
  std::printf("%s\n", rt::cuda::versions().c_str());
  auto gib = [](std::int64_t b) { return static_cast<double>(b) / (1ll << 30); };
  for (const auto& d : ds)
    std::printf("cuda:%d  %s  sm_%d%d  %d SMs  %.1f GiB free of %.1f GiB\n", d.index, d.name.c_str(), d.major, d.minor,
                d.multiprocessors, gib(d.free_bytes), gib(d.total_bytes));
  return 0;
}

}  // namespace slicesched::cli
