#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each (make fuzz SECONDS=N), from
# seed corpora made of the project's own inputs (configs/, data/, the tests'
# fixtures) plus what earlier runs found (build-fuzz/corpus/, kept between
# runs). A crash, a hang (> 1 s per input) or an out-of-memory stops with a
# non-zero status; the input is left in build-fuzz/artifacts/ and belongs in
# tests/fuzz/regressions/<target>/ once fixed (those run first, every time).
set -euo pipefail
BUILD=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS}
SECONDS_EACH=${2:-60}
cd "$(dirname "$0")/.."
ROOT=$PWD
mkdir -p "$BUILD/artifacts" "$BUILD/corpus"

# seeds TARGET FILE...: copies files into the target's seed folder; big
# files are cut to their first 64 lines (the fuzzer mutates from there).
seeds() {
  local target=$1
  shift
  local dir="$BUILD/seeds/$target"
  rm -rf "$dir" && mkdir -p "$dir"
  local n=0
  for f in "$@"; do
    [ -f "$f" ] || continue
    head -n 64 "$f" > "$dir/seed$n"
    n=$((n + 1))
  done
}
seeds config_fuzz configs/experiments/*.toml configs/live/*.toml tests/cli/*.toml docs/examples/*/*.toml
seeds trace_fuzz data/traces/*.csv data/traces/*.jsonl tests/fuzz/seeds/trace_fuzz/*
seeds calibration_fuzz tests/cli/*.json
seeds layer_profile_fuzz data/profiles/llmservingsim*.csv
seeds transfer_profile_fuzz data/profiles/vidur*.csv
# Seeds of whole files (not cut to 64 lines): safetensors shards the tests
# wrote (the tiny checkpoint, the bad-shape one), and the hand-written seeds
# of tests/fuzz/seeds/ (which the suite's replay tests also run).
for target in safetensors_fuzz completion_fuzz shape_fuzz; do
  rm -rf "$BUILD/seeds/$target" && mkdir -p "$BUILD/seeds/$target"
  cp tests/fuzz/seeds/"$target"/* "$BUILD/seeds/$target/"
done
n=0
for f in tests/bad_inputs/checkpoint_bad_shape/*.safetensors build/tests/tiny_checkpoint/*.safetensors; do
  [ -f "$f" ] && head -c 65536 "$f" > "$BUILD/seeds/safetensors_fuzz/shard$n" && n=$((n + 1))
done

status=0
for target in config_fuzz trace_fuzz calibration_fuzz layer_profile_fuzz \
              transfer_profile_fuzz shape_fuzz safetensors_fuzz completion_fuzz; do
  corpus="$BUILD/corpus/$target"
  mkdir -p "$corpus"
  regressions="$ROOT/tests/fuzz/regressions/$target"
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    "$BUILD/fuzz/$target" "$regressions"/* > "$BUILD/$target.regressions.log" 2>&1 \
      || { echo "fuzz: $target fails on a kept regression input (see $BUILD/$target.regressions.log)"; status=1; continue; }
  fi
  log="$BUILD/$target.log"
  if "$BUILD/fuzz/$target" "$corpus" "$BUILD/seeds/$target" -max_total_time="$SECONDS_EACH" -timeout=1 \
       -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$target-" \
       > "$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
    printf 'fuzz: %-22s %10s executions  %6s edges covered  ok\n' "$target" "$runs" "$cov"
  else
    echo "fuzz: $target FAILED; its log: $log; the input: $(ls -t "$BUILD"/artifacts/"$target"-* 2>/dev/null | head -1)"
    grep -E "ERROR|SUMMARY|==[0-9]+==" "$log" | head -5 || true
    status=1
  fi
done
exit $status
