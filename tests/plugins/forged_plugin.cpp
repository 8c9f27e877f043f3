// Libraries that look like plugins but are broken in one way each, chosen
// at compile time (FORGED_*): the loader must refuse each with one line
// naming the path, never crash or let an exception escape.
//   FORGED_NULL_HASH:  the interface function returns a null string
//   FORGED_NULL_ENTRY: the right hash, but the entry alias holds null
//   FORGED_THROWS:     a static initialiser throws while the library loads
//   FORGED_FUNC_ENTRY: the right hash, the entry a function written by hand
//   FORGED_DATA_HASH:  the interface hash a string, not a function
#include <stdexcept>

#define SLICESCHED_EXPORT extern "C" __attribute__((visibility("default")))

#if defined(FORGED_NULL_HASH)
SLICESCHED_EXPORT const char* slicesched_plugin_interface() { return nullptr; }
SLICESCHED_EXPORT void* slicesched_plugin_v1 = nullptr;
#elif defined(FORGED_NULL_ENTRY)
SLICESCHED_EXPORT const char* slicesched_plugin_interface() {
  return SLICESCHED_INTERFACE_HASH " " SLICESCHED_SDK_VERSION;
}
SLICESCHED_EXPORT void* slicesched_plugin_v1 = nullptr;
#elif defined(FORGED_FUNC_ENTRY)
SLICESCHED_EXPORT const char* slicesched_plugin_interface() {
  return SLICESCHED_INTERFACE_HASH " " SLICESCHED_SDK_VERSION;
}
SLICESCHED_EXPORT int slicesched_plugin_v1(void*) { return 0; }
#elif defined(FORGED_DATA_HASH)
SLICESCHED_EXPORT const char slicesched_plugin_interface[] = SLICESCHED_INTERFACE_HASH " " SLICESCHED_SDK_VERSION;
SLICESCHED_EXPORT void* slicesched_plugin_v1 = nullptr;
#elif defined(FORGED_THROWS)
namespace {
struct Throws {
  Throws() { throw std::runtime_error("the forged plugin's static initialiser threw"); }
} throws;
}  // namespace
#endif
