# tests/cli/lanes_tight.toml: four lanes of one tenant on one GPU under tight
# HBM finish about half of what one lane does (each lane's batch reads the
# weights apart), not a tenth, and do not thrash.
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "simulate failed (${rc}): ${out}${err}")
endif()
file(READ ${OUT}/summary.json j)
string(JSON done GET "${j}" policies Static requests_done)
string(JSON total GET "${j}" policies Static requests_total)
math(EXPR pct "100 * ${done} / ${total}")
string(JSON preemptions GET "${j}" policies Static memory preemptions)
string(JSON peak GET "${j}" policies Static memory peak_hbm_fraction)
if(pct LESS 35 OR preemptions GREATER 20 OR peak GREATER 1)
  message(FATAL_ERROR "Static, 4 lanes: ${done} of ${total} requests done, ${preemptions} preemptions, peak HBM ${peak}; "
                      "expected >= 35 % done and <= 20 preemptions (11 done and 596 preemptions when the other lanes "
                      "took the room a waiting iteration needed)")
endif()
message(STATUS "Static, 4 lanes: ${done} of ${total} requests done, ${preemptions} preemptions")
