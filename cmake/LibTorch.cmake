# LibTorch 2 from the project's virtual environment: the official binary
# LibTorch inside the pinned PyPI torch wheel (scripts/setup.sh installs it
# into .venv), one build for CPU and CUDA, with NCCL. No system LibTorch and
# no CUDA toolkit are needed: the wheel's nvidia-* dependencies carry the CUDA
# runtime and NCCL, headers included.
#
# Why not find_package(Torch) on torch.utils.cmake_prefix_path (that is
# <torch>/share/cmake): tried on the development machine, TorchConfig.cmake
# found Debian's /usr/lib/libtorch.so before the wheel's, and its Caffe2
# cuda.cmake took the machine's CUDA toolkit (13.0, not the wheel's 13.2) and
# looks for one a user may not have. Naming the wheel's files directly keeps
# the build on exactly the pinned LibTorch.
#
# In: SLICESCHED_TORCH_ROOT (cache): the torch package folder
#     (site-packages/torch); empty = ask .venv's python where torch is.
#     SLICESCHED_NVIDIA_ROOT (cache): site-packages/nvidia; empty = beside torch.
# Out: SLICESCHED_HAVE_TORCH (cache, internal), and the imported targets
#     slicesched::libtorch (ATen/c10 headers and libraries, CPU and CUDA),
#     slicesched::cudart (CUDA runtime) and slicesched::nccl.
set(SLICESCHED_TORCH_ROOT "" CACHE PATH "torch package folder (site-packages/torch); empty: the one in .venv")
set(SLICESCHED_NVIDIA_ROOT "" CACHE PATH "site-packages/nvidia of that torch; empty: beside it")

set(_torch_root "${SLICESCHED_TORCH_ROOT}")
if(NOT _torch_root AND EXISTS "${PROJECT_SOURCE_DIR}/.venv/bin/python3")
  # find_spec locates the package without importing it (importing torch
  # takes seconds); the result is what torch.utils.cmake_prefix_path/../..
  execute_process(
    COMMAND "${PROJECT_SOURCE_DIR}/.venv/bin/python3" -c
            "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])"
    OUTPUT_VARIABLE _torch_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()

set(_torch_libs torch torch_cpu c10 torch_cuda c10_cuda)
set(_torch_ok OFF)
if(_torch_root AND EXISTS "${_torch_root}/include/ATen/ATen.h")
  set(_torch_ok ON)
  foreach(l IN LISTS _torch_libs)
    if(NOT EXISTS "${_torch_root}/lib/lib${l}.so")
      set(_torch_ok OFF)
    endif()
  endforeach()
endif()

if(NOT _torch_ok)
  set(SLICESCHED_HAVE_TORCH OFF CACHE INTERNAL "LibTorch found: live mode is built")
  message(STATUS "SliceScheduler: LibTorch not found (run scripts/setup.sh, or set SLICESCHED_TORCH_ROOT); "
                 "live mode is skipped")
  return()
endif()

set(_nvidia "${SLICESCHED_NVIDIA_ROOT}")
if(NOT _nvidia)
  get_filename_component(_nvidia "${_torch_root}/../nvidia" ABSOLUTE)
endif()
foreach(f cu13/include/cuda_runtime_api.h cu13/lib/libcudart.so.13 nccl/include/nccl.h nccl/lib/libnccl.so.2)
  if(NOT EXISTS "${_nvidia}/${f}")
    message(FATAL_ERROR "SliceScheduler: LibTorch at ${_torch_root} is a CUDA build but ${_nvidia}/${f} is missing; "
                        "reinstall torch with its dependencies (scripts/setup.sh), or set SLICESCHED_NVIDIA_ROOT")
  endif()
endforeach()

add_library(slicesched::libtorch INTERFACE IMPORTED)
# The wheels are built with the C++11 ABI of libstdc++ (std::string as clang
# and g++ build it by default); saying so keeps a mismatch from linking.
target_compile_definitions(slicesched::libtorch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
target_include_directories(slicesched::libtorch SYSTEM INTERFACE "${_torch_root}/include"
                                                                 "${_torch_root}/include/torch/csrc/api/include")
set(_torch_files)
foreach(l IN LISTS _torch_libs)
  list(APPEND _torch_files "${_torch_root}/lib/lib${l}.so")
endforeach()
# --no-as-needed: libtorch_cuda registers the CUDA backend from its static
# initialisers; without it, code that only names generic devices would drop
# the library and CUDA would look absent.
target_link_libraries(slicesched::libtorch INTERFACE "-Wl,--no-as-needed" ${_torch_files} "-Wl,--as-needed"
                                                     "-Wl,-rpath,${_torch_root}/lib")

add_library(slicesched::cudart INTERFACE IMPORTED)
target_include_directories(slicesched::cudart SYSTEM INTERFACE "${_nvidia}/cu13/include")
target_link_libraries(slicesched::cudart INTERFACE "${_nvidia}/cu13/lib/libcudart.so.13"
                                                   "-Wl,-rpath,${_nvidia}/cu13/lib")

add_library(slicesched::nccl INTERFACE IMPORTED)
target_include_directories(slicesched::nccl SYSTEM INTERFACE "${_nvidia}/nccl/include")
target_link_libraries(slicesched::nccl INTERFACE "${_nvidia}/nccl/lib/libnccl.so.2" "-Wl,-rpath,${_nvidia}/nccl/lib")

set(SLICESCHED_HAVE_TORCH ON CACHE INTERNAL "LibTorch found: live mode is built")
set(SLICESCHED_TORCH_FOUND_AT "${_torch_root}" CACHE INTERNAL "the LibTorch in use")
# Where an installed binary finds LibTorch and the CUDA runtime and NCCL it
# loads (cmake/Install.cmake keeps them in its RUNPATH).
set(SLICESCHED_TORCH_RPATH "${_torch_root}/lib;${_nvidia}/cu13/lib;${_nvidia}/nccl/lib" CACHE INTERNAL
    "the run-time library folders of the LibTorch in use")
message(STATUS "SliceScheduler: LibTorch at ${_torch_root}, CUDA runtime and NCCL at ${_nvidia}")
