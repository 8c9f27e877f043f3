# The SDK: `cmake --install build --prefix <dir>` gives plugin authors
# `find_package(SliceScheduler)` with
#   SliceScheduler::core       the core's static library and its module
#                              interface sources (not BMIs: the consumer's
#                              compiler rebuilds them, so they always match
#                              its flags)
#   <slicesched/plugin_entry.hpp>  SLICESCHED_PLUGIN_ENTRY
#   slicesched_add_plugin()    a loadable plugin library with the built-ins'
#                              flags (cmake/SliceSchedulerPlugin.cmake)
# and the `slicesched` binary in bin/ with its data in share/slicescheduler/.
# docs/plugins.md walks through it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SLICESCHED_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/SliceScheduler)

# Export-only properties: the build tree already compiles everything as C++20.
set_target_properties(slicesched_core PROPERTIES EXPORT_NAME core)
target_compile_features(slicesched_core PUBLIC cxx_std_20)

# install(TARGETS slicesched_core ...) is in core/CMakeLists.txt: CMake
# records where a module file set is installed only from the directory that
# defines the target (elsewhere the export names the source tree's files).
install(FILES ${PROJECT_SOURCE_DIR}/plugins/plugin_entry.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/slicesched)
# The installed live runtime finds LibTorch, the CUDA runtime and NCCL where
# the build found them (they live in .venv, inside the source tree, which
# CMake would otherwise strip from an installed RUNPATH); the CLI opens it
# from ../lib (cli/live_runtime.cpp), so it goes to lib/ whatever LIBDIR is.
install(TARGETS slicesched RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(SLICESCHED_HAVE_TORCH)
  set_target_properties(slicesched_live PROPERTIES INSTALL_RPATH "${SLICESCHED_TORCH_RPATH}")
  install(TARGETS slicesched_live LIBRARY DESTINATION lib)
endif()

# The data the CLI ships with: accelerator type tables and fits, and the
# published measurements `validate` replays (credited in NOTICE). The CLI
# finds them beside its bin/ (config/accelerators.cpp), so share/ whatever
# DATADIR is, and an installed CLI never reads the source tree.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/accelerators/ DESTINATION share/slicescheduler/accelerators
  FILES_MATCHING PATTERN "*.toml")
install(FILES ${PROJECT_SOURCE_DIR}/data/validation/trtllm_a100.csv DESTINATION share/slicescheduler/validation)
install(FILES ${PROJECT_SOURCE_DIR}/NOTICE DESTINATION share/slicescheduler)

install(EXPORT SliceSchedulerTargets
  NAMESPACE SliceScheduler::
  DESTINATION ${SLICESCHED_CMAKE_DIR}
  FILE SliceSchedulerTargets.cmake
  CXX_MODULES_DIRECTORY cxx-modules)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/SliceSchedulerConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/SliceSchedulerConfig.cmake
  INSTALL_DESTINATION ${SLICESCHED_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# The plugin interface is versioned by its entry symbol (plugin_entry.hpp),
# and pre-1.0 minors may change it: only the same minor version matches.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/SliceSchedulerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/SliceSchedulerConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/SliceSchedulerConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/SliceSchedulerPlugin.cmake
  ${CMAKE_CURRENT_LIST_DIR}/SliceSchedulerHash.cmake
  DESTINATION ${SLICESCHED_CMAKE_DIR})
