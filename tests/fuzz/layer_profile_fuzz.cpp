// libFuzzer target: the LLMServingSim per-layer latency CSV
// (simulator/profile.cpp, LayerProfile::parse), at TP 1 and 2.
#include <cstddef>
#include <cstdint>
#include <string_view>

import slicesched.simulator.profile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view csv(reinterpret_cast<const char*>(data), size);
  for (int tp : {1, 2}) {
    auto profile = slicesched::LayerProfile::parse(csv, "fuzz", tp);
    if (!profile.ok() && profile.status().message().empty()) __builtin_trap();
  }
  return 0;
}
