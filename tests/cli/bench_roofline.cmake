# `bench roofline --json`: fit on FIT, predict PROFILE, and hold the MAPE
# (per row, and of the kernels summed at each token count) under bounds.
execute_process(COMMAND ${SLICESCHED} bench roofline --profile ${PROFILE} --type ${TYPE} --fit ${FIT} --json
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
