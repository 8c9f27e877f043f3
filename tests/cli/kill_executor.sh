#!/bin/sh
# serve --spawn-local with one executor killed (SIGKILL) mid-run: serve
# says the accelerator is lost, every admitted request still finishes
# (summary.json: no failed request, every request done), and serve exits 0.
# The run is configs/live/tiny-multiprocess.toml with 12 s of arrivals; the
# kill comes once serve says it is serving. Bounded by ctest's timeout.
#   kill_executor.sh SLICESCHED SRC OUT
set -u
S=$1 SRC=$2 OUT=$3
rm -rf "$OUT" && mkdir -p "$OUT"
sed -e 's/duration_s = 6/duration_s = 12/' "$SRC/configs/live/tiny-multiprocess.toml" > "$OUT/kill.toml"
"$S" serve "$OUT/kill.toml" --spawn-local --out "$OUT/run" >"$OUT/serve.txt" 2>"$OUT/serve.err" &
serve=$!
i=0
until grep -q "serving SliceScheduler" "$OUT/serve.err" 2>/dev/null; do
  i=$((i + 1))
  if [ $i -gt 1200 ] || ! kill -0 $serve 2>/dev/null; then echo "FAIL: serve never started"; cat "$OUT/serve.err"; exit 1; fi
  sleep 0.1
done
sleep 1
victim=""
for c in $(pgrep -P $serve); do
  case "$(tr '\0' ' ' </proc/$c/cmdline)" in *"--host b"*) victim=$c ;; esac
done
[ -n "$victim" ] || { echo "FAIL: no executor child for host b"; exit 1; }
kill -KILL "$victim"
wait $serve
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: serve exited $rc"; cat "$OUT/serve.err"; exit 1; }
grep -q "accelerator 'cpu1' is lost (executor 'b' stopped answering)" "$OUT/serve.err" ||
  { echo "FAIL: serve did not report the loss"; cat "$OUT/serve.err"; exit 1; }
# Layer groups crossed processes: the surviving executors pulled copies.
grep -Eq "executor '[ac]': copies received: 0 over NCCL, [1-9][0-9]* pulled as bytes" "$OUT/serve.err" ||
  { echo "FAIL: no executor pulled a copy from another process"; cat "$OUT/serve.err"; exit 1; }
python3 - "$OUT/run/summary.json" <<'PY' || exit 1
import json, sys
p = json.load(open(sys.argv[1]))["policies"]["SliceScheduler"]
f = p["faults"]
print(f"done {p['requests_done']}/{p['requests_total']}, faults {f}")
if f["failed_requests"] != 0 or p["requests_done"] != p["requests_total"]:
    sys.exit("FAIL: a request was lost")
PY
