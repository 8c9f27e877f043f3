# `slicesched calibrate` on a config with two models, each resident on its
# own accelerators: every operator of both is timed (on an accelerator that
# holds it) and the profile has both templates' fits.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(profile ${OUT}/two.calibration.json)
execute_process(COMMAND ${SLICESCHED} calibrate ${SOURCE_DIR}/configs/live/two-models-cpu.toml --out ${profile}
                        --warmup 1 --repeats 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "calibrate failed (${rc}): ${err}")
endif()
if(NOT err MATCHES "calibrating tiny-a, tiny-b on 4 accelerator")
  message(FATAL_ERROR "calibrate does not say it calibrates both models:\n${err}")
endif()
file(READ ${profile} json)
string(JSON n LENGTH "${json}" ops)
math(EXPR last "${n} - 1")
set(seen "")
foreach(i RANGE ${last})
  string(JSON t GET "${json}" ops ${i} template)
  string(JSON o GET "${json}" ops ${i} op)
  list(APPEND seen "${t}/${o}")
endforeach()
foreach(want tiny-a/embed tiny-a/layers0 tiny-a/layers1 tiny-a/head tiny-b/embed tiny-b/layers0 tiny-b/layers1
             tiny-b/head)
  if(NOT want IN_LIST seen)
    message(FATAL_ERROR "the profile has no fit for ${want} (it has: ${seen})")
  endif()
endforeach()
