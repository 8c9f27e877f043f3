# Live mode's runtime against Hugging Face transformers (ctest
# hf_reference_tokens): scripts/hf_check.py writes tiny random checkpoints
# with transformers' own Llama, Qwen2 and Phi classes and the tokens
# transformers generates from them; the Catch case "[.hf]" reads each through
# the config.json reader and safetensors loader and checks the runtime
# generates the same tokens.
# -DPYTHON=.venv's python -DSCRIPT=scripts/hf_check.py -DTESTS=slicesched_tests -DOUT=folder
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "hf_check.py failed (${rc}):\n${out}\n${err}")
endif()
set(ENV{SLICESCHED_HF_CHECK} ${OUT}/expected.json)
execute_process(COMMAND ${TESTS} "[.hf]" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the runtime's tokens differ from transformers' (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
