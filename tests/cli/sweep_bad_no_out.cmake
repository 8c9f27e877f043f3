# A sweep refused for a bad --set leaves no --out folder behind (found by an
# outside probe: the folder was made before the points were checked, and
# left empty).
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} sweep ${CONFIG} --set tenants.offline0.stream.constant_rat=1,2 --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "unknown key")
  message(FATAL_ERROR "expected the sweep refused for an unknown key, got status ${rc}: ${err}")
endif()
if(EXISTS ${OUT})
  message(FATAL_ERROR "the refused sweep left ${OUT} behind")
endif()
message(STATUS "refused (${rc}), and no ${OUT}")
