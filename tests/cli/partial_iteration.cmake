# tests/cli/partial_iteration.toml: an iteration stuck part way for HBM, with
# nothing running anywhere, fails its largest request and requeues the rest
# (as one that never started would) instead of ending the run in a deadlock;
# with one operator or two a round, and on 16- to 18-GiB GPUs.
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
    # Most requests finish; what fails, fails as out of memory.
    if(done LESS 0.85 OR oom EQUAL 0)
      message(FATAL_ERROR "batch_cap ${cap}, ${gib} GiB: done ${done}, ${oom} failed out of memory; "
                          "expected >= 85 % done and the stuck iterations' largest requests failed")
    endif()
    message(STATUS "batch_cap ${cap}, ${gib} GiB: done ${done}, ${oom} failed out of memory")
  endforeach()
endforeach()
