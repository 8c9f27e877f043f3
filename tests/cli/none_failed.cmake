# Runs CONFIG and requires POLICY to finish at least MIN_DONE requests and
# fail none (tests/cli/model_elsewhere.toml, fault_pairs_tight.toml,
# lost_big_gpu.toml, prefill_lanes_fault.toml, faults_back_to_back.toml, fault_leak.toml: what
# each pins down is in its header; BEFORE says what the old build did).
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --out ${OUT} --slo-threshold 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "simulate failed (${rc}): ${out}${err}")
endif()
file(READ ${OUT}/summary.json j)
string(JSON done GET "${j}" policies ${POLICY} requests_done)
string(JSON failed GET "${j}" policies ${POLICY} requests_failed)
if(done LESS ${MIN_DONE} OR NOT failed EQUAL 0)
  message(FATAL_ERROR "${POLICY}: ${done} requests done, ${failed} failed; expected >= ${MIN_DONE} done and none "
                      "failed (${BEFORE})")
endif()
message(STATUS "${POLICY}: ${done} requests done, ${failed} failed")
