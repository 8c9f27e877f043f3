// A shared library that exports something, but not the plugin entry point:
// the loader must say so, naming the path and the symbol.
extern "C" __attribute__((visibility("default"))) int slicesched_not_a_plugin() { return 42; }
