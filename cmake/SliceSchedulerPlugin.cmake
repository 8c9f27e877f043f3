# slicesched_add_plugin(<target> <source>...)
#
# A loadable SliceScheduler plugin: a MODULE library, lib<target>.so, built
# from <source>s (files ending in .cppm are C++20 module interface units,
# the rest ordinary sources; exactly one of them holds
# SLICESCHED_PLUGIN_ENTRY). It links SliceScheduler::core's object code
# statically and gets the flags the built-in plugins use:
#   C++20 with module scanning, position-independent code,
#   hidden visibility (only the entry alias is exported),
#   -Bsymbolic: the few symbols a plugin exports anyway (module
#     initialisers, the interfaces' vtables and type_info) bind to its own
#     copies even if the host exports the same names,
#   --no-undefined: a missing symbol fails the link, not the dlopen (left
#     out under -fsanitize=..., whose runtime lives in the host),
#   SLICESCHED_INTERFACE_HASH and SLICESCHED_SDK_VERSION: the hash of the
#     SDK's interfaces it compiles against (SliceSchedulerHash.cmake) and
#     the SDK's version, which SLICESCHED_PLUGIN_ENTRY embeds and the
#     loader checks against its own.
function(slicesched_add_plugin target)
  if(NOT ARGN)
    message(FATAL_ERROR "slicesched_add_plugin(${target}): no sources")
  endif()
  set(modules ${ARGN})
  list(FILTER modules INCLUDE REGEX "\\.(cppm|ixx|cxxm|c\\+\\+m)$")
  set(sources ${ARGN})
  list(FILTER sources EXCLUDE REGEX "\\.(cppm|ixx|cxxm|c\\+\\+m)$")

  add_library(${target} MODULE ${sources})
  if(modules)
    target_sources(${target} PRIVATE FILE_SET CXX_MODULES FILES ${modules})
  endif()
  target_link_libraries(${target} PRIVATE SliceScheduler::core)
  file(GLOB interfaces ${SliceScheduler_INTERFACE_DIR}/*.cppm)
  slicesched_interface_hash(hash ${interfaces})
  target_compile_definitions(${target} PRIVATE
    SLICESCHED_INTERFACE_HASH="${hash}" SLICESCHED_SDK_VERSION="${SliceScheduler_VERSION}")
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES
    CXX_EXTENSIONS OFF
    CXX_SCAN_FOR_MODULES ON
    POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${target} PRIVATE LINKER:-Bsymbolic)
  if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
    target_link_options(${target} PRIVATE LINKER:--no-undefined)
  endif()
endfunction()
