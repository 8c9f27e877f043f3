# Runs CMD (a ;-list) and passes only when its exit status is what EXIT says
# ("0" or "nonzero"), its output (stdout then stderr) matches REGEX, and,
# when FAIL_REGEX is given, does not match it. A crash after the right line,
# or a right line with a wrong status, fails.
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(EXIT STREQUAL "0" AND NOT rc STREQUAL "0")
  message(FATAL_ERROR "expected exit status 0, got '${rc}':\n${all}")
elseif(EXIT STREQUAL "nonzero" AND (rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$"))
  message(FATAL_ERROR "expected a non-zero exit status (not a crash), got '${rc}':\n${all}")
endif()
if(NOT all MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}':\n${all}")
endif()
if(DEFINED FAIL_REGEX AND NOT FAIL_REGEX STREQUAL "" AND all MATCHES "${FAIL_REGEX}")
  message(FATAL_ERROR "output matches '${FAIL_REGEX}', which it must not:\n${all}")
endif()
