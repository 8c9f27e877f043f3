// libslicesched_live.so's entry point (cli/live_runtime.hpp): the table of
// live commands, stamped with the commands.hpp it was built against.
#include "live_runtime.hpp"

extern "C" __attribute__((visibility("default"))) const slicesched::cli::LiveCommands* slicesched_live_v1() {
  using namespace slicesched::cli;
  static const LiveCommands table{SLICESCHED_LIVE_STAMP, &serve,         &executor, &devices, &calibrate,
                                  &bench_overhead,       &bench_accuracy};
  return &table;
}
