# tests/cli/partial_iteration.toml: an iteration stuck part way for HBM, with
# nothing running anywhere, leaves the GMG as one that never started would
# (its sequences queue again under a smaller KV budget; one alone that
# cannot fit fails) instead of ending the run in a deadlock; with one
# operator or two a round, and on 16- to 18-GiB GPUs.
foreach(cap 1 2)
  foreach(gib 16 17 18)
    execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --slo-threshold 1
                            --set policies.SliceScheduler.scheduler.batch_cap=${cap}
                            --set cluster.accelerators[0].hbm_gib=${gib} --out ${OUT}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc STREQUAL "0")
      message(FATAL_ERROR "batch_cap ${cap}, ${gib} GiB: simulate failed (${rc}): ${out}${err}")
    endif()
    file(READ ${OUT}/summary.json j)
    string(JSON done GET "${j}" policies SliceScheduler done)
    string(JSON oom GET "${j}" policies SliceScheduler memory oom_failed_requests)
    string(JSON preempted GET "${j}" policies SliceScheduler memory preempted_sequences)
    # Most requests finish, under memory pressure (sequences preempted, or
    # one that cannot fit alone failed).
    math(EXPR pressed "${oom} + ${preempted}")
    if(done LESS 0.85 OR pressed EQUAL 0)
      message(FATAL_ERROR "batch_cap ${cap}, ${gib} GiB: done ${done}, ${oom} failed out of memory, "
                          "${preempted} sequence(s) preempted; expected >= 85 % done under memory pressure")
    endif()
    message(STATUS "batch_cap ${cap}, ${gib} GiB: done ${done}, ${oom} failed out of memory, "
                   "${preempted} sequence(s) preempted")
  endforeach()
endforeach()
