#!/usr/bin/env python3
"""How fast each GPU of Vidur's profiles streams weights (docs/results.md,
"Why the GEMMs do not carry between Ampere and Hopper").

For each model and GPU: a least-squares line through the matrix-vector GEMM
rows (FLOPs per byte under an eighth of the ridge point) of time against
bytes at peak bandwidth. Its inverse slope is the share of the bandwidth the
GPU streams at; its intercept a launch cost. Bytes and FLOPs as
sublayer_work counts them: 2 (K N + n K + n N) and 2 n K N.

Usage: scripts/vidur-stream-rate.py [VIDUR_DIR]   (default ../shared/data/profiles/vidur)
"""
import csv
import sys
from pathlib import Path

TYPES = {"a100": (312e12, 2039e9), "a40": (149.7e12, 696e9), "h100": (989e12, 3350e9)}
MODELS = ["Llama-2-70b-hf", "CodeLlama-34b-Instruct-hf", "internlm-20b", "Llama-2-7b-hf"]


def gemm_rows(path):
    for r in csv.DictReader(open(path)):
        if r["num_tensor_parallel_workers"] != "1":
            continue
        n, h, nh = int(r["num_tokens"]), int(r["n_embd"]), int(r["n_head"])
        kv, inter, hd = int(r["n_kv_head"]), int(r["n_expanded_embd"]), h // nh
        up = 2 * inter if r["use_gated_mlp"] == "True" else inter
        shapes = {"attn_pre_proj": (h, (nh + 2 * kv) * hd), "attn_post_proj": (h, h),
                  "mlp_up_proj": (h, up), "mlp_down_proj": (inter, h)}
        for op, (k, m) in shapes.items():
            v = r.get(f"time_stats.{op}.median")
            if v:
                yield 2 * n * k * m, 2 * (k * m + n * k + n * m), float(v) * 1e-3


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/profiles/vidur")
    print(f"{'model':28s} {'gpu':5s} {'rows':>5s} {'stream':>7s} {'intercept us':>13s}")
    for model in MODELS:
        for gpu, (peak, bw) in TYPES.items():
            path = root / f"{gpu}_{model}_mlp.csv"
            if not path.exists():
                continue
            pts = [(b / bw, s) for f, b, s in gemm_rows(path) if f / b < peak / bw / 8]
            n = len(pts)
            sx = sum(x for x, _ in pts)
            sy = sum(y for _, y in pts)
            sxx = sum(x * x for x, _ in pts)
            sxy = sum(x * y for x, y in pts)
            slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
            intercept = (sy - slope * sx) / n
            print(f"{model:28s} {gpu:5s} {n:5d} {1 / slope:7.3f} {intercept * 1e6:13.1f}")


if __name__ == "__main__":
    main()
