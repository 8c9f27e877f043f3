#!/usr/bin/env bash
# Operator accuracy on a lent device machine, from the prebuilt bundle (see
# README.md beside this file): `bench accuracy` on each config in CONFIGS,
# with the calibration's points (--samples) and every live measurement
# (--observations) kept, so where the operators' error comes from (the
# timer, the shape features, warm-up, noise, a shared GPU) can be read off
# afterwards with scripts/op-accuracy.py. Flat files in $OUT: run.log, and
# per config NAME: NAME.json, NAME-samples.csv, NAME-obs.csv.
#
#   bash scripts/device/op-accuracy.sh
#   CONFIGS="configs/live/llama3-8b-gpu-one.toml" TIME_SCALE=4 bash scripts/device/op-accuracy.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd -P)
OUT=${OUT:-$ROOT/out/op-accuracy}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd -P)
CONFIGS=${CONFIGS:-configs/live/llama3-8b-gpu-one.toml configs/live/llama3-8b-gpu.toml}
TIME_SCALE=${TIME_SCALE:-4}
CAP=${CAP:-280}  # seconds per config
B=$ROOT/build-gpu
S=$B/bin/slicesched
T=$S
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== op-accuracy $(date -u +%FT%TZ) in $ROOT"
. "$ROOT/scripts/device/env.sh"
"$S" devices
for c in $CONFIGS; do
  n=$(basename "$c" .toml)
  echo "== bench accuracy $c --time-scale $TIME_SCALE (t=${SECONDS}s)"
  timeout -k 10 "$CAP" "$S" bench accuracy "$c" --time-scale "$TIME_SCALE" --json \
    --samples "$OUT/$n-samples.csv" --observations "$OUT/$n-obs.csv" ${EXTRA:-} > "$OUT/$n.json"
  echo "== rc=$? (t=${SECONDS}s)"; cat "$OUT/$n.json"; echo
done
