// A shared library that needs a C++ function nobody defines: dlopen with
// RTLD_NOW fails, and the loader must name the function as written, not
// its mangled symbol.
void slicesched_test_missing(int);

extern "C" __attribute__((visibility("default"))) void slicesched_test_calls_missing() { slicesched_test_missing(1); }
