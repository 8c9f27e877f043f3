# `slicesched serve CONFIG --spawn-local`: the shipped multi-process example
# runs as a newcomer runs it (three executor child processes), every
# request finishes, summary.json is written, and no executor outlives
# serve. Then the [[hosts]] config errors, each one line naming the file,
# line and key, and serve's refusal of --spawn-local without [[hosts]].
# SLICESCHED, SRC, OUT.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${SLICESCHED} serve ${SRC}/configs/live/tiny-multiprocess.toml --spawn-local --out ${OUT}/run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "served SliceScheduler live" OR err MATCHES "request\\(s\\) failed")
  message(FATAL_ERROR "serve --spawn-local failed (${rc}):\n${out}\n${err}")
endif()
if(NOT err MATCHES "3 executor process\\(es\\) connected")
  message(FATAL_ERROR "serve --spawn-local did not connect three executors:\n${err}")
endif()
# CPU values cross processes as bytes over ZeroMQ, never over NCCL (each
# executor's exit summary; remote_live_test checks that pulls happen).
if(NOT err MATCHES "executor 'a': copies received: 0 over NCCL, [0-9]+ pulled as bytes over ZeroMQ"
   OR NOT err MATCHES "executor 'b': copies received: 0 over NCCL"
   OR NOT err MATCHES "executor 'c': copies received: 0 over NCCL"
   OR err MATCHES "copies received: [1-9][0-9]* over NCCL")
  message(FATAL_ERROR "serve --spawn-local: CPU copies did not go as bytes over ZeroMQ:\n${err}")
endif()
file(READ ${OUT}/run/summary.json summary)
string(JSON failed GET "${summary}" policies SliceScheduler requests_failed)
string(JSON done GET "${summary}" policies SliceScheduler requests_done)
if(NOT failed EQUAL 0 OR done LESS 1)
  message(FATAL_ERROR "summary.json: ${failed} failed, ${done} completed")
endif()
# No executor child outlives serve (they are told to exit, then reaped).
# (Matched by this checkout's config path: other checkouts' tests on the
# same machine run the same command.)
execute_process(COMMAND pgrep -f "slicesched executor .*--config ${SRC}/configs/live/tiny-multiprocess.toml"
                OUTPUT_VARIABLE left)
if(NOT left STREQUAL "")
  message(FATAL_ERROR "executor processes outlived serve: ${left}")
endif()

function(expect_error name text pattern)
  file(WRITE ${OUT}/${name}.toml "${text}")
  execute_process(COMMAND ${SLICESCHED} serve ${OUT}/${name}.toml RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "${name}: expected a one-line error matching '${pattern}', got (${rc}): ${err}")
  endif()
endfunction()
set(tail "[model]\nname = \"llama-tiny\"\n[[tenants]]\nname = \"t\"\nstream = { constant_rate = 1.0, duration_s = 1, input_tokens = 4, output_tokens = 2 }\n[[policies]]\nname = \"p\"\ntenants = [\"t\"]\nplacement = { plugin = \"simulation-guided\" }\npartition_sets = [{ plugin = \"singles\" }]\n")
set(cluster "[cluster]\nlink_classes = [{ name = \"host\", bandwidth_gbps = 10.0 }]\n")
expect_error(unknown_host
  "[[hosts]]\nname = \"a\"\naddress = \"tcp://127.0.0.1:5801\"\n${cluster}accelerators = [{ name = \"c0\", type = \"cpu\", hbm_gib = 0.25, device = \"cpu:0\", host = \"b\" }]\n${tail}"
  "unknown_host.toml:6: cluster.accelerators\\[0\\].host: no \\[\\[hosts\\]\\] entry named 'b' \\(known: a\\)")
expect_error(duplicate_host
  "[[hosts]]\nname = \"a\"\naddress = \"tcp://127.0.0.1:5801\"\n[[hosts]]\nname = \"a\"\naddress = \"tcp://127.0.0.1:5802\"\n${cluster}accelerators = [{ name = \"c0\", type = \"cpu\", hbm_gib = 0.25, device = \"cpu:0\", host = \"a\" }]\n${tail}"
  "duplicate_host.toml:5: hosts\\[1\\].name: duplicate host name 'a'")
expect_error(bad_address
  "[[hosts]]\nname = \"a\"\naddress = \"127.0.0.1:5801\"\n${cluster}accelerators = [{ name = \"c0\", type = \"cpu\", hbm_gib = 0.25, device = \"cpu:0\", host = \"a\" }]\n${tail}"
  "bad_address.toml:3: hosts\\[0\\].address: expected \"tcp://HOST:PORT\" or \"ipc://PATH\", got \"127.0.0.1:5801\"")
expect_error(bad_port
  "[[hosts]]\nname = \"a\"\naddress = \"tcp://127.0.0.1:99999\"\n${cluster}accelerators = [{ name = \"c0\", type = \"cpu\", hbm_gib = 0.25, device = \"cpu:0\", host = \"a\" }]\n${tail}"
  "bad_port.toml:3: hosts\\[0\\].address: expected a port in \\[1, 65535\\]")
expect_error(missing_host
  "[[hosts]]\nname = \"a\"\naddress = \"tcp://127.0.0.1:5801\"\n${cluster}accelerators = [{ name = \"c0\", type = \"cpu\", hbm_gib = 0.25, device = \"cpu:0\" }]\n${tail}"
  "missing_host.toml:[0-9]+: cluster.accelerators\\[0\\].host: is required with \\[\\[hosts\\]\\]")
expect_error(short_timeout
  "${cluster}accelerators = [{ name = \"c0\", type = \"cpu\", hbm_gib = 0.25, device = \"cpu:0\" }]\n[live]\nheartbeat_ms = 500\nexecutor_timeout_ms = 600\n${tail}"
  "short_timeout.toml:[0-9]+: live.executor_timeout_ms: expected at least twice heartbeat_ms \\(1000\\), got 600")
# --spawn-local needs [[hosts]].
execute_process(COMMAND ${SLICESCHED} serve ${SRC}/tests/cli/serve_tiny.toml --spawn-local RESULT_VARIABLE rc
                ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "serve_tiny.toml: --spawn-local: the config has no \\[\\[hosts\\]\\]")
  message(FATAL_ERROR "--spawn-local without [[hosts]]: (${rc}) ${err}")
endif()
# An executor for a host the config does not name.
execute_process(COMMAND ${SLICESCHED} executor --listen ipc://${OUT}/x.sock
                --config ${SRC}/configs/live/tiny-multiprocess.toml --host nosuch RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "tiny-multiprocess.toml: --host nosuch: no \\[\\[hosts\\]\\] entry of that name \\(known: a, b, c\\)")
  message(FATAL_ERROR "executor --host nosuch: (${rc}) ${err}")
endif()
