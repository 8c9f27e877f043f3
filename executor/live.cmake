# The live executor (C++20 modules): per-accelerator queues, transfer
# arbitration and memory accounting over an OpRunner. Model runtimes (the
# LibTorch Llama runner) plug in as OpRunners.
add_library(slicesched_executor STATIC)
target_sources(slicesched_executor
  PUBLIC FILE_SET CXX_MODULES FILES
    runner.cppm
    live_cluster.cppm
  PRIVATE
    live_cluster.cpp
)
find_package(Threads REQUIRED)
target_link_libraries(slicesched_executor PUBLIC slicesched_core Threads::Threads)
target_compile_options(slicesched_executor PRIVATE -Wall -Wextra)

# The LibTorch Llama model as an OpRunner (only with LibTorch).
if(SLICESCHED_HAVE_TORCH)
  add_library(slicesched_executor_llama STATIC)
  target_sources(slicesched_executor_llama
    PUBLIC FILE_SET CXX_MODULES FILES llama_runner.cppm
    PRIVATE llama_runner.cpp)
  target_link_libraries(slicesched_executor_llama PUBLIC slicesched_executor slicesched_torch slicesched_models)
  target_compile_options(slicesched_executor_llama PRIVATE -Wall -Wextra)
endif()

# Executors in other processes (executor/remote): the control channel is
# ZeroMQ through cppzmq (Debian: libzmq3-dev, cppzmq-dev). The scheduler's
# side (wire, RemoteRunner) needs no LibTorch; the executor process's
# server runs the LibTorch Llama runner.
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
add_library(slicesched_executor_remote STATIC)
target_sources(slicesched_executor_remote
  PUBLIC FILE_SET CXX_MODULES FILES remote/wire.cppm remote/remote_runner.cppm
  PRIVATE remote/wire.cpp remote/plan_wire.cpp remote/remote_runner.cpp)
target_link_libraries(slicesched_executor_remote PUBLIC slicesched_executor slicesched_models PkgConfig::ZMQ
  PRIVATE nlohmann_json::nlohmann_json)
target_compile_options(slicesched_executor_remote PRIVATE -Wall -Wextra)

if(SLICESCHED_HAVE_TORCH)
  add_library(slicesched_executor_server STATIC)
  target_sources(slicesched_executor_server
    PUBLIC FILE_SET CXX_MODULES FILES remote/executor_server.cppm
    PRIVATE remote/executor_server.cpp)
  target_link_libraries(slicesched_executor_server PUBLIC slicesched_executor_llama slicesched_executor_remote
    PRIVATE nlohmann_json::nlohmann_json)
  target_compile_options(slicesched_executor_server PRIVATE -Wall -Wextra)
endif()
