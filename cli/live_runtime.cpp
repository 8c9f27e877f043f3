// Finding and opening the live runtime (cli/live_runtime.hpp).
#include "live_runtime.hpp"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

import slicesched.plugins.loader;

namespace slicesched::cli {

namespace {

std::filesystem::path library_path() {
  if (const char* env = std::getenv("SLICESCHED_LIVE_LIBRARY"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto bin = ec ? std::filesystem::current_path() : self.parent_path();
  return bin.parent_path() / "lib" / "libslicesched_live.so";
}

}  // namespace

const LiveCommands* live_commands(std::string& error) {
  // Opened once and never closed: LibTorch and CUDA do not unload cleanly,
  // and the process ends with the command anyway.
  static std::shared_ptr<const void> library;
  static const LiveCommands* table = nullptr;
  if (table != nullptr) return table;
  const auto path = library_path();
  auto opened = open_library(path, kLiveEntrySymbol);
  if (!opened.ok()) {
    error = "live mode needs the live runtime, " + opened.status().message() +
            "; it is built beside slicesched where LibTorch is found (scripts/setup.sh, then make build), or "
            "set SLICESCHED_LIVE_LIBRARY to its path";
    return nullptr;
  }
  const LiveCommands* found = reinterpret_cast<LiveEntry*>(opened->entry)();
  if (found == nullptr || found->stamp == nullptr || std::strcmp(found->stamp, SLICESCHED_LIVE_STAMP) != 0) {
    error = path.string() + ": built from another slicesched (live runtime stamp " +
            (found && found->stamp ? found->stamp : "none") + ", this binary's " + SLICESCHED_LIVE_STAMP +
            "); use the library built with this binary";
    return nullptr;
  }
  library = opened->library;
  table = found;
  return table;
}

}  // namespace slicesched::cli
