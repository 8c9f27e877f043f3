// Shared by the fuzz targets: parsers that read a file get the input as one.
// The file lives in /dev/shm when it exists (no disk I/O per execution),
// named after the process, so parallel fuzzers do not collide.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace slicesched::fuzz {

inline std::string input_file(const std::uint8_t* data, std::size_t size, const char* extension) {
  static const std::string dir = std::filesystem::is_directory("/dev/shm")
                                     ? std::string("/dev/shm")
                                     : std::filesystem::temp_directory_path().string();
  const std::string path = dir + "/slicesched_fuzz_" + std::to_string(getpid()) + extension;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace slicesched::fuzz
