# explain reads the requests CSV beside decisions.jsonl (found by an outside
# probe): a request that failed before any round says why (one that arrived
# after every accelerator was lost), an id the run
# never had says which ids it had (both blamed --trace-seconds before), and a
# request's account counts its deferred rounds and says when it failed.
# small.toml's static baseline with gpu1 lost at 0.5 s.
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --policy Static-Online --slo-threshold 1
                        "--set=faults=[{accelerator=\"gpu1\",at_s=0.5}]" --explain --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "simulate failed (${rc}): ${out}${err}")
endif()
function(expect request rc_expected pattern)
  execute_process(COMMAND ${SLICESCHED} explain ${OUT} --request ${request} --policy Static-Online
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${rc_expected}" OR NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "explain --request ${request}: exit ${rc}, expected ${rc_expected} and '${pattern}':\n${out}${err}")
  endif()
endfunction()
# (A request that nothing left could run fails at its first round now.)
expect(5 0 "request 5 was in 1 round\\(s\\): placed in 0, deferred in 1.*then it failed: no placement left that can run it \\(lost: gpu1")
expect(99999 1 "policy 'Static-Online' has no request 99999 \\(requests_static_online.csv has 63: ids 0 to 62\\)")
expect(0 0 "request 0 was in [0-9]+ round\\(s\\): placed in [1-9][0-9]*, deferred in [1-9][0-9]*.*then it failed: no placement left")
# Every accelerator lost at 0.5 s (the run fails): a request that arrives
# after it fails at its arrival, in no round.
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --policy Static-Online --slo-threshold 1
                        "--set=faults=[{accelerator=\"gpu0\",at_s=0.5},{accelerator=\"gpu1\",at_s=0.5},{accelerator=\"gpu2\",at_s=0.5},{accelerator=\"gpu3\",at_s=0.5}]"
                        --explain --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "simulate with every accelerator lost: exit ${rc}, expected non-zero: ${out}${err}")
endif()
expect(40 1 "request 40 is in none of the [0-9]+ recorded round\\(s\\) of policy 'Static-Online' .*it failed before it was placed: every accelerator is lost \\(gpu0 at 0.5")
# Two candidates of one label (a plugin's labels need not be unique): only
# the picked one is starred, by pick_index (both were).
file(MAKE_DIRECTORY ${OUT}/same_label)
file(WRITE ${OUT}/same_label/decisions.jsonl
     "{\"policy\":\"P\",\"t\":0.5,\"round\":1,\"tenant\":\"on\",\"batch\":[{\"op\":0,\"kind\":\"layers\",\"instance\":0}],\"requests\":[7],\"simulated\":true,\"candidates\":[{\"label\":\"gpu0\",\"mean_completion_s\":1.0,\"makespan_s\":1.0},{\"label\":\"gpu0\",\"mean_completion_s\":0.5,\"makespan_s\":0.5}],\"pick\":\"gpu0\",\"pick_index\":1}\n")
execute_process(COMMAND ${SLICESCHED} explain ${OUT}/same_label --request 7
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0" OR NOT out MATCHES "   gpu0 +1\\.000000 +1\\.000000.*\\* gpu0 +0\\.500000 +0\\.500000")
  message(FATAL_ERROR "explain with two candidates labelled gpu0: exit ${rc}, expected only the second starred:\n${out}${err}")
endif()
