#!/usr/bin/env bash
# The GPU check: what a user with NVIDIA GPUs runs (no network needed once
# `make build` has run). It prints the devices, runs the CUDA and NCCL tests,
# calibrates configs/live/llama3-8b-gpu.toml, then runs serve, bench accuracy
# and bench overhead on it, and writes $OUT/results.md with tables shaped like
# docs/results.md's. Where no CUDA device is visible it says so in one line
# and exits 0 without running anything that needs one.
#
#   scripts/gpu-check.sh            # or: make gpu-check
#   BUILD=build OUT=out/gpu-check CONFIG=configs/live/llama3-8b-gpu.toml scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-out/gpu-check}
CONFIG=${CONFIG:-configs/live/llama3-8b-gpu.toml}
S="$BUILD/bin/slicesched"
T="$BUILD/bin/slicesched_cuda_tests"
[ -x "$S" ] && [ -x "$T" ] || make build >/dev/null

devices=$("$S" devices)
if [ "$devices" = "no CUDA device is visible" ]; then
  echo "gpu-check: no CUDA device is visible; nothing to check"
  exit 0
fi
mkdir -p "$OUT"
echo "$devices" | tee "$OUT/devices.txt"
status=0
step() { echo; echo "== $*"; }

step "CUDA and NCCL tests"
: > "$OUT/tests.txt"
for tag in cuda nccl; do
  if "$T" "[$tag]" 2>&1 | tee -a "$OUT/tests.txt"; then echo "$tag: passed" >> "$OUT/tests.summary"
  else echo "$tag: FAILED" >> "$OUT/tests.summary"; status=1; fi
done

step "calibrate $CONFIG"
"$S" calibrate "$CONFIG" --out "$OUT/calibration.json" 2>&1 | tee "$OUT/calibrate.txt" || status=1

step "serve $CONFIG"
"$S" serve "$CONFIG" --out "$OUT/serve" 2>&1 | tee "$OUT/serve.txt" || status=1

# Executors as processes on the GPU: configs/live/tiny-multiprocess.toml
# with its three accelerators on cuda:0, one executor process each
# (--spawn-local), so GPU values cross processes (through host memory: NCCL
# across executor processes is not implemented yet, docs/live.md).
step "serve across executor processes on cuda:0"
sed -e 's/device = "cpu:[0-9]"/device = "cuda:0"/' configs/live/tiny-multiprocess.toml > "$OUT/multiprocess-gpu.toml"
"$S" serve "$OUT/multiprocess-gpu.toml" --spawn-local --out "$OUT/serve-multiprocess" 2>&1 \
  | tee "$OUT/serve-multiprocess.txt" || status=1

step "bench accuracy $CONFIG"
"$S" bench accuracy "$CONFIG" --json > "$OUT/accuracy.json" || status=1
cat "$OUT/accuracy.json"

step "bench overhead $CONFIG"
"$S" bench overhead "$CONFIG" --json > "$OUT/overhead.json" || status=1
cat "$OUT/overhead.json"

python3 - "$OUT" "$CONFIG" <<'PY' || status=1
import json, os, sys
out, config = sys.argv[1], sys.argv[2]
def load(name):
    try:
        with open(os.path.join(out, name)) as f: return json.load(f)
    except Exception: return None
def read(name):
    try:
        with open(os.path.join(out, name)) as f: return f.read().strip()
    except Exception: return "(missing)"
def fmt(v, d=2):
    return "n/a" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
lines = ["# GPU check", "", "```", read("devices.txt"), "```", "", "## Tests", "", "```", read("tests.summary"), "```", ""]
acc, ovh = load("accuracy.json"), load("overhead.json")
lines += ["## `bench overhead`", "", "| config | operator (direct) | direct_s | scheduled_s | overhead_pct | between operators | tokens match |",
          "|---|---|---|---|---|---|---|"]
if ovh:
    lines.append(f"| `{config}`, {ovh['requests']} requests | {ovh['direct_per_op_us']:.0f} us | {ovh['direct_s']:.3f} | "
                 f"{ovh['scheduled_s']:.3f} | {ovh['overhead_pct']:.2f} | {ovh['scheduled_gap_per_op_us']:.0f} us | {ovh['tokens_match']} |")
lines += ["", "## `bench accuracy`", "", "| config | e2e_error_pct | op_mape_pct | transfer_mape_pct | mean latency live / simulated |",
          "|---|---|---|---|---|"]
if acc:
    lines.append(f"| `{config}` | {fmt(acc['e2e_error_pct'])} | {fmt(acc['op_mape_pct'])} | {fmt(acc['transfer_mape_pct'])} | "
                 f"{acc['live_mean_latency_s']*1e3:.1f} / {acc['simulated_mean_latency_s']*1e3:.1f} ms |")
    lines += ["", "| op@type | samples | MAPE % | bias % |", "|---|---|---|---|"]
    for k, v in acc.get("per_op", {}).items():
        lines.append(f"| {k} | {v['samples']} | {fmt(v['mape_pct'])} | {fmt(v['bias_pct'])} |")
lines += ["", "## `serve`", "", "```", read("serve.txt"), "```", "", "## `calibrate`", "", "```", read("calibrate.txt"), "```", ""]
with open(os.path.join(out, "results.md"), "w") as f: f.write("\n".join(lines))
print(f"wrote {os.path.join(out, 'results.md')}")
PY
exit $status
