# `bench roofline --json`: fit on FIT, predict PROFILE, and hold the MAPE
# (per row, and of the kernels summed at each token count) under bounds.
# FIT may be a |-separated list (each one --fit); MODEL a preset (default llama3-8b).
string(REPLACE "|" ";" fits "${FIT}")
set(fit_args)
foreach(f IN LISTS fits)
  list(APPEND fit_args --fit ${f})
endforeach()
if(NOT DEFINED MODEL)
  set(MODEL llama3-8b)
endif()
execute_process(COMMAND ${SLICESCHED} bench roofline --model ${MODEL} --profile ${PROFILE} --type ${TYPE} ${fit_args} --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench roofline failed (${rc}): ${err}")
endif()
string(JSON mape GET "${out}" mape_pct)
string(JSON summed GET "${out}" summed_mape_pct)
string(JSON seen GET "${out}" profile_in_fit)
string(JSON gemm GET "${out}" kinds gemm mape_pct)
message(STATUS "mape ${mape} %, summed ${summed} %, gemm ${gemm} %")
if(seen OR mape GREATER ${MAX_MAPE} OR summed GREATER ${MAX_SUMMED})
  message(FATAL_ERROR "roofline MAPE ${mape} % (bound ${MAX_MAPE}), summed ${summed} % (bound ${MAX_SUMMED}), in fit: ${seen}")
endif()
# MAX_GEMM (optional): a bound on the GEMM kind's MAPE alone.
if(DEFINED MAX_GEMM AND gemm GREATER ${MAX_GEMM})
  message(FATAL_ERROR "roofline GEMM MAPE ${gemm} % (bound ${MAX_GEMM})")
endif()
