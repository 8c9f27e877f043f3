# Runs CMD (a ;-list) and passes only when it exits non-zero with one
# stderr line matching REGEX, and printed no progress (nothing ran).
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit, got 0: ${out}")
endif()
if(NOT err MATCHES "${REGEX}")
  message(FATAL_ERROR "stderr does not match '${REGEX}': ${err}")
endif()
if(err MATCHES "sweep: [0-9]+%|: [0-9]+% \\(")
  message(FATAL_ERROR "something ran before the error: ${err}")
endif()
