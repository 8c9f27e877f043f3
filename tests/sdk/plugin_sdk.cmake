# The plugin SDK end to end, as docs/plugins.md tells a researcher: install
# this build tree into a scratch prefix, build docs/examples/least_loaded_policy
# against it with the same compiler, load the library from TOML, run the
# policy by name. Variables: BUILD_DIR SOURCE_DIR WORK SLICESCHED GENERATOR
# MAKE_PROGRAM CXX SCAN_DEPS BUILD_TYPE CXX_FLAGS LINKER_FLAGS Boost_DIR
# nlohmann_json_DIR.
set(example ${SOURCE_DIR}/docs/examples/least_loaded_policy)
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

# An example's library LIB, built under BUILD, and its config NAME with
# the paths it names relative to its own folder made absolute, written to
# ${WORK}/NAME. Sets LIB_VAR to the library's path and TOML_VAR to the text.
function(absolute_config example build lib name lib_var toml_var)
  file(GLOB library ${build}/${lib} ${build}/*/${lib})
  if(NOT library)
    message(FATAL_ERROR "the example built no ${lib} under ${build}")
  endif()
  file(READ ${example}/${name} toml)
  foreach(pair "\"build/${lib}\"|\"${library}\"" "\"../../../data/|\"${SOURCE_DIR}/data/")
    string(REPLACE "|" ";" pair "${pair}")
    list(GET pair 0 from)
    list(GET pair 1 to)
    string(FIND "${toml}" "${from}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name} no longer contains ${from}: update this test")
    endif()
    string(REPLACE "${from}" "${to}" toml "${toml}")
  endforeach()
  file(WRITE ${WORK}/${name} "${toml}")
  set(${lib_var} "${library}" PARENT_SCOPE)
  set(${toml_var} "${toml}" PARENT_SCOPE)
endfunction()

set(config_arg "")
if(BUILD_TYPE)
  set(config_arg --config ${BUILD_TYPE})
endif()
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} ${config_arg})

# Another compiler (g++, when there is one) is refused by find_package at
# once, with the fix, not by an unrelated error later.
find_program(other_cxx NAMES g++ NO_CACHE)
if(other_cxx)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${example} -B ${WORK}/build-other-compiler -G "${GENERATOR}"
                          "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${other_cxx}"
                          "-DBoost_DIR=${Boost_DIR}" "-Dnlohmann_json_DIR=${nlohmann_json_DIR}"
                          "-DCMAKE_PREFIX_PATH=${prefix}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  get_filename_component(cxx_name "${CXX}" NAME)
  string(REGEX REPLACE "[ \n]+" " " said "${err}")  # CMake wraps the message
  string(REGEX MATCHALL "CMake Error" errors "${err}")
  list(LENGTH errors error_count)
  string(FIND "${said}" "plugins must be built with the SDK's compiler. Configure a new build folder with \
-DCMAKE_CXX_COMPILER=${cxx_name}" fix_at)
  if(rc EQUAL 0 OR NOT error_count EQUAL 1 OR NOT said MATCHES "SliceSchedulerConfig.cmake:[0-9]+ \\(message\\)"
     OR fix_at EQUAL -1)
    message(FATAL_ERROR "configuring the example with ${other_cxx} gave (${rc}), not one error naming the fix:\n${err}")
  endif()
else()
  message(STATUS "no g++: the other-compiler check is skipped")
endif()

run("configuring the example" ${CMAKE_COMMAND} -S ${example} -B ${WORK}/build -G "${GENERATOR}"
  "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${CXX}"
  "-DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_MODULE_LINKER_FLAGS=${LINKER_FLAGS}"
  "-DBoost_DIR=${Boost_DIR}" "-Dnlohmann_json_DIR=${nlohmann_json_DIR}" "-DCMAKE_PREFIX_PATH=${prefix}")
# The package must come from the scratch prefix, not from an older install.
file(STRINGS ${WORK}/build/CMakeCache.txt found REGEX "^SliceScheduler_DIR:")
if(NOT found MATCHES "${prefix}/")
  message(FATAL_ERROR "find_package(SliceScheduler) did not use ${prefix}: ${found}")
endif()
run("building the example" ${CMAKE_COMMAND} --build ${WORK}/build ${config_arg})

absolute_config(${example} ${WORK}/build libslicesched_least_loaded.so least_loaded.toml library toml)

# The installed CLI, from its prefix: it must find LibTorch through its
# RUNPATH, with no LD_LIBRARY_PATH.
set(installed ${prefix}/bin/slicesched)
if(NOT EXISTS ${installed})
  message(FATAL_ERROR "cmake --install left no ${installed}")
endif()
run("the installed slicesched simulate" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
    ${installed} simulate ${WORK}/least_loaded.toml --out ${WORK}/out --explain)
file(READ ${WORK}/out/summary.json summary)
string(JSON done ERROR_VARIABLE missing GET "${summary}" policies Least-Loaded requests_done)
if(missing)
  message(FATAL_ERROR "summary.json has no policies.Least-Loaded.requests_done: ${missing}")
endif()
if(NOT done GREATER 0)
  message(FATAL_ERROR "Least-Loaded finished no request")
endif()
# It priced each accelerator's queue with the estimator it was handed, and
# said so in every round it picked.
file(READ ${WORK}/out/decisions.jsonl decisions)
if(NOT decisions MATCHES "\"policy\":\"Least-Loaded\"[^\n]*\"reasons\":\\[\"least queued work: [0-9.]+ s on its busiest accelerator")
  message(FATAL_ERROR "decisions.jsonl carries no least-loaded reason")
endif()

# The installed live runtime, opened by the installed CLI from ../lib (a
# live command with no GPU lists none and exits 0): its own RUNPATH finds
# LibTorch, still with no LD_LIBRARY_PATH.
if(NOT EXISTS ${prefix}/lib/libslicesched_live.so)
  message(FATAL_ERROR "cmake --install left no ${prefix}/lib/libslicesched_live.so")
endif()
run("the installed slicesched devices" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${installed} devices)

# The installed CLI reads the data installed beside it, not the source tree
# it was built from: validate's default published figures and type tables
# are the prefix's, and a prefix missing a type table says so, naming it.
execute_process(COMMAND ${installed} validate --json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\"data\": *\"${prefix}/share/slicescheduler/validation/trtllm_a100.csv\"")
  message(FATAL_ERROR "the installed validate did not replay ${prefix}/share/slicescheduler/validation (${rc}):\n${out}\n${err}")
endif()
set(moved ${WORK}/prefix-without-a100)
file(COPY ${prefix}/bin ${prefix}/share DESTINATION ${moved})
file(REMOVE ${moved}/share/slicescheduler/accelerators/A100-80GB.toml)
execute_process(COMMAND ${moved}/bin/slicesched validate RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "${moved}/share/slicescheduler/validation/trtllm_a100.csv:[0-9]+: gpu: unknown \
accelerator type 'A100-80GB' \\(types in ${moved}/share/slicescheduler/accelerators: ")
  message(FATAL_ERROR "a prefix without A100-80GB.toml did not fail naming its own tables (${rc}):\n${out}\n${err}")
endif()

# An SDK copy that differs from the host's in one declaration (a field
# added to Outcome, as a researcher's stale or edited copy would): the
# plugin built against it carries another interface hash, and the installed
# CLI refuses to load it, naming both hashes and SDK versions.
set(edited ${WORK}/prefix-edited)
file(COPY ${prefix}/ DESTINATION ${edited})
set(interface ${edited}/include/slicesched/core/plugin.cppm)
file(READ ${interface} text)
string(REPLACE "  AccelId at_accel = kNoAccel;\n" "  AccelId at_accel = kNoAccel;\n  int extra_field = 0;\n" edited_text "${text}")
if(edited_text STREQUAL text)
  message(FATAL_ERROR "${interface} no longer declares Outcome::at_accel as expected: update this test")
endif()
file(WRITE ${interface} "${edited_text}")
run("configuring the example against the edited SDK" ${CMAKE_COMMAND} -S ${example} -B ${WORK}/build-edited
  -G "${GENERATOR}" "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${CXX}"
  "-DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_MODULE_LINKER_FLAGS=${LINKER_FLAGS}"
  "-DBoost_DIR=${Boost_DIR}" "-Dnlohmann_json_DIR=${nlohmann_json_DIR}" "-DCMAKE_PREFIX_PATH=${edited}")
run("building the example against the edited SDK" ${CMAKE_COMMAND} --build ${WORK}/build-edited ${config_arg})
file(GLOB edited_library ${WORK}/build-edited/libslicesched_least_loaded.so
     ${WORK}/build-edited/*/libslicesched_least_loaded.so)
