# SLO attainment is always against a named baseline, never a run's own TTFT:
#  1. `simulate --policy SliceScheduler` runs Static-Online beside it and
#     reports the same attainment as the run of every policy;
#  2. --slo-threshold is used as given, and named;
#  3. a config with no static policy (and no slo_baseline) reports n/a
#     (null), with the reason;
#  4. without slo_baseline the first static policy is the baseline;
#  5. slo_baseline names another.
# CONFIG: colocation.toml (its SliceScheduler's p90 TTFT is far below
# Static-Online's, so against itself it would read about 90 %, against the
# baseline 100 %). NA_CONFIG: a config whose one policy, "Static", is static.
set(window --set duration_s=300 --set tenants.*.stream.duration_s=300)
function(simulate out)
  file(REMOVE_RECURSE ${out})
  execute_process(COMMAND ${SLICESCHED} simulate ${ARGN} --out ${out} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout
                  ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "simulate ${ARGN} failed (${rc}): ${stdout}${err}")
  endif()
  set(stdout "${stdout}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
  file(READ ${out}/summary.json j)
  set(summary "${j}" PARENT_SCOPE)
endfunction()

simulate(${OUT}/all ${CONFIG} ${window})
string(JSON all_slo GET "${summary}" policies SliceScheduler slo_attainment)
string(JSON all_threshold GET "${summary}" slo_threshold_s)
string(JSON own_p90 GET "${summary}" policies SliceScheduler ttft_p90_s)

simulate(${OUT}/one ${CONFIG} ${window} --policy SliceScheduler)
string(JSON one_slo GET "${summary}" policies SliceScheduler slo_attainment)
string(JSON one_threshold GET "${summary}" slo_threshold_s)
string(JSON one_basis GET "${summary}" slo_basis)
string(JSON count LENGTH "${summary}" policies)
if(NOT one_slo STREQUAL all_slo OR NOT one_threshold STREQUAL all_threshold)
  message(FATAL_ERROR "--policy SliceScheduler: SLO ${one_slo} against ${one_threshold} s; "
                      "beside every policy: ${all_slo} against ${all_threshold} s")
endif()
if(one_threshold STREQUAL own_p90 OR NOT one_basis MATCHES "Static-Online" OR NOT count EQUAL 1)
  message(FATAL_ERROR "--policy SliceScheduler: threshold ${one_threshold} s (its own p90 ${own_p90} s), "
                      "basis '${one_basis}', ${count} policies in summary.json (expected only the one asked for)")
endif()
if(all_slo LESS 0.95)
  message(FATAL_ERROR "SliceScheduler's SLO attainment ${all_slo} against Static-Online's p90: expected about 1")
endif()
if(err MATCHES "issued budget")
  message(FATAL_ERROR "colocation.toml warned of its issued budget:\n${err}")
endif()
if(NOT stdout MATCHES "SLO threshold \\(p90 TTFT of Static-Online, run beside as the baseline\\)")
  message(FATAL_ERROR "the table does not say where the threshold came from:\n${stdout}")
endif()

simulate(${OUT}/given ${CONFIG} ${window} --policy SliceScheduler --slo-threshold 0.0625)
string(JSON given_threshold GET "${summary}" slo_threshold_s)
string(JSON given_basis GET "${summary}" slo_basis)
string(JSON given_slo GET "${summary}" policies SliceScheduler slo_attainment)
if(NOT given_threshold STREQUAL "0.0625" OR NOT given_basis STREQUAL "--slo-threshold" OR NOT given_slo LESS all_slo)
  message(FATAL_ERROR "--slo-threshold 0.0625: threshold ${given_threshold}, basis '${given_basis}', SLO ${given_slo}")
endif()

simulate(${OUT}/na ${NA_CONFIG} --set policies[0].placement.plugin=simulation-guided)
string(JSON na_type TYPE "${summary}" policies Static slo_attainment)
string(JSON na_threshold TYPE "${summary}" slo_threshold_s)
if(NOT na_type STREQUAL "NULL" OR NOT na_threshold STREQUAL "NULL" OR NOT stdout MATCHES "SLO attainment n/a: no baseline policy")
  message(FATAL_ERROR "no static policy: slo_attainment is ${na_type}, threshold ${na_threshold}, expected null and "
                      "a line saying why:\n${stdout}")
endif()

simulate(${OUT}/first_static ${NA_CONFIG})
string(JSON static_basis GET "${summary}" slo_basis)
string(JSON static_threshold GET "${summary}" slo_threshold_s)
string(JSON static_p90 GET "${summary}" policies Static ttft_p90_s)
if(NOT static_basis STREQUAL "p90 TTFT of Static" OR NOT static_threshold STREQUAL static_p90)
  message(FATAL_ERROR "the first static policy as baseline: basis '${static_basis}', threshold ${static_threshold} "
                      "(its p90 ${static_p90})")
endif()

simulate(${OUT}/named ${CONFIG} ${window} --set slo_baseline=Full-Share)
string(JSON named_basis GET "${summary}" slo_basis)
string(JSON named_threshold GET "${summary}" slo_threshold_s)
string(JSON full_p90 GET "${summary}" policies Full-Share ttft_p90_s)
if(NOT named_basis STREQUAL "p90 TTFT of Full-Share" OR NOT named_threshold STREQUAL full_p90
   OR named_threshold STREQUAL all_threshold)
  message(FATAL_ERROR "slo_baseline = Full-Share: basis '${named_basis}', threshold ${named_threshold} "
                      "(Full-Share's p90 ${full_p90}, Static-Online's ${all_threshold})")
endif()
