// libFuzzer target: a calibration profile (JSON) as `[estimators] prior`
// and `slicesched calibrate` read it (core/calibration.cpp).
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"

import slicesched.core.calibration;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto profile = slicesched::read_calibration(slicesched::fuzz::input_file(data, size, ".json"));
  if (!profile.ok() && profile.status().message().empty()) __builtin_trap();
  return 0;
}
