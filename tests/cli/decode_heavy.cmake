# colocation-decode.toml at its heaviest offline load (128 req/s), a 120-s
# window, every policy (docs/results.md, "One engine for the four online
# tenants"): SliceScheduler's SLO attainment is at least every baseline's,
# its token throughput at least 1.5x each of the paper's four baselines'
# and its TPOT below Priority-Batch's. Deterministic (seeded), so the bars
# are the measured figures less a margin.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${SLICESCHED} simulate ${CONFIG} --set duration_s=120
                        --set tenants.offline0.stream.constant_rate=128 --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "simulate failed (${rc}): ${stdout}${err}")
endif()
file(READ ${OUT}/summary.json summary)
string(JSON s_slo GET "${summary}" policies SliceScheduler slo_attainment)
string(JSON s_tok GET "${summary}" policies SliceScheduler token_throughput)
string(JSON s_tpot GET "${summary}" policies SliceScheduler tpot_mean_s)
message(STATUS "SliceScheduler: SLO ${s_slo}, ${s_tok} tok/s, TPOT ${s_tpot} s")
foreach(p Static-Online Subset-Share Dual-Share Full-Share Priority-Batch)
  string(JSON slo GET "${summary}" policies ${p} slo_attainment)
  string(JSON tok GET "${summary}" policies ${p} token_throughput)
  string(JSON tpot GET "${summary}" policies ${p} tpot_mean_s)
  message(STATUS "${p}: SLO ${slo}, ${tok} tok/s, TPOT ${tpot} s")
  if(s_slo LESS slo)
    message(FATAL_ERROR "SliceScheduler's SLO ${s_slo} is below ${p}'s ${slo}")
  endif()
  if(NOT p STREQUAL "Priority-Batch")
    # (math() is integer: whole tokens per second.)
    string(REGEX REPLACE "\\..*" "" s_int "${s_tok}")
    string(REGEX REPLACE "\\..*" "" b_int "${tok}")
    math(EXPR twice "2 * ${s_int}")
    math(EXPR bar "3 * ${b_int}")
    if(twice LESS bar)
      message(FATAL_ERROR "SliceScheduler's ${s_tok} tok/s is below 1.5x ${p}'s ${tok}")
    endif()
  elseif(NOT s_tpot LESS tpot)
    message(FATAL_ERROR "SliceScheduler's TPOT ${s_tpot} s is not below Priority-Batch's ${tpot} s")
  endif()
endforeach()
