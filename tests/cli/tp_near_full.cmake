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
  # summary.json's peak per GPU: within each GPU's HBM (its peak_hbm_gib
  # is the group's account, four GPUs' worth: over 80 GiB here).
  string(JSON per_gpu GET "${j}" policies Static memory peak_hbm_gib_per_gpu)
  string(JSON group GET "${j}" policies Static memory peak_hbm_gib)
  if(per_gpu GREATER hbm OR NOT group GREATER hbm)
    message(FATAL_ERROR "hbm_gib ${hbm}: peak_hbm_gib_per_gpu ${per_gpu}, peak_hbm_gib ${group}; expected the first "
                        "within one GPU's HBM and the second the group's")
  endif()
  message(STATUS "hbm_gib ${hbm}: done ${done}, ${oom} out of memory, peak ${per_gpu} GiB a GPU")
endforeach()
