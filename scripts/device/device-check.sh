#!/usr/bin/env bash
# SliceScheduler GPU check on a lent device machine, from a prebuilt bundle
# (build-gpu/bin + build-gpu/rtlibs, built on the dev box against PyPI torch
# 2.11.0+cu130). Run from the repository root of the copied tree:
#
#   bash scripts/device/device-check.sh
#
# It uses the device's own torch + nvidia-* wheels for LibTorch/CUDA/NCCL and
# build-gpu/rtlibs for everything else (tbb, fmt, zmq, sqlite, toml++,
# sentencepiece, libpython3.11, ... and libstdc++/libgcc_s only when the
# system's are too old). Steps (each under `timeout`, all within $BUDGET s):
#   devices; slicesched_cuda_tests [cuda] and [nccl]; serve llama3-8b-gpu;
#   bench accuracy --time-scale 4; bench overhead --requests 300 (only when
#   started before $START_LIMIT s).
# Results, flat files in $OUT: run.log tests.log serve.log bench.log
# summary.json accuracy.json overhead.json.
#
# Env overrides: OUT, BUDGET (540), START_LIMIT (420), CONFIG, TORCH_PY
# (/opt/torch/.venv/bin/python3), TORCH_DIR (torch package folder),
# OVERHEAD_REQUESTS (300), ACCURACY_TIME_SCALE (4), per-step timeout caps
# CAP_TESTS (120 each tag), CAP_SERVE (200), CAP_ACCURACY (260), CAP_OVERHEAD
# (300; every cap is also cut to the time left in BUDGET), ALLOW_CPU=1 (go on without
# a GPU: only to test this script, with CONFIG=configs/live/tiny-cpu.toml).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd -P)
OUT=${OUT:-$ROOT/out/device-check}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd -P)
BUDGET=${BUDGET:-540}
START_LIMIT=${START_LIMIT:-420}
CONFIG=${CONFIG:-configs/live/llama3-8b-gpu.toml}
OVERHEAD_REQUESTS=${OVERHEAD_REQUESTS:-300}
ACCURACY_TIME_SCALE=${ACCURACY_TIME_SCALE:-4}
B=$ROOT/build-gpu
S=$B/bin/slicesched
T=$B/bin/slicesched_cuda_tests

exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!
echo "== device-check $(date -u +%FT%TZ) in $ROOT (budget ${BUDGET}s)"

. "$ROOT/scripts/device/env.sh"

declare -a SUMMARY=()
left() { echo $((BUDGET - SECONDS)); }
# step NAME CAP CMD...: run CMD under timeout min(CAP, time left - 5);
# stdout/stderr go where the caller redirects them.
run_step() {
  local name=$1 cap=$2; shift 2
  local t=$(( $(left) - 5 )); [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 20 ]; then SUMMARY+=("$name: skipped (no time left)"); echo "== $name: skipped (no time left)" >&2; return 0; fi
  echo "== $name (timeout ${t}s, t=${SECONDS}s)" >&2
  local t0=$SECONDS
  timeout -k 10 "$t" "$@"; local rc=$?
  local msg="$name: rc=$rc in $((SECONDS - t0))s"; [ $rc -eq 124 ] || [ $rc -eq 137 ] && msg="$msg (TIMED OUT)"
  SUMMARY+=("$msg"); echo "== $msg" >&2
  return 0
}

echo; echo "== devices"
"$S" devices 2>&1 | tee "$OUT/devices.tmp"
if grep -q "no CUDA device is visible" "$OUT/devices.tmp" && [ "${ALLOW_CPU:-0}" != 1 ]; then
  echo "no CUDA device is visible: stopping (ALLOW_CPU=1 goes on, to test this script)"; rm -f "$OUT/devices.tmp"; exit 0
fi
rm -f "$OUT/devices.tmp"

# (a) the CUDA and NCCL tests
: > "$OUT/tests.log"
for tag in cuda nccl; do
  run_step "tests [$tag]" "${CAP_TESTS:-120}" "$T" "[$tag]" 2>&1 | tee -a "$OUT/tests.log"
done
# the summaries went through a pipe (subshell): re-derive them from the log
for tag in cuda nccl; do SUMMARY+=("$(grep -m1 "^== tests \[$tag\]: " "$OUT/tests.log" | sed 's/^== //')"); done

# (b) serve (its --out folder stays in out/; only summary.json comes back)
SERVE_DIR=$ROOT/out/device-serve-$$
run_step "serve $CONFIG" "${CAP_SERVE:-200}" "$S" serve "$CONFIG" --out "$SERVE_DIR" > "$OUT/serve.log" 2>&1
tail -n 40 "$OUT/serve.log"
cp "$SERVE_DIR/summary.json" "$OUT/summary.json" 2>/dev/null || echo "no summary.json from serve"

# (c) bench accuracy
: > "$OUT/bench.log"
echo "== bench accuracy" >> "$OUT/bench.log"
run_step "bench accuracy --time-scale $ACCURACY_TIME_SCALE" "${CAP_ACCURACY:-260}" \
  "$S" bench accuracy "$CONFIG" --time-scale "$ACCURACY_TIME_SCALE" --json > "$OUT/accuracy.json" 2>> "$OUT/bench.log"
tail -n 20 "$OUT/bench.log"; echo; cat "$OUT/accuracy.json"; echo

# (d) bench overhead, only when started early enough
if [ "$SECONDS" -lt "$START_LIMIT" ]; then
  echo "== bench overhead" >> "$OUT/bench.log"
  run_step "bench overhead --requests $OVERHEAD_REQUESTS" "${CAP_OVERHEAD:-300}" \
    "$S" bench overhead "$CONFIG" --requests "$OVERHEAD_REQUESTS" --json > "$OUT/overhead.json" 2>> "$OUT/bench.log"
  sed -n '/^== bench overhead$/,$p' "$OUT/bench.log" | tail -n 15; echo; cat "$OUT/overhead.json"; echo
else
  SUMMARY+=("bench overhead: not started (t=${SECONDS}s >= ${START_LIMIT}s)")
fi

echo; echo "== summary (total ${SECONDS}s)"
printf '%s\n' "${SUMMARY[@]}"
# let tee finish writing run.log before the script ends
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null || sleep 1
