// The live runtime: the commands that drive LibTorch (serve, executor,
// devices, calibrate, bench overhead, bench accuracy) live in their own
// shared library, libslicesched_live.so, so that the offline commands never
// map LibTorch, CUDA or Python. `slicesched` opens it on demand through the
// project's Boost.DLL loader (plugins/loader) when one of those commands
// runs.
//
// The table crosses the library boundary by value of plain function
// pointers over the option structs of commands.hpp, so both sides must be
// built from the same commands.hpp: `stamp` is a hash of it (and of this
// file) that CMake computes at configure time, and a library whose stamp is
// not the binary's is refused.
#pragma once

#include "commands.hpp"

namespace slicesched::cli {

struct LiveCommands {
  const char* stamp;
  int (*serve)(const ServeOptions&);
  int (*executor)(const ExecutorOptions&);
  int (*devices)();
  int (*calibrate)(const CalibrateOptions&);
  int (*bench_overhead)(const BenchOverheadOptions&);
  int (*bench_accuracy)(const BenchAccuracyOptions&);
};

// The library's one exported symbol: `const LiveCommands* slicesched_live_v1()`.
inline constexpr const char* kLiveEntrySymbol = "slicesched_live_v1";
using LiveEntry = const LiveCommands*();

// The live commands, loading the library on the first call (from
// $SLICESCHED_LIVE_LIBRARY, else ../lib/libslicesched_live.so beside this
// binary) and keeping it loaded until exit. On failure, the one line main
// prints, saying what is missing and how to get it. Call from main's
// thread.
const LiveCommands* live_commands(std::string& error);

}  // namespace slicesched::cli
