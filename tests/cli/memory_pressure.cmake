# HBM binds every policy (docs/results.md, "Memory pressure"): a
# co-location experiment with HBM GiB per GPU (default 15.3; the weights
# take 14.96) over a short window. Every policy finishes (exit 0, a row
# each in summary.json), none holds more than its HBM in the ground truth,
# and nothing the HBM account let through waits for memory there
# (backend_memory_waits, refused_receives: 0), and the memory counters are
# there, with the pressure felt.
if(NOT HBM)
  set(HBM 15.3)
endif()
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --out ${OUT}
                        "--set" "cluster.accelerators[0].hbm_gib=${HBM}"
                        "--set" "duration_s=${WINDOW}" "--set" "tenants.*.stream.duration_s=${WINDOW}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "expected every policy to finish, got exit '${rc}':\n${out}${err}")
endif()
file(READ ${OUT}/summary.json summary)
set(felt 0)
string(JSON count LENGTH "${summary}" policies)
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON policy MEMBER "${summary}" policies ${i})
  string(JSON done GET "${summary}" policies ${policy} done)
  if(done LESS_EQUAL 0)
    message(FATAL_ERROR "${policy}: finished no request")
  endif()
  string(JSON peak GET "${summary}" policies ${policy} memory peak_hbm_fraction)
  if(peak GREATER 1.0 OR peak LESS_EQUAL 0.9)
    message(FATAL_ERROR "${policy}: peak HBM ${peak} of the budget (expected the weights' 0.98 up to 1)")
  endif()
  foreach(k oom_waits backend_memory_waits refused_receives preemptions preempted_sequences oom_failed_requests)
    string(JSON n GET "${summary}" policies ${policy} memory ${k})
    if(NOT n MATCHES "^[0-9]+$")
      message(FATAL_ERROR "${policy}: memory.${k} is '${n}'")
    endif()
    if((k STREQUAL "backend_memory_waits" OR k STREQUAL "refused_receives") AND NOT n EQUAL 0)
      message(FATAL_ERROR "${policy}: memory.${k} is ${n} at ${HBM} GiB: the HBM account let through what the "
                          "ground truth could not hold")
    endif()
    if(NOT k STREQUAL "preempted_sequences")
      math(EXPR felt "${felt} + ${n}")
    endif()
  endforeach()
endforeach()
if(felt EQUAL 0)
  message(FATAL_ERROR "no policy waited for memory, was preempted or failed for it: the test proves nothing")
endif()
