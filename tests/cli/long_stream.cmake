# A stream far longer than the measurement window (tests/cli/long_stream.toml)
# runs in seconds, replays what the window offers, and counts the rest.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --out ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "simulate failed (${rc}): ${out}${err}")
endif()
file(READ ${OUT}/summary.json j)
string(JSON offered GET "${j}" policies Static offered constant requests)
if(NOT offered STREQUAL "600")
  message(FATAL_ERROR "expected the 600 constant-rate requests of the 30 s window offered, got ${offered}")
endif()
# 20 req/s for 1e9 s is 2e10 requests, 600 of them inside the window (the
# constant stream, counted arithmetically); the Poisson stream's 1e6 s at
# 1 req/s leave about 1e6 - 30 beyond it (counted exactly; 5 sigma = 5,000).
string(JSON beyond GET "${j}" policies Static requests_beyond_window)
math(EXPR poisson_beyond "${beyond} - 19999999400")
if(poisson_beyond LESS 994970 OR poisson_beyond GREATER 1004970)
  message(FATAL_ERROR "requests_beyond_window ${beyond}: expected 19999999400 + about 999970 (Poisson), got + ${poisson_beyond}")
endif()
