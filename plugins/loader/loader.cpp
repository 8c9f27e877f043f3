module;
// plugin_entry.hpp first: it selects std::filesystem for Boost.DLL.
#include "plugin_entry.hpp"
//
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

module slicesched.plugins.loader;

namespace slicesched {

namespace {

// The ELF type of the symbol `name` of `library` (STT_FUNC, STT_OBJECT),
// or -1 where the dynamic linker cannot say: a function called as a
// pointer, or data called as a function, would crash the host.
int symbol_type(boost::dll::shared_library& library, const char* name) {
  void* address = dlsym(library.native(), name);
  Dl_info info;
  void* entry = nullptr;  // the symbol's ElfW(Sym)
  if (!address || dladdr1(address, &info, &entry, RTLD_DL_SYMENT) == 0 || !entry) return -1;
  return ELF64_ST_TYPE(static_cast<const ElfW(Sym)*>(entry)->st_info);
}

// dlopen's own reason; Boost.DLL reports every failure as "Bad file
// descriptor". Boost does not clear dlerror() on this path, so it still
// holds the message. dlerror() prefixes the path, which our message already
// starts with.
std::string load_failure_reason(const std::filesystem::path& path, const std::error_code& ec) {
  const char* raw = dlerror();
  std::string why = raw != nullptr ? raw : ec.message();
  for (const std::string& prefix : {path.string() + ": ", "./" + path.string() + ": "})
    if (why.rfind(prefix, 0) == 0) {
      why = why.substr(prefix.size());
      break;
    }
  // A missing C++ symbol as users wrote it, not mangled.
  const std::string marker = "undefined symbol: ";
  if (const auto at = why.find(marker); at != std::string::npos) {
    const auto start = at + marker.size();
    const auto end = why.find_first_of(" \t,)", start);
    const std::string symbol = why.substr(start, end == std::string::npos ? std::string::npos : end - start);
    int status = 0;
    char* readable = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
    if (status == 0 && readable) why.replace(start, symbol.size(), readable);
    std::free(readable);
  }
  return why;
}

Status at(const std::filesystem::path& path, const Status& s) { return {s.code(), path.string() + ": " + s.message()}; }

// rtld_now: a missing symbol fails here, naming itself, rather than at the
// first call in the middle of a run. rtld_local: libraries cannot bind to
// each other's symbols.
Result<std::shared_ptr<boost::dll::shared_library>> open(const std::filesystem::path& path) {
  namespace dll = boost::dll;
  auto library = std::make_shared<dll::shared_library>();
  std::error_code ec;
  // Loading runs the library's static initialisers (dlopen does, for any
  // library): one that throws is named here rather than unwinding into
  // whatever called the loader.
  try {
    library->load(path, dll::load_mode::rtld_now | dll::load_mode::rtld_local, ec);
  } catch (const std::exception& e) {
    return FailedPrecondition(path.string() + ": cannot load: its static initialisation threw: " + e.what());
  } catch (...) {
    return FailedPrecondition(path.string() + ": cannot load: its static initialisation threw");
  }
  if (ec || !library->is_loaded())
    return NotFound(path.string() + ": cannot load (" + load_failure_reason(path, ec) + ")");
  return library;
}

}  // namespace

Result<OpenedLibrary> open_library(const std::filesystem::path& path, const std::string& symbol) {
  auto library = open(path);
  if (!library.ok()) return library.status();
  void* entry = dlsym((*library)->native(), symbol.c_str());
  if (entry == nullptr) return NotFound(path.string() + ": no symbol '" + symbol + "'");
  return OpenedLibrary{std::shared_ptr<const void>(*library), entry};
}

Status load_plugin_library(const std::filesystem::path& path, PluginRegistries& into) {
  // Declared before everything that may hold code from the library (the
  // staged factories), so it is closed last on every path out.
  auto opened = open(path);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<boost::dll::shared_library> library = *opened;
  if (!library->has(SLICESCHED_PLUGIN_ENTRY_SYMBOL))
    return NotFound(path.string() + ": no symbol '" SLICESCHED_PLUGIN_ENTRY_SYMBOL
                                    "' (is it a SliceScheduler plugin?)");
  // Built against this SDK's interfaces, or refused before any of its
  // code runs: a plugin compiled against another Outcome or Gmg would read
  // the host's objects with the wrong layout.
  const std::string ours = SLICESCHED_INTERFACE_HASH " " SLICESCHED_SDK_VERSION;
  if (!library->has(SLICESCHED_PLUGIN_INTERFACE_SYMBOL))
    return FailedPrecondition(path.string() + ": carries no interface hash (built against an SDK older than " +
                              SLICESCHED_SDK_VERSION + "?); this slicesched has interface hash " +
                              SLICESCHED_INTERFACE_HASH + ": rebuild the plugin against its SDK");
  if (const int type = symbol_type(*library, SLICESCHED_PLUGIN_INTERFACE_SYMBOL); type >= 0 && type != STT_FUNC)
    return FailedPrecondition(path.string() + ": '" SLICESCHED_PLUGIN_INTERFACE_SYMBOL
                                              "' is not a function (not built with SLICESCHED_PLUGIN_ENTRY?); "
                                              "rebuild the plugin against this SDK");
  const char* raw = library->get<const char*()>(SLICESCHED_PLUGIN_INTERFACE_SYMBOL)();
  if (raw == nullptr)
    return FailedPrecondition(path.string() +
                              ": its interface hash is null (not built with SLICESCHED_PLUGIN_ENTRY?); "
                              "rebuild the plugin against this SDK");
  const std::string theirs = raw;
  if (theirs != ours) {
    const auto space = theirs.find(' ');
    const std::string hash = theirs.substr(0, space);
    const std::string version = space == std::string::npos ? "unknown" : theirs.substr(space + 1);
    return FailedPrecondition(path.string() + ": built against SDK " + version + " with interface hash " + hash +
                              ", but this slicesched is SDK " + SLICESCHED_SDK_VERSION + " with interface hash " +
                              SLICESCHED_INTERFACE_HASH + ": rebuild the plugin against this SDK");
  }
  // The alias is a variable holding the entry's address (Boost.DLL's
  // alias): read it as such, so a null one is refused, not called, and a
  // function exported under its name by hand is refused, not read.
  if (const int type = symbol_type(*library, SLICESCHED_PLUGIN_ENTRY_SYMBOL); type == STT_FUNC)
    return FailedPrecondition(path.string() + ": '" SLICESCHED_PLUGIN_ENTRY_SYMBOL
                                              "' is a function, not the variable SLICESCHED_PLUGIN_ENTRY(fn) "
                                              "exports; register with SLICESCHED_PLUGIN_ENTRY");
  PluginEntry* entry = library->get<PluginEntry*>(SLICESCHED_PLUGIN_ENTRY_SYMBOL);
  if (entry == nullptr)
    return FailedPrecondition(path.string() + ": '" SLICESCHED_PLUGIN_ENTRY_SYMBOL
                                              "' points nowhere (not built with SLICESCHED_PLUGIN_ENTRY?)");

  PluginRegistries staged;
  Status registered;
  try {
    registered = (*entry)(staged);
  } catch (const std::exception& e) {
    return FailedPrecondition(path.string() + ": " SLICESCHED_PLUGIN_ENTRY_SYMBOL " threw: " + e.what());
  } catch (...) {
    return FailedPrecondition(path.string() + ": " SLICESCHED_PLUGIN_ENTRY_SYMBOL " threw a non-standard exception");
  }
  if (!registered.ok()) return at(path, registered);
  if (Status s = into.adopt(std::move(staged), std::shared_ptr<const void>(library)); !s.ok()) return at(path, s);
  return Status::Ok();
}

std::string plugin_library_path(const std::shared_ptr<const void>& library) {
  if (!library) return {};
  // load_plugin_library is the only one to set a library, and it is always
  // a boost::dll::shared_library.
  const auto* lib = static_cast<const boost::dll::shared_library*>(library.get());
  std::error_code ec;
  const auto path = lib->location(ec);
  return ec ? std::string() : path.string();
}

}  // namespace slicesched
