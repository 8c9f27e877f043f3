# A golden summary.json: tests/cli/small.toml must give exactly
# tests/golden/small_summary.json, byte for byte. Every figure users read
# is in it; a change to any of them is a change to what users see, made on
# purpose: regenerate with scripts/update-golden.sh and say why in the commit.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --out ${OUT} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "simulate failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/summary.json ${GOLDEN} RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  execute_process(COMMAND diff -u ${GOLDEN} ${OUT}/summary.json OUTPUT_VARIABLE d)
  message(FATAL_ERROR "summary.json differs from ${GOLDEN}:\n${d}\n"
                      "If the change is on purpose: scripts/update-golden.sh, and say why in the commit.")
endif()
