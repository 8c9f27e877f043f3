# `slicesched serve` with [estimators] prior, as simulate takes it.
#   MODE=accepts: serve_prior.toml's prior (serve_prior.json) puts llama-tiny's
#     head at about a second; the estimators start from it, so the head's
#     prequential MAPE in the estimators' snapshot (each sample scored before the model
#     learns from it, the first against the prior) is enormous: checked as at
#     least ten times the same figure from the template's roofline prior
#     (serve_tiny.toml, served in the same test), not as a fixed number,
#     which would depend on the machine's speed (e.g. 15,119 % against 28 %
#     here).
#   MODE=missing: a prior file that does not exist stops serve before it
#     starts, with one line naming the config and the file, and exit 2.
#   MODE=stale: so does a profile fitted to other features than the
#     template's.
if(MODE STREQUAL "accepts")
  file(REMOVE_RECURSE ${OUT})
  execute_process(COMMAND ${SLICESCHED} serve ${SOURCE_DIR}/tests/cli/serve_prior.toml --out ${OUT}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "serve with a prior failed (${rc}): ${err}")
  endif()
  if(NOT out MATCHES "served SliceScheduler live" OR err MATCHES "request\\(s\\) failed")
    message(FATAL_ERROR "serve with a prior did not serve every request:\n${out}\n${err}")
  endif()
  # summary.json records the estimator and the prior it started from.
  file(READ ${OUT}/summary.json summary)
  string(JSON plugin GET "${summary}" policies SliceScheduler estimator plugin)
  string(JSON prior GET "${summary}" policies SliceScheduler estimator prior)
  string(JSON arbiter GET "${summary}" policies SliceScheduler arbiter plugin)
  if(NOT plugin STREQUAL "online-linear" OR NOT prior STREQUAL "${SOURCE_DIR}/tests/cli/serve_prior.json"
     OR NOT arbiter STREQUAL "greedy")
    message(FATAL_ERROR "summary.json records estimator '${plugin}', prior '${prior}', arbiter '${arbiter}':\n${summary}")
  endif()
  # The estimators' snapshot names its rows (template, op, type). The
  # head's prequential MAPE from the prior is compared with the same figure
  # from the template's roofline prior (serve_tiny.toml: this config without
  # [estimators]), served in this same test: a ratio, so a slower machine
  # (or a sanitizer build) moves both.
  function(head_mape dir var)
    file(READ ${dir}/calibration_slicescheduler.json profile)
    string(JSON rows LENGTH "${profile}" ops)
    set(mape "")
    math(EXPR last "${rows} - 1")
    foreach(i RANGE ${last})
      string(JSON op GET "${profile}" ops ${i} op)
      if(op STREQUAL "head")
        string(JSON mape GET "${profile}" ops ${i} mape_pct)
      endif()
    endforeach()
    if(NOT mape MATCHES "^[0-9.e+-]+$")
      message(FATAL_ERROR "${dir}/calibration_slicescheduler.json has no fit for the head:\n${profile}")
    endif()
    set(${var} ${mape} PARENT_SCOPE)
  endfunction()
  head_mape(${OUT} with_prior)
  file(REMOVE_RECURSE ${OUT}_roofline)
  execute_process(COMMAND ${SLICESCHED} serve ${SOURCE_DIR}/tests/cli/serve_tiny.toml --out ${OUT}_roofline
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "serve without a prior failed (${rc}): ${err}")
  endif()
  head_mape(${OUT}_roofline roofline)
  # with_prior >= 10 x roofline, within CMake's integer math: round the
  # roofline's figure up (if() compares the doubles themselves).
  if(NOT roofline MATCHES "^([0-9]+)(\\.[0-9]*)?$")
    message(FATAL_ERROR "the head's MAPE from the roofline prior is ${roofline} %")
  endif()
  math(EXPR bound "(${CMAKE_MATCH_1} + 1) * 10")
  if(NOT with_prior GREATER bound)
    message(FATAL_ERROR "the head's MAPE is ${with_prior} % from serve_prior.json and ${roofline} % from the "
                        "roofline: not ten times as large, so its estimator did not start from the prior")
  endif()
elseif(MODE STREQUAL "missing")
  execute_process(COMMAND ${SLICESCHED} serve ${SOURCE_DIR}/tests/cli/serve_missing_prior.toml
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "serve with a missing prior exited ${rc}, not 2:\n${out}\n${err}")
  endif()
  set(config ${SOURCE_DIR}/tests/cli/serve_missing_prior.toml)
  set(profile ${SOURCE_DIR}/tests/cli/no_such_profile.json)
  set(expect "slicesched: ${config}:10: estimators.prior: cannot open ${profile} (No such file or directory; relative \
paths resolve against the config's folder)\n")
  if(NOT err STREQUAL expect)
    message(FATAL_ERROR "serve with a missing prior said:\n${err}\nexpected:\n${expect}")
  endif()
  if(NOT out STREQUAL "")
    message(FATAL_ERROR "serve with a missing prior ran something:\n${out}")
  endif()
elseif(MODE STREQUAL "stale")
  # A profile whose head was fitted to {tokens, 1} (the template's head now
  # follows the sequences) is refused the same way.
  file(REMOVE_RECURSE ${OUT})
  file(MAKE_DIRECTORY ${OUT})
  file(READ ${SOURCE_DIR}/tests/cli/serve_prior.json json)
  string(REPLACE "\"features\": [\"sequences\", \"1\"]" "\"features\": [\"tokens\", \"1\"]" json "${json}")
  file(WRITE ${OUT}/stale.json "${json}")
  file(READ ${SOURCE_DIR}/tests/cli/serve_missing_prior.toml toml)
  string(REPLACE "no_such_profile.json" "stale.json" toml "${toml}")
  file(WRITE ${OUT}/stale.toml "${toml}")
  execute_process(COMMAND ${SLICESCHED} serve ${OUT}/stale.toml RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(expect "slicesched: ${OUT}/stale.toml: estimators.prior: ${OUT}/stale.json: ops[0] (llama-tiny/head on cpu) was \
fitted to features {tokens, 1}, the template's are {sequences, 1}; measure it again\n")
  if(NOT rc EQUAL 2 OR NOT err STREQUAL expect OR NOT out STREQUAL "")
    message(FATAL_ERROR "serve with a stale prior exited ${rc} and said:\n${out}${err}\nexpected:\n${expect}")
  endif()
else()
  message(FATAL_ERROR "MODE must be accepts, missing or stale")
endif()
