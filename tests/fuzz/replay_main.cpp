// A fuzz target without libFuzzer: runs LLVMFuzzerTestOneInput once on each
// input named, as `fuzzer FILE...` would, so the suite (and its sanitizer
// build) replays the kept regression inputs and the seeds on every run
// without a third, coverage-instrumented build. Exploring new inputs is
// `make fuzz` (scripts/fuzz.sh).
//
// Usage: TARGET_replay [--ext .a,.b] PATH...
//   A file is replayed whole. A folder is walked (sorted, recursively) and
//   its regular files replayed, only those ending in one of --ext's
//   suffixes when given. A path that does not exist is an error, so a moved
//   seed folder fails the test instead of replaying nothing.
// Exit 0 after the last input; a crash or sanitizer report ends it earlier.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_suffixes(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (auto part = list.substr(0, comma); !part.empty()) out.emplace_back(part);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

bool wanted(const fs::path& p, const std::vector<std::string>& suffixes) {
  if (suffixes.empty()) return true;
  const std::string name = p.filename().string();
  return std::any_of(suffixes.begin(), suffixes.end(), [&](const std::string& s) { return name.ends_with(s); });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> suffixes;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--ext") {
      if (i + 1 == argc) {
        std::fprintf(stderr, "replay: --ext needs a list of suffixes (e.g. .toml,.json)\n");
        return 2;
      }
      suffixes = split_suffixes(argv[++i]);
      continue;
    }
    const fs::path path(arg);
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      inputs.push_back(path);
    } else if (fs::is_directory(path, ec)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::recursive_directory_iterator(path, ec))
        if (entry.is_regular_file() && wanted(entry.path(), suffixes)) found.push_back(entry.path());
      std::sort(found.begin(), found.end());
      inputs.insert(inputs.end(), found.begin(), found.end());
    } else {
      std::fprintf(stderr, "replay: %s: no such file or folder\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs (give files or folders that hold some)\n");
    return 2;
  }
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: %s: could not be read\n", p.c_str());
      return 2;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
