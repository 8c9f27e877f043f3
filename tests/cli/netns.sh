#!/bin/sh
# Executors across network namespaces: the three executors of
# configs/live/tiny-multiprocess.toml each in a network namespace of its
# own (`ip netns`), on a bridge with the scheduler's namespace, so every
# message and every tensor pulled between executors crosses a (virtual)
# network, not loopback. serve must finish every request. Where the
# machine does not allow namespaces, bridges or veth pairs (not root, no
# CAP_NET_ADMIN), it says so and exits 77 (ctest: skipped).
#   netns.sh SLICESCHED SRC OUT
set -u
S=$1 SRC=$2 OUT=$3
tag=ss$$
net=10.201.$(($$ % 250))
rm -rf "$OUT" && mkdir -p "$OUT"
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null; done
  for n in 0 1 2; do ip netns del "$tag$n" 2>/dev/null; done
  ip link del "br$tag" 2>/dev/null
}
trap cleanup EXIT
skip() {
  echo "skipped: network namespaces are not available here ($1)"
  exit 77
}
command -v ip >/dev/null || skip "no ip command"
ip link add "br$tag" type bridge 2>"$OUT/err" || skip "$(cat "$OUT/err")"
ip addr add "$net.1/24" dev "br$tag" && ip link set "br$tag" up || skip "bridge address"
for n in 0 1 2; do
  ip netns add "$tag$n" 2>"$OUT/err" || skip "$(cat "$OUT/err")"
  ip link add "v$tag$n" type veth peer name "p$tag$n" 2>"$OUT/err" || skip "$(cat "$OUT/err")"
  ip link set "p$tag$n" netns "$tag$n" && ip link set "v$tag$n" master "br$tag" && ip link set "v$tag$n" up &&
    ip netns exec "$tag$n" ip addr add "$net.1$n/24" dev "p$tag$n" &&
    ip netns exec "$tag$n" ip link set "p$tag$n" up && ip netns exec "$tag$n" ip link set lo up || skip "veth setup"
done
# The shipped config, its hosts at the namespaces' addresses.
sed -e "s|tcp://127.0.0.1:5701|tcp://$net.10:5701|" -e "s|tcp://127.0.0.1:5702|tcp://$net.11:5702|" \
    -e "s|tcp://127.0.0.1:5703|tcp://$net.12:5703|" -e 's/duration_s = 6/duration_s = 3/' \
    "$SRC/configs/live/tiny-multiprocess.toml" > "$OUT/netns.toml"
n=0
for h in a b c; do
  ip netns exec "$tag$n" "$S" executor --listen "tcp://$net.1$n:570$((n + 1))" --config "$OUT/netns.toml" --host $h \
    2>"$OUT/executor-$h.txt" &
  pids="$pids $!"
  n=$((n + 1))
done
if ! "$S" serve "$OUT/netns.toml" --out "$OUT/run" >"$OUT/serve.txt" 2>&1; then
  echo "FAIL: serve across namespaces:"; cat "$OUT/serve.txt"; exit 1
fi
if ! grep -q "served SliceScheduler live" "$OUT/serve.txt" || grep -q "request(s) failed" "$OUT/serve.txt"; then
  echo "FAIL: not every request was served:"; cat "$OUT/serve.txt"; exit 1
fi
# The executors were told to exit: each ends on its own.
for p in $pids; do wait "$p" || { echo "FAIL: an executor exited with an error"; cat "$OUT"/executor-*.txt; exit 1; }; done
pids=""
grep -Eq "copies received: 0 over NCCL, [1-9][0-9]* pulled as bytes" "$OUT"/executor-*.txt ||
  { echo "FAIL: no executor pulled a copy across the namespaces"; cat "$OUT"/executor-*.txt; exit 1; }
echo "served across three network namespaces"
