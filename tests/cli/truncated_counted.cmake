# on_overflow = "truncate": the requests cut to their model's context window
# are counted in summary.json, not only said on stderr.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --set models.llama2.on_overflow=truncate --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "simulate failed (${rc}): ${err}")
endif()
if(NOT err MATCHES "10 request\\(s\\)")
  message(FATAL_ERROR "stderr does not say how many were cut: ${err}")
endif()
# Once, though two policies replay the stream.
string(REGEX MATCHALL "request\\(s\\) cut to model" said "${err}")
list(LENGTH said times)
if(NOT times EQUAL 1)
  message(FATAL_ERROR "the cut requests were said ${times} times, expected once: ${err}")
endif()
file(READ ${OUT}/summary.json j)
string(JSON cut GET "${j}" policies p requests_truncated)
if(NOT cut EQUAL 10)
  message(FATAL_ERROR "summary.json requests_truncated is ${cut}, expected 10")
endif()
