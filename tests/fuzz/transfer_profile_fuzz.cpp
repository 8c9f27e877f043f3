// libFuzzer target: the Vidur send/recv latency CSV (simulator/profile.cpp,
// TransferProfile::parse), within a node and across nodes.
#include <cstddef>
#include <cstdint>
#include <string_view>

import slicesched.simulator.profile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view csv(reinterpret_cast<const char*>(data), size);
  for (bool within : {true, false}) {
    auto profile = slicesched::TransferProfile::parse(csv, "fuzz", within);
    if (!profile.ok() && profile.status().message().empty()) __builtin_trap();
  }
  return 0;
}
