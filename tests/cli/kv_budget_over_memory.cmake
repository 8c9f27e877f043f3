# tests/cli/kv_budget_over_memory.toml: requests that fit alone are not failed
# because the batch their KV budget allowed outgrew the HBM; the sequences
# are preempted and the batches that follow stay within the memory.
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "simulate failed (${rc}): ${out}${err}")
endif()
file(READ ${OUT}/summary.json j)
string(JSON done GET "${j}" policies Offline done)
string(JSON oom GET "${j}" policies Offline memory oom_failed_requests)
string(JSON preemptions GET "${j}" policies Offline memory preemptions)
string(JSON peak GET "${j}" policies Offline memory peak_hbm_fraction)
# The budget learnt from the memory is reported, below the configured 65,536.
string(JSON learnt ERROR_VARIABLE no_budget GET "${j}" policies Offline memory kv_budgets_learnt offline0)
if(no_budget OR learnt GREATER_EQUAL 65536 OR learnt LESS 1)
  message(FATAL_ERROR "memory.kv_budgets_learnt.offline0: '${learnt}' ${no_budget}; expected the lowered budget")
endif()
if(NOT oom EQUAL 0 OR preemptions EQUAL 0 OR done LESS 0.6 OR peak GREATER 1)
  message(FATAL_ERROR "done ${done}, ${oom} failed out of memory, ${preemptions} preemption(s), peak HBM ${peak}; "
                      "expected none failed, some preempted, >= 60 % done within the HBM (0 % done and 79 "
                      "failed when the largest request of an over-full batch failed)")
endif()
message(STATUS "done ${done}, ${oom} failed out of memory, ${preemptions} preemption(s), peak HBM ${peak}")
