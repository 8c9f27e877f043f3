// Opens plugin shared libraries (Boost.DLL) and registers what they offer.
//
// A library is kept loaded by everything that came out of it: each registry
// entry and each object created from one holds a reference (see
// PluginDeleter), so it is unloaded only after the last of them is gone,
// whatever order the owners die in.
module;
#include <filesystem>
#include <memory>
#include <string>

export module slicesched.plugins.loader;
import slicesched.core.plugin;

export namespace slicesched {

// Opens the library at `path` (a bare file name means the current directory;
// system folders are not searched), calls its entry point (the alias of
// plugins/plugin_entry.hpp) on fresh registries and moves what it registered
// into `into`, all or nothing. Every error starts with the path:
//   "plugins/libfoo.so: cannot load (<dlopen's reason>)"
//   "plugins/libfoo.so: no symbol 'slicesched_plugin_v1' (is it a SliceScheduler plugin?)"
//   "plugins/libfoo.so: transfer arbiter 'greedy' is already registered"
// On failure nothing is registered and the library is closed again.
// Not thread-safe with respect to `into`: call at startup, from one thread.
Status load_plugin_library(const std::filesystem::path& path, PluginRegistries& into);

// A library of this project's own opened for one entry point (the live
// runtime, cli/live_runtime.hpp): `entry` is the address of its symbol,
// valid while `library` (the open library) lives.
struct OpenedLibrary {
  std::shared_ptr<const void> library;
  void* entry = nullptr;
};

// Opens the library at `path` as load_plugin_library does (every symbol
// bound now, none shared with other libraries) and looks up `symbol`.
// Errors start with the path, as load_plugin_library's: "cannot load
// (<dlopen's reason>)" or "no symbol '<symbol>'". Thread-safe.
Result<OpenedLibrary> open_library(const std::filesystem::path& path, const std::string& symbol);

// The path of the library a plugin object's code lives in, from its
// PluginPtr's deleter (PluginDeleter::library, as load_plugin_library set
// it); empty for a linked-in plugin (a null library).
std::string plugin_library_path(const std::shared_ptr<const void>& library);

}  // namespace slicesched
