# slicesched_interface_hash(<out-var> <file>...)
#
# The plugin interface hash: SHA-256 (first 16 hex digits) of the SDK's
# exported module interfaces, the core's .cppm files, taken in file-name
# order with comments and runs of white space dropped (so a reworded
# comment does not change it; any change to a declaration does). The host
# computes it over its own sources when it is built, slicesched_add_plugin()
# over the SDK a plugin is built against; the loader refuses a plugin whose
# hash differs from the host's. Re-runs CMake when a file changes.
function(slicesched_interface_hash out)
  set(files ${ARGN})
  if(NOT files)
    message(FATAL_ERROR "slicesched_interface_hash: no interface files")
  endif()
  set(named "")
  foreach(f IN LISTS files)
    get_filename_component(name ${f} NAME)
    list(APPEND named "${name}|${f}")
  endforeach()
  list(SORT named)
  set(all "")
  foreach(entry IN LISTS named)
    string(REGEX REPLACE "^([^|]*)\\|(.*)$" "\\1" name "${entry}")
    string(REGEX REPLACE "^([^|]*)\\|(.*)$" "\\2" f "${entry}")
    file(READ ${f} text)
    string(REGEX REPLACE "//[^\n]*" "" text "${text}")
    string(REGEX REPLACE "[ \t\r\n]+" " " text "${text}")
    string(APPEND all "${name}:${text}\n")
  endforeach()
  string(SHA256 hash "${all}")
  string(SUBSTRING ${hash} 0 16 hash)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${files})
  set(${out} ${hash} PARENT_SCOPE)
endfunction()
