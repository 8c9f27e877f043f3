// libFuzzer target: a safetensors file as `[[models]] checkpoint = "DIR"`
// maps and parses it (executor/torch/checkpoint.cpp): the 8-byte header
// length, the JSON header, the offsets into the data. A bad file is one
// std::invalid_argument with a message; anything else (another exception,
// a crash, a read past the mapping under ASan) is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "executor/torch/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A checkpoint is a directory holding model.safetensors.
  static const std::string dir = [] {
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    const auto d = base / ("slicesched_fuzz_ckpt_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  std::ofstream(dir + "/model.safetensors", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    auto ck = slicesched::rt::ckpt::Checkpoint::open(dir);
    // Touch every byte a view claims: ASan catches a view past the mapping.
    std::uint64_t sum = 0;
    for (const auto& [name, t] : ck->tensors())
      for (std::size_t i = 0; i < t.bytes; ++i) sum += static_cast<const std::uint8_t*>(t.data)[i];
    (void)sum;
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).empty()) __builtin_trap();
  }
  return 0;
}
