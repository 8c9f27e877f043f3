#!/bin/sh
# Executors as processes vs threads: the same burst of requests served by
# configs/live/tiny-multiprocess.toml's three accelerators, once with each
# accelerator in its own executor process (serve --spawn-local) and once
# with all three as threads of serve (the same config without [[hosts]]).
# Every request arrives within the first second, so the run is bound by
# processing, not arrivals: the wall time and token throughput compare the
# two. Prints one line per mode per round and the best of each.
#   scripts/bench-multiprocess.sh [BUILD_DIR] [ROUNDS]
set -eu
BUILD=${1:-build}
ROUNDS=${2:-3}
BIN=$BUILD/bin/slicesched
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 - "$WORK" <<'PY'
import re, sys
work = sys.argv[1]
src = open("configs/live/tiny-multiprocess.toml").read()
# A burst: 24 + 8 requests inside the first second, 64 output tokens each, the policy as shipped.
src = src.replace('stream = { poisson_rate = 3.0, duration_s = 6, input_tokens = 24, output_tokens = 8 }',
                  'stream = { constant_rate = 24.0, duration_s = 1, input_tokens = 24, output_tokens = 64 }')
src = src.replace('stream = { constant_rate = 1.0, duration_s = 6, input_tokens = 48, output_tokens = 6 }',
                  'stream = { constant_rate = 8.0, duration_s = 1, input_tokens = 48, output_tokens = 64 }')
src = src.replace("time_scale = 2.0", "time_scale = 1.0")
open(f"{work}/processes.toml", "w").write(src)
threads = re.sub(r'\[\[hosts\]\]\nname = "[a-z]"\naddress = "[^"]*"\n\n', "", src)
threads = re.sub(r', host = "[a-z]"', "", threads)
open(f"{work}/threads.toml", "w").write(threads)
PY
for r in $(seq "$ROUNDS"); do
  for mode in threads processes; do
    flag=""
    [ "$mode" = processes ] && flag=--spawn-local
    "$BIN" serve "$WORK/$mode.toml" $flag --out "$WORK/out-$mode-$r" >/dev/null 2>"$WORK/err" || { cat "$WORK/err"; exit 1; }
    python3 - "$WORK/out-$mode-$r/summary.json" "$mode" "$r" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"]["SliceScheduler"]
print(f"{sys.argv[2]:9s} round {sys.argv[3]}: span {p['span_s']:.3f} s, {p['token_throughput']:.1f} tokens/s, "
      f"TTFT p50 {p['ttft_p50_s']*1e3:.1f} ms, TPOT {p['tpot_mean_s']*1e3:.2f} ms, done {p['requests_done']}/{p['requests_total']}")
PY
  done
done
