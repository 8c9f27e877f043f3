// The one symbol every SliceScheduler plugin library exports. A plugin's
// entry-point translation unit writes, after its includes and imports:
//
//   namespace {
//   slicesched::Status register_all(slicesched::PluginRegistries& r) { ... }
//   }  // namespace
//   SLICESCHED_PLUGIN_ENTRY(register_all)
//
// at global scope. Only the loadable (MODULE) target may hold this line: the
// alias is a weak symbol, so two entry points linked into one library would
// silently collapse into one and the other's plugins would never register.
//
// The name carries the interface version: bump it when slicesched.core.plugin
// changes incompatibly, and old libraries then fail with "no symbol".
//
// Beside it the library exports its interface hash and SDK version
// (slicesched_plugin_interface(): "<hash> <version>"): the hash of the SDK
// interfaces it was compiled against (cmake/SliceSchedulerHash.cmake),
// which slicesched_add_plugin() computes and passes as
// SLICESCHED_INTERFACE_HASH and SLICESCHED_SDK_VERSION. The loader refuses
// a library whose hash is not the host's, naming both hashes and versions:
// an SDK copy that differs in one declaration is caught, not loaded.
#pragma once

// Boost.DLL on std::filesystem, so neither the loader nor plugins need
// Boost.Filesystem.
#ifndef BOOST_DLL_USE_STD_FS
#define BOOST_DLL_USE_STD_FS
#endif
#include <boost/dll/alias.hpp>
#include <type_traits>

#define SLICESCHED_PLUGIN_ENTRY_SYMBOL "slicesched_plugin_v1"
#define SLICESCHED_PLUGIN_INTERFACE_SYMBOL "slicesched_plugin_interface"

#if !defined(SLICESCHED_INTERFACE_HASH) || !defined(SLICESCHED_SDK_VERSION)
#error \
    "SLICESCHED_INTERFACE_HASH and SLICESCHED_SDK_VERSION are not defined: build plugins with slicesched_add_plugin() (find_package(SliceScheduler)), which computes them from the SDK"
#endif

// The static_assert turns a wrong signature into a compile error instead of
// undefined behaviour at load time (the alias erases the type).
#define SLICESCHED_PLUGIN_ENTRY(fn)                                                        \
  static_assert(std::is_same_v<decltype(&fn), ::slicesched::PluginEntry*>,                 \
                "a SliceScheduler plugin entry is Status(slicesched::PluginRegistries&)"); \
  BOOST_DLL_ALIAS(fn, slicesched_plugin_v1)                                                \
  extern "C" BOOST_SYMBOL_EXPORT const char* slicesched_plugin_interface() {               \
    return SLICESCHED_INTERFACE_HASH " " SLICESCHED_SDK_VERSION;                           \
  }
