module;
// plugin_entry.hpp first: it selects std::filesystem for Boost.DLL.
#include "plugin_entry.hpp"
//
#include <dlfcn.h>

#include <boost/dll/shared_library.hpp>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

module slicesched.plugins.loader;

namespace slicesched {

namespace {

// dlopen's own reason; Boost.DLL reports every failure as "Bad file
// descriptor". Boost does not clear dlerror() on this path, so it still
// holds the message. dlerror() prefixes the path, which our message already
// starts with.
std::string load_failure_reason(const std::filesystem::path& path, const std::error_code& ec) {
  const char* raw = dlerror();
  std::string why = raw != nullptr ? raw : ec.message();
  for (const std::string& prefix : {path.string() + ": ", "./" + path.string() + ": "})
    if (why.rfind(prefix, 0) == 0) return why.substr(prefix.size());
  return why;
}

Status at(const std::filesystem::path& path, const Status& s) { return {s.code(), path.string() + ": " + s.message()}; }

}  // namespace

Status load_plugin_library(const std::filesystem::path& path, PluginRegistries& into) {
  namespace dll = boost::dll;
  // Declared before everything that may hold code from the library (the
  // staged factories), so it is closed last on every path out.
  auto library = std::make_shared<dll::shared_library>();
  std::error_code ec;
  // rtld_now: a missing symbol fails here, naming itself, rather than at
  // the first call in the middle of a run. rtld_local: plugins cannot bind
  // to each other's symbols.
  library->load(path, dll::load_mode::rtld_now | dll::load_mode::rtld_local, ec);
  if (ec || !library->is_loaded())
    return NotFound(path.string() + ": cannot load (" + load_failure_reason(path, ec) + ")");
  if (!library->has(SLICESCHED_PLUGIN_ENTRY_SYMBOL))
    return NotFound(path.string() + ": no symbol '" SLICESCHED_PLUGIN_ENTRY_SYMBOL
                                    "' (is it a SliceScheduler plugin?)");
  auto& entry = library->get_alias<PluginEntry>(SLICESCHED_PLUGIN_ENTRY_SYMBOL);

  PluginRegistries staged;
  Status registered;
  try {
    registered = entry(staged);
  } catch (const std::exception& e) {
    return FailedPrecondition(path.string() + ": " SLICESCHED_PLUGIN_ENTRY_SYMBOL " threw: " + e.what());
  } catch (...) {
    return FailedPrecondition(path.string() + ": " SLICESCHED_PLUGIN_ENTRY_SYMBOL " threw a non-standard exception");
  }
  if (!registered.ok()) return at(path, registered);
  if (Status s = into.adopt(std::move(staged), std::shared_ptr<const void>(library)); !s.ok()) return at(path, s);
  return Status::Ok();
}

}  // namespace slicesched