string(REPLACE "${library}" "${edited_library}" edited_toml "${toml}")
file(WRITE ${WORK}/least_loaded_edited.toml "${edited_toml}")
execute_process(COMMAND ${installed} simulate ${WORK}/least_loaded_edited.toml
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "${edited_library}: built against SDK [0-9.]+ with interface hash [0-9a-f]+, but this slicesched is SDK [0-9.]+ with interface hash [0-9a-f]+: rebuild the plugin against this SDK")
  message(FATAL_ERROR "the installed slicesched loaded a plugin built against an edited SDK (${rc}):\n${out}\n${err}")
endif()
string(REGEX MATCH "interface hash ([0-9a-f]+), but this slicesched is SDK [0-9.]+ with interface hash ([0-9a-f]+)" m "${err}")
if(CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
  message(FATAL_ERROR "the two hashes are the same: ${err}")
endif()

# The wider SDK (docs/plugins.md, "A stage"): docs/examples/kv_affinity_stage,
# a score stage that reads where its tenant's KV caches live, prices the
# batch with the estimator and gives its reasons, stacked in TOML after the
# built-in "feasible" filter and "mean-completion" score. Built against the
# same installed SDK and run by the installed CLI with --explain; `explain`
# prints the stage's reasons.
set(kv_example ${SOURCE_DIR}/docs/examples/kv_affinity_stage)
# Configured as docs/plugins.md says, without a build type: the example's
# CMakeLists must pick Release itself, not CMake's unoptimised default.
run("configuring the kv-affinity example" ${CMAKE_COMMAND} -S ${kv_example} -B ${WORK}/build-kv -G "${GENERATOR}"
  "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${CXX}"
  "-DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_MODULE_LINKER_FLAGS=${LINKER_FLAGS}"
  "-DBoost_DIR=${Boost_DIR}" "-Dnlohmann_json_DIR=${nlohmann_json_DIR}" "-DCMAKE_PREFIX_PATH=${prefix}")
file(STRINGS ${WORK}/build-kv/CMakeCache.txt kv_type REGEX "^CMAKE_BUILD_TYPE:")
if(NOT kv_type MATCHES "=Release$")
  message(FATAL_ERROR "the example configured without a build type builds as '${kv_type}', not Release (-O0?)")
endif()
run("building the kv-affinity example" ${CMAKE_COMMAND} --build ${WORK}/build-kv ${config_arg})
absolute_config(${kv_example} ${WORK}/build-kv libslicesched_kv_affinity.so kv_affinity.toml kv_library kv_toml)
run("the installed slicesched simulate (kv-affinity)" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
    ${installed} simulate ${WORK}/kv_affinity.toml --out ${WORK}/out-kv --explain)
file(READ ${WORK}/out-kv/summary.json summary)
string(JSON done ERROR_VARIABLE missing GET "${summary}" policies KV-Affinity requests_done)
if(missing OR NOT done GREATER 0)
  message(FATAL_ERROR "KV-Affinity finished no request (${missing}):\n${summary}")
endif()
# summary.json names each stage with its weight, arguments and library.
string(JSON n LENGTH "${summary}" policies KV-Affinity plugins)
set(found_stage OFF)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON plugin GET "${summary}" policies KV-Affinity plugins ${i} plugin)
  if(plugin STREQUAL "kv-affinity")
    string(JSON kind GET "${summary}" policies KV-Affinity plugins ${i} kind)
    string(JSON weight GET "${summary}" policies KV-Affinity plugins ${i} weight)
    string(JSON away GET "${summary}" policies KV-Affinity plugins ${i} args away_s_per_gib)
    string(JSON lib GET "${summary}" policies KV-Affinity plugins ${i} library)
    string(JSON calls GET "${summary}" policies KV-Affinity plugins ${i} calls)
    if(NOT kind STREQUAL "score stage" OR NOT weight EQUAL 0.5 OR NOT away EQUAL 0.02 OR NOT lib MATCHES "libslicesched_kv_affinity.so$"
       OR NOT calls GREATER 0)
      message(FATAL_ERROR "summary.json records kv-affinity as ${kind}, weight ${weight}, args ${away}, ${lib}, ${calls} calls")
    endif()
    set(found_stage ON)
  endif()
endforeach()
if(NOT found_stage)
  message(FATAL_ERROR "summary.json does not record the kv-affinity stage:\n${summary}")
endif()
file(READ ${WORK}/out-kv/decisions.jsonl decisions)
if(NOT decisions MATCHES "\"kv-affinity: the tenant holds [0-9.]+ MiB of KV cache on [0-9]+ accelerator\\(s\\), most on gpu[0-9]")
  message(FATAL_ERROR "decisions.jsonl carries no kv-affinity reason naming where the KV cache is")
endif()
execute_process(COMMAND ${installed} explain ${WORK}/out-kv --request 3 --policy KV-Affinity
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\n +reason: kv-affinity: " OR NOT out MATCHES "\n +reason: filter 'feasible' left ")
  message(FATAL_ERROR "explain printed no stage reasons (${rc}):\n${out}\n${err}")
endif()
