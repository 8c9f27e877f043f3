#!/bin/sh
# The roofline across GPU types with one profiler (docs/results.md, "Across
# GPU types"): per model, fit on Vidur's profiles of some types and predict
# another's, printing GEMM, elementwise, streaming, embedding, all-kinds and
# summed MAPE (%), then the fitted GEMM overlap exponent and the SM ceilings.
# Usage: sh scripts/roofline-cross-gpu.sh  (V: the Vidur folder, B: the binary)
set -eu
cd "$(dirname "$0")/.."
V=${V:-../shared/data/profiles/vidur}
B=${B:-build/bin/slicesched}
row() {  # preset file-stem test-type fit-type...
  m=$1 stem=$2 test=$3
  shift 3
  fits="" names=""
  for t in "$@"; do
    fits="$fits --fit $V/${t}_${stem}_mlp.csv@$(echo "$t" | tr a-z A-Z)"
    names="$names+$t"
  done
  # shellcheck disable=SC2086
  out=$("$B" bench roofline --model "$m" --profile "$V/${test}_${stem}_mlp.csv" --type "$(echo "$test" | tr a-z A-Z)" $fits --json)
  echo "$m ${names#+} $test $(echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin); k = j["kinds"]
f = lambda v: "nan" if v is None else "%.1f" % v
print(f(k["gemm"]["mape_pct"]), f(k["elementwise"]["mape_pct"]), f(k["streaming"]["mape_pct"]), f(k["embedding"]["mape_pct"]), f(j["mape_pct"]),
      f(j["summed_mape_pct"]), "p=%s" % k["gemm"]["overlap_p"], "q_emb=%s" % k["embedding"]["sm_bytes_per_cycle"],
      "q_el=%s" % k["elementwise"]["sm_bytes_per_cycle"])')"
}
for m in "llama2-70b Llama-2-70b-hf" "codellama-34b CodeLlama-34b-Instruct-hf" "internlm-20b internlm-20b" \
  "phi-2 phi-2"; do
  # shellcheck disable=SC2086
  set -- $m
  row "$1" "$2" h100 a100 a40
  row "$1" "$2" a100 h100
  row "$1" "$2" a40 h100
done
row llama2-7b Llama-2-7b-hf a40 a100
row llama2-7b Llama-2-7b-hf a100 a40
