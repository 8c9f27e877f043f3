# A placement policy that takes longer in wall time than the simulated time
# it schedules (tests/plugins/misbehaving_placement.cpp "slow-static", 60 ms
# a choice over a 1 s window): simulate warns in one line, timing.json has
# the wall times and call counts, and summary.json stays free of wall time.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --out ${OUT} "--set" "duration_s=1"
                        "--set" "plugins.paths=[\"${PLUGIN}\"]" "--set" "policies.Failing.placement={plugin=\"slow-static\", ms=60}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "simulate failed (${rc}):\n${out}${err}")
endif()
if(NOT err MATCHES "\nslicesched: warning: policy 'Failing': its placement policy and partition sets took [0-9.]+ s of wall time to decide [0-9.]+ s of simulated time \\(timing.json\\)\n")
  message(FATAL_ERROR "expected the one-line warning for Failing, got:\n${err}")
endif()
if(err MATCHES "warning: policy 'Static-Online'")
  message(FATAL_ERROR "Static-Online decides fast, yet was warned about:\n${err}")
endif()
file(READ ${OUT}/timing.json timing)
string(JSON deciding GET "${timing}" policies Failing deciding_wall_s)
string(JSON simulated GET "${timing}" policies Failing simulated_s)
if(NOT deciding GREATER simulated)
  message(FATAL_ERROR "timing.json: Failing decided in ${deciding} s for ${simulated} s simulated:\n${timing}")
endif()
string(JSON kind GET "${timing}" policies Failing plugins 1 kind)
string(JSON calls GET "${timing}" policies Failing plugins 1 calls)
string(JSON wall GET "${timing}" policies Failing plugins 1 wall_s)
if(NOT kind STREQUAL "placement policy" OR NOT calls GREATER 10 OR NOT wall GREATER 0.2)
  message(FATAL_ERROR "timing.json: the placement policy's entry is ${kind}, ${calls} calls, ${wall} s:\n${timing}")
endif()
file(READ ${OUT}/summary.json summary)
string(JSON summary_calls GET "${summary}" policies Failing plugins 1 calls)
if(NOT summary_calls EQUAL calls OR summary MATCHES "wall")
  message(FATAL_ERROR "summary.json must count the same calls (${summary_calls} vs ${calls}) and hold no wall time")
endif()
