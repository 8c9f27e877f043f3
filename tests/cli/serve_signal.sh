#!/bin/sh
# serve_signal.sh SLICESCHED SOURCE_DIR OUT MODE: `slicesched serve` in the
# background, signalled once it has started; checks its exit status, how
# long it took to end, and that summary.json was written.
#   drain:  one SIGTERM with nothing in flight and the next arrival 1,000 s
#           away: ends at once with status 0 (SIGTERM drains, like Ctrl-C).
#   cancel_int, cancel_term: one signal while a long request decodes: it
#           keeps draining (still running a second later); then the other
#           signal cancels, and the status says which: 130 for SIGINT, 143
#           for SIGTERM.
set -u
slicesched=$1 src=$2 out=$3 mode=$4
config=$src/tests/cli/serve_sparse.toml
[ "$mode" = drain ] || config=$src/tests/cli/serve_busy.toml
rm -rf "$out" "$out.log"
mkdir -p "$(dirname "$out")"
"$slicesched" serve "$config" --out "$out" >"$out.log" 2>&1 &
pid=$!
fail() {
  kill -9 "$pid" 2>/dev/null
  echo "FAIL ($mode): $*"
  cat "$out.log"
  exit 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Wait for the line serve prints once a signal drains or cancels.
t=0
until grep -q "Ctrl-C or SIGTERM drains" "$out.log"; do
  kill -0 "$pid" 2>/dev/null || fail "serve ended before it started serving"
  t=$((t + 1))
  [ $t -gt 600 ] && fail "serve did not start within 60 s"
  sleep 0.1
done
sleep 1
case $mode in
  drain) kill -TERM "$pid"; expect=0 ;;
  cancel_int | cancel_term)
    first=TERM second=INT expect=130
    [ "$mode" = cancel_term ] && first=INT second=TERM expect=143
    kill -$first "$pid"
    sleep 1
    kill -0 "$pid" 2>/dev/null || fail "the drain did not wait for the admitted request"
    kill -$second "$pid" ;;
  *) fail "unknown mode" ;;
esac
signalled=$(now_ms)
# Watchdog: a serve that ignores the signal would otherwise hang the test.
t=0
while kill -0 "$pid" 2>/dev/null; do
  t=$((t + 1))
  [ $t -gt 300 ] && fail "still running 30 s after the signal"
  sleep 0.1
done
wait "$pid"
rc=$?
took=$(($(now_ms) - signalled))
echo "mode $mode: exit status $rc, ended $took ms after the last signal"
[ "$rc" = "$expect" ] || fail "expected exit status $expect, got $rc"
# The engine stops within a second; writing the summary, CSVs and plots
# takes the rest.
[ "$took" -le 5000 ] || fail "took $took ms to end after the signal (expected under 5 s)"
[ -s "$out/summary.json" ] || fail "no summary.json in $out"
grep -q "draining" "$out.log" || fail "no 'draining' line"
exit 0
