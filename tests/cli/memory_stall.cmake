# SliceScheduler under memory pressure where the offline KV caches fill every
# GPU (colocation.toml on 18-GiB H100s, 64 offline req/s, 30 s): an iteration
# waiting for HBM preempts an equal-priority one that holds KV on an
# accelerator where nothing runs, even while other accelerators are busy.
# Before, it waited until every accelerator it was short of went idle: 6.7
# req/s, 20 % busy, 89,122 of 90,329 batches deferred. Now 27.7 req/s, 82 %.
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --policy SliceScheduler --slo-threshold 0.236
                        --set duration_s=30 --set cluster.accelerators[0].hbm_gib=18
                        --set tenants.offline0.stream.constant_rate=64 --set tenants.*.stream.duration_s=30
                        --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "simulate failed (${rc}): ${out}${err}")
endif()
file(READ ${OUT}/summary.json j)
string(JSON rps GET "${j}" policies SliceScheduler request_throughput)
string(JSON busy GET "${j}" policies SliceScheduler gpu_utilization)
string(JSON preemptions GET "${j}" policies SliceScheduler memory preemptions)
if(rps LESS 20 OR busy LESS 0.6 OR preemptions EQUAL 0)
  message(FATAL_ERROR "18-GiB GPUs at 64 offline req/s: ${rps} req/s, ${busy} busy, ${preemptions} preemptions; "
                      "expected >= 20 req/s and >= 60 % busy (6.7 req/s and 20 % when caches of equal priority "
                      "held every GPU's memory)")
endif()
message(STATUS "18-GiB GPUs at 64 offline req/s: ${rps} req/s, ${busy} busy, ${preemptions} preemptions")
