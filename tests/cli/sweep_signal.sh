#!/bin/sh
# sweep_signal.sh SLICESCHED SOURCE_DIR OUT MODE: `slicesched sweep` in the
# background, sent SIGINT once its points run; it must end with status 130,
# one line saying nothing was written, and no sweep files.
#   new:  --out did not exist: the folder the sweep made is taken away.
#   kept: --out held a file already: the folder and the file stay.
set -u
slicesched=$1 src=$2 out=$3 mode=$4
rm -rf "$out" "$out.log"
mkdir -p "$(dirname "$out")"
if [ "$mode" = kept ]; then
  mkdir -p "$out"
  echo keep >"$out/mine.txt"
fi
"$slicesched" sweep "$src/configs/experiments/colocation.toml" --set duration_s=1800 \
  --set "r:tenants.offline0.stream.constant_rate=1,2" --out "$out" >"$out.log" 2>&1 &
pid=$!
fail() {
  kill -9 "$pid" 2>/dev/null
  echo "FAIL ($mode): $*"
  cat "$out.log"
  exit 1
}
# Wait for the line sweep prints once its handlers are in place.
t=0
until grep -q "point(s) x" "$out.log"; do
  kill -0 "$pid" 2>/dev/null || fail "sweep ended before it ran its points"
  t=$((t + 1))
  [ $t -gt 600 ] && fail "sweep did not start its points within 60 s"
  sleep 0.1
done
sleep 0.5
kill -INT "$pid"
t=0
while kill -0 "$pid" 2>/dev/null; do
  t=$((t + 1))
  [ $t -gt 300 ] && fail "still running 30 s after SIGINT"
  sleep 0.1
done
wait "$pid"
rc=$?
echo "mode $mode: exit status $rc"
[ "$rc" = 130 ] || fail "expected exit status 130, got $rc"
grep -q "SIGINT: sweep stopped while running; nothing written" "$out.log" || fail "no line saying nothing was written"
case $mode in
  new) [ -e "$out" ] && fail "the --out folder the sweep made was left behind" ;;
  kept)
    [ "$(cat "$out/mine.txt" 2>/dev/null)" = keep ] || fail "the file already in --out was lost"
    [ "$(ls "$out")" = mine.txt ] || fail "sweep files were written: $(ls "$out")" ;;
esac
echo PASS
