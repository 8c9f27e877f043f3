# serve whose placement policy throws part way: it exits non-zero naming the
# plugin, and its --out holds summary.json marked failed with the requests as
# they were (as simulate writes a failed policy). It left an empty folder
# and no record (an outside probe); a failure before anything ran leaves no
# folder it made.
file(REMOVE_RECURSE ${OUT} ${OUT}_configs)
# CONFIG (configs/live/tiny-cpu.toml) with its placement the test plugin's
# "throws-int", and one with a plugin no library offers (serve takes no --set).
file(READ ${CONFIG} base)
string(REPLACE "placement = { plugin = \"simulation-guided\" }" "placement = { plugin = \"throws-int\" }" throws "${base}")
string(REPLACE "time_scale = 1.0" "time_scale = 4.0" throws "${throws}")
string(REPLACE "placement = { plugin = \"simulation-guided\" }" "placement = { plugin = \"no-such-plugin\" }" unknown "${base}")
file(WRITE ${OUT}_configs/throws.toml "${throws}\n[plugins]\npaths = [\"${PLUGIN}\"]\n")
file(WRITE ${OUT}_configs/unknown.toml "${unknown}")
execute_process(COMMAND ${SLICESCHED} serve ${OUT}_configs/throws.toml --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$" OR NOT err MATCHES "placement policy 'throws-int' threw")
  message(FATAL_ERROR "expected a non-zero exit naming the plugin, got '${rc}':\n${err}")
endif()
if(NOT EXISTS ${OUT}/summary.json)
  message(FATAL_ERROR "no ${OUT}/summary.json after the failed serve")
endif()
file(READ ${OUT}/summary.json j)
string(JSON failed GET "${j}" policies SliceScheduler failed)
string(JSON total GET "${j}" policies SliceScheduler requests_total)
if(NOT failed STREQUAL "ON" AND NOT failed STREQUAL "true")
  message(FATAL_ERROR "summary.json does not mark SliceScheduler failed (${failed})")
endif()
# Failing before anything runs (an unknown plugin): no folder left behind.
file(REMOVE_RECURSE ${OUT}_early)
execute_process(COMMAND ${SLICESCHED} serve ${OUT}_configs/unknown.toml --out ${OUT}_early
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(rc2 STREQUAL "0" OR EXISTS ${OUT}_early)
  message(FATAL_ERROR "an early failure (${rc2}) left ${OUT}_early: ${err2}")
endif()
message(STATUS "failed serve: summary.json marked failed (${total} requests); early failure: no folder")
