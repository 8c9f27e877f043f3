# plan on a small real config: the fewest GPUs at which SliceScheduler
# finishes at least 95 % of a heavy offline load (60 requests/s, eight lanes)
# inside a 15 s window. The
# answer holds, the value below it fails, and --json has every point tried.
execute_process(COMMAND ${SLICESCHED} plan ${CONFIG} --policy SliceScheduler
                  --vary cluster.accelerators[0].count=2..8 --objective "done>=0.95"
                  --set duration_s=15 --set tenants.offline0.lanes=8
                  --set tenants.offline0.stream.constant_rate=60 --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "plan failed (${rc}): ${err}")
endif()
string(JSON answer GET "${out}" answer)
if(answer STREQUAL "null" OR answer LESS 4 OR answer GREATER 8)
  message(FATAL_ERROR "expected an answer in [4, 8] (three GPUs cannot keep up): ${out}")
endif()
string(JSON n LENGTH "${out}" points)
set(below_fails OFF)
set(answer_holds OFF)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON v GET "${out}" points ${i} value)
  string(JSON h GET "${out}" points ${i} holds)
  string(JSON d GET "${out}" points ${i} figures done)
  math(EXPR below "${answer} - 1")
  if(v EQUAL below AND NOT h)
    set(below_fails ON)
  endif()
  if(v EQUAL answer AND h)
    set(answer_holds ON)
  endif()
  # What "holds" says agrees with the figure.
  if(h AND d LESS 0.95)
    message(FATAL_ERROR "point ${v} holds with done = ${d}")
  endif()
endforeach()
if(NOT below_fails OR NOT answer_holds)
  message(FATAL_ERROR "the answer ${answer} and its lower neighbour were not both checked: ${out}")
endif()
if(n GREATER 7)
  message(FATAL_ERROR "bisection over 8 values tried ${n} points")
endif()
