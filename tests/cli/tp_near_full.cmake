# tests/cli/tp_near_full.toml at a few headrooms per GPU: no run ends in a
# deadlock; where the rows do not fit, the requests fail out of memory, each
# with the reason, and with room enough they are served.
foreach(case "32.1294;0" "32.1372;0" "32.1450;100")
  list(GET case 0 hbm)
  list(GET case 1 want_done)
  execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --slo-threshold 1 --out ${OUT}
                          "--set=cluster.accelerators[0].hbm_gib=${hbm}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "hbm_gib ${hbm}: simulate failed (${rc}), expected the run to end: ${out}${err}")
  endif()
  file(READ ${OUT}/summary.json j)
  string(JSON done GET "${j}" policies Static done)
  string(JSON oom GET "${j}" policies Static memory oom_failed_requests)
  if(want_done EQUAL 0 AND (NOT done EQUAL 0 OR NOT oom EQUAL 2))
    message(FATAL_ERROR "hbm_gib ${hbm}: done ${done}, ${oom} failed out of memory; expected both requests failed")
  elseif(want_done EQUAL 100 AND NOT done EQUAL 1)
    message(FATAL_ERROR "hbm_gib ${hbm}: done ${done}; expected both requests served")
  endif()
  message(STATUS "hbm_gib ${hbm}: done ${done}, ${oom} out of memory")
endforeach()
