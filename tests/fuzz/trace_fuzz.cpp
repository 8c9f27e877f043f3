// libFuzzer target: the request trace reader (workload/), strict and with
// corrupt lines skipped. It tells Azure CSV from Mooncake JSONL by content,
// so one target covers both; its seeds hold both.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"

import slicesched.workload.trace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = slicesched::fuzz::input_file(data, size, ".trace");
  for (bool skip : {false, true}) {
    auto trace = slicesched::read_trace(path, {.skip_bad_lines = skip});
    if (!trace.ok() && trace.status().message().empty()) __builtin_trap();
  }
  return 0;
}
