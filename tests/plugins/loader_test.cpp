#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

import slicesched.plugins.loader;
import slicesched.plugins.builtin;
import slicesched.core.plugin;
import slicesched.core.status;

using namespace slicesched;

namespace {

const std::string kGreedy = SLICESCHED_TEST_GREEDY_PLUGIN;

// Whether the dynamic loader still has `path` open (RTLD_NOLOAD opens
// nothing new; the reference it returns is given straight back).
bool is_loaded(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

std::vector<std::string> all_plugin_files() {
  std::vector<std::string> out;
  std::stringstream list(SLICESCHED_TEST_ALL_PLUGINS);
  for (std::string path; std::getline(list, path, ',');) out.push_back(path);
  return out;
}

}  // namespace

TEST_CASE("the loader opens real plugin libraries and keeps them alive while used", "[plugins][loader]") {
  REQUIRE_FALSE(is_loaded(kGreedy));

  SECTION("create, use, outlive the registries, destroy, unload") {
    PluginPtr<TransferArbiter> arbiter;
    {
      PluginRegistries regs;
      REQUIRE(load_plugin_library(kGreedy, regs).ok());
      CHECK(is_loaded(kGreedy));
      CHECK(regs.arbiter.names() == std::vector<std::string>{"greedy"});
      CHECK(regs.arbiter.create("fifo").status().message() == "unknown transfer arbiter 'fifo' (available: greedy)");
      auto made = regs.arbiter.create("greedy");
      REQUIRE(made.ok());
      arbiter = std::move(made).value();
    }
    CHECK(is_loaded(kGreedy));  // the object holds the library
    const std::vector<TransferIntent> pending = {{1, 0, 1, 10}, {2, 0, 2, 5}, {3, 2, 3, 7}};
    const std::vector<std::uint8_t> idle(4, 0);
    std::vector<std::size_t> out;
    arbiter->select(pending, idle, idle, out);
    CHECK(out == std::vector<std::size_t>{1, 2});
    arbiter.reset();
    CHECK_FALSE(is_loaded(kGreedy));
  }

  SECTION("a name clash registers nothing and closes the library") {
    PluginRegistries regs;
    REQUIRE(plugins::register_builtins(regs).ok());
    Status s = load_plugin_library(kGreedy, regs);
    CHECK(s.code() == StatusCode::kAlreadyExists);
    CHECK(s.message() == kGreedy + ": transfer arbiter 'greedy' is already registered");
    CHECK_FALSE(is_loaded(kGreedy));
  }

  SECTION("every built-in library registers what its static twin does") {
    PluginRegistries loaded, linked;
    for (const std::string& path : all_plugin_files()) {
      INFO(path);
      REQUIRE(load_plugin_library(path, loaded).ok());
    }
    REQUIRE(plugins::register_builtins(linked).ok());
    CHECK(loaded.partition.names() == linked.partition.names());
    CHECK(loaded.placement.names() == linked.placement.names());
    CHECK(loaded.estimator.names() == linked.estimator.names());
    CHECK(loaded.arbiter.names() == linked.arbiter.names());
    CHECK(loaded.filter.names() == linked.filter.names());
    CHECK(loaded.score.names() == linked.score.names());
    auto est = loaded.estimator.create("online-linear");
    REQUIRE(est.ok());
    CHECK((*est)->linear() != nullptr);
  }
}

TEST_CASE("loader errors name the path and the symbol", "[plugins][loader]") {
  PluginRegistries regs;
  const std::string missing = "/nonexistent/libslicesched_nope.so";
  Status s = load_plugin_library(missing, regs);
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message() == missing + ": cannot load (cannot open shared object file: No such file or directory)");

  // dlopen's own reason, not Boost.DLL's generic "Bad file descriptor".
  const std::filesystem::path text = std::filesystem::temp_directory_path() / "slicesched_loader_test_text.so";
  std::ofstream(text) << std::string(128, 'x');
  s = load_plugin_library(text, regs);
  std::filesystem::remove(text);
  CHECK(s.message() == text.string() + ": cannot load (invalid ELF header)");

  const std::string not_a_plugin = SLICESCHED_TEST_NOT_A_PLUGIN;
  s = load_plugin_library(not_a_plugin, regs);
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message() == not_a_plugin + ": no symbol 'slicesched_plugin_v1' (is it a SliceScheduler plugin?)");
  CHECK_FALSE(is_loaded(not_a_plugin));
  CHECK(regs.arbiter.names().empty());
}

TEST_CASE("forged plugins are refused in one line, none crashes or throws", "[plugins][loader]") {
  struct Row {
    std::string path, want;
  };
  const std::string null_hash = SLICESCHED_TEST_FORGED_NULL_HASH, null_entry = SLICESCHED_TEST_FORGED_NULL_ENTRY,
                    throws = SLICESCHED_TEST_FORGED_THROWS, func_entry = SLICESCHED_TEST_FORGED_FUNC_ENTRY,
                    data_hash = SLICESCHED_TEST_FORGED_DATA_HASH;
  for (const Row& row : std::vector<Row>{
           {null_hash, null_hash + ": its interface hash is null (not built with SLICESCHED_PLUGIN_ENTRY?); rebuild "
                                   "the plugin against this SDK"},
           {null_entry,
            null_entry + ": 'slicesched_plugin_v1' points nowhere (not built with SLICESCHED_PLUGIN_ENTRY?)"},
           {throws, throws + ": cannot load: its static initialisation threw: the forged plugin's static "
                             "initialiser threw"},
           // Each crashed the host (a function's code read as a pointer, a
           // string called).
           {func_entry, func_entry + ": 'slicesched_plugin_v1' is a function, not the variable "
                                     "SLICESCHED_PLUGIN_ENTRY(fn) exports; register with SLICESCHED_PLUGIN_ENTRY"},
           {data_hash, data_hash + ": 'slicesched_plugin_interface' is not a function (not built with "
                                   "SLICESCHED_PLUGIN_ENTRY?); rebuild the plugin against this SDK"}}) {
    INFO(row.path);
    PluginRegistries regs;
    const Status s = load_plugin_library(row.path, regs);
    CHECK(s.message() == row.want);
    CHECK(regs.arbiter.names().empty());
  }
}

TEST_CASE("a plugin built against another SDK interface is refused, naming both hashes", "[plugins][loader][sdk]") {
  PluginRegistries regs;
  const std::string other = SLICESCHED_TEST_OTHER_SDK;
  const std::string ours = SLICESCHED_TEST_INTERFACE_HASH;
  REQUIRE(ours.size() == 16);
  REQUIRE(ours != "0123456789abcdef");
  const Status s = load_plugin_library(other, regs);
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message() ==
        other + ": built against SDK 0.0.9 with interface hash 0123456789abcdef, but this slicesched is SDK " +
            SLICESCHED_SDK_VERSION_FOR_TEST + " with interface hash " + ours + ": rebuild the plugin against this SDK");
  // Refused before it registered anything.
  CHECK(regs.placement.names().empty());
  CHECK(regs.partition.names().empty());
}

TEST_CASE("a missing C++ symbol is named as written, not mangled", "[plugins][loader]") {
  PluginRegistries regs;
  const std::string lib = SLICESCHED_TEST_MISSING_SYMBOL;
  const Status s = load_plugin_library(lib, regs);
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(s.message() == lib + ": cannot load (undefined symbol: slicesched_test_missing(int))");
}
