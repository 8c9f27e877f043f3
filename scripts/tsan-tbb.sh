#!/usr/bin/env bash
# Builds oneTBB with ThreadSanitizer instrumentation for `make tsan`, from
# Debian's own source package (the same 2021.8 as the libtbb-dev we link):
# TSan reports hundreds of false races around oneTBB's parallel_for when
# the library itself is not instrumented. Idempotent: quiet when the
# instrumented library is already installed under PREFIX.
#
#   scripts/tsan-tbb.sh PREFIX
#
# The source comes through apt with a private source list and state
# directory, so the machine's own apt configuration is left alone.
set -euo pipefail
PREFIX=${1:?usage: scripts/tsan-tbb.sh PREFIX}
if [ -f "$PREFIX/lib/libtbb.so.12" ] && [ -f "$PREFIX/.tsan-tbb-done" ]; then exit 0; fi
WORK="$PREFIX.work"
rm -rf "$WORK"
mkdir -p "$WORK/lists/partial" "$WORK/src"
cat >"$WORK/src.sources" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
APT=(-o "Dir::Etc::SourceList=$WORK/src.sources" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$WORK/lists")
echo "tsan-tbb: fetching Debian's onetbb source package"
apt-get "${APT[@]}" -qq update
(cd "$WORK/src" && apt-get "${APT[@]}" -qq source --download-only onetbb 2>&1 | grep -v "unsandboxed" || true)
orig=$(ls "$WORK"/src/onetbb_*.orig.tar.* | head -n1)
[ -n "$orig" ] || { echo "tsan-tbb: no onetbb source in $WORK/src" >&2; exit 1; }
tar -xf "$orig" -C "$WORK/src"
srcdir=$(find "$WORK/src" -maxdepth 1 -type d -name 'oneTBB-*' -o -maxdepth 1 -type d -name 'onetbb-*' | head -n1)
[ -n "$srcdir" ] || { echo "tsan-tbb: could not find the unpacked source in $WORK/src" >&2; exit 1; }
CMAKE=$(python3 -c 'import cmake; print(cmake.CMAKE_BIN_DIR)')/cmake
NINJA=$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))')
echo "tsan-tbb: building $(basename "$srcdir") with -fsanitize=thread (a few minutes)"
"$CMAKE" -S "$srcdir" -B "$WORK/build" -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTBB_SANITIZE=thread -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBB_STRICT=OFF -DTBBMALLOC_BUILD=OFF \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib >"$WORK/configure.log" 2>&1 \
  || { cat "$WORK/configure.log"; exit 1; }
"$CMAKE" --build "$WORK/build" -j "$(nproc)" >"$WORK/build.log" 2>&1 || { tail -50 "$WORK/build.log"; exit 1; }
"$CMAKE" --install "$WORK/build" >/dev/null
touch "$PREFIX/.tsan-tbb-done"
rm -rf "$WORK"
echo "tsan-tbb: installed into $PREFIX"
