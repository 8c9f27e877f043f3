// libFuzzer target: the TOML experiment config (config/config.cpp), as
// `slicesched simulate` reads it. Any input must give a config or one error;
// files it names are looked up next to it and are normally absent.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"

import slicesched.config;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto cfg = slicesched::load_config(slicesched::fuzz::input_file(data, size, ".toml"));
  if (!cfg.ok() && cfg.status().message().empty()) __builtin_trap();  // an error must say what
  return 0;
}
