#!/bin/sh
# Regenerates the golden summaries (tests/golden/small_summary.json from
# tests/cli/small.toml, tests/golden/co_batch_summary.json from
# tests/cli/co_batch.toml) with the current build. Run it only when a change to
# the figures is on purpose, and say why in the commit.
set -eu
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
build/bin/slicesched simulate tests/cli/small.toml --out "$out" > /dev/null
cp "$out/summary.json" tests/golden/small_summary.json
build/bin/slicesched simulate tests/cli/co_batch.toml --out "$out/co_batch" > /dev/null
cp "$out/co_batch/summary.json" tests/golden/co_batch_summary.json
git diff --stat -- tests/golden/
