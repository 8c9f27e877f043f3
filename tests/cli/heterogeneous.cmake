# A mixed cluster (configs/experiments/heterogeneous.toml, gpu0-3 H100,
# gpu4-7 A100): SliceScheduler keeps the H100s busier than the A100s
# although they are about three times as fast, so they do far more work.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --policy SliceScheduler --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "simulate failed (${rc}): ${err}")
endif()
file(STRINGS ${OUT}/accelerators_slicescheduler.csv lines REGEX "^gpu[0-9]+,")
set(h100 0)
set(a100 0)
foreach(l IN LISTS lines)
  string(REGEX REPLACE "^gpu([0-9]+),([0-9]+)[.,].*" "\\1;\\2" f "${l}")  # whole seconds
  list(GET f 0 i)
  list(GET f 1 busy)
  if(i LESS 4)
    math(EXPR h100 "${h100} + ${busy}" OUTPUT_FORMAT DECIMAL)
  else()
    math(EXPR a100 "${a100} + ${busy}" OUTPUT_FORMAT DECIMAL)
  endif()
endforeach()
# Measured: H100s 504 s busy, A100s 278 s (5-minute window, two models, both types on the roofline).
math(EXPR bound "${a100} * 3 / 2")
if(h100 LESS_EQUAL bound OR a100 LESS 10)
  message(FATAL_ERROR "H100s busy ${h100} s, A100s ${a100} s: expected the H100s over 1.5x the A100s")
endif()
message(STATUS "busy: H100s ${h100} s, A100s ${a100} s")
