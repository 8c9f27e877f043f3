#!/usr/bin/env python3
"""GEMM cost-model variants across GPU generations (docs/results.md, "Why the
GEMMs do not carry between Ampere and Hopper", seventh session).

Fits the GEMM roofline (compute and memory efficiency on a 2 % grid, overlap
exponent p, launch overhead in closed form, as hardware/roofline.cpp does) on
Vidur's A100 + A40 rows and tests on the H100's, then fits on the H100 and
tests on the A100 and A40, for each variant:

  base      the shipped model;
  o0..o15   the launch overhead fixed at 0-15 us instead of fitted;
  w64..w256 wave quantization: compute charged for whole waves of
            TM x TN output tiles over the SMs;
  qfit      a second memory ceiling in bytes per SM cycle, fitted.

Usage: .venv/bin/python scripts/roofline-gemm-variants.py [VIDUR_DIR]
(default ../shared/data/profiles/vidur; needs numpy; about a minute a model)
"""
import csv
import math
import sys
from pathlib import Path

import numpy as np

V = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/profiles/vidur")
# peak bf16 FLOP/s, HBM bytes/s, SMs, SM clock (configs/accelerators)
T = {"a100": (312e12, 2039e9, 108, 1.41e9), "a40": (149.7e12, 696e9, 84, 1.74e9),
     "h100": (989e12, 3350e9, 132, 1.98e9)}
MODELS = ["Llama-2-70b-hf", "CodeLlama-34b-Instruct-hf"]
VARIANTS = {"base": {}, "o0": {"o": 0}, "o5": {"o": 5e-6}, "o10": {"o": 10e-6}, "o15": {"o": 15e-6},
            "w64": {"wave": (64, 128)}, "w128": {"wave": (128, 128)}, "w256": {"wave": (256, 128)},
            "qfit": {"qs": [0, 8, 9, 10, 11, 12, 13, 14]}}


def rows(gpu, model):
    out = []
    for r in csv.DictReader(open(V / f"{gpu}_{model}_mlp.csv")):
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
                out.append((gpu, n, k, m, float(v) * 1e-3))
    return out


def arrays(rs):
    g = np.array([T[r[0]] for r in rs])
    return dict(peak=g[:, 0], bw=g[:, 1], sms=g[:, 2], clk=g[:, 3], n=np.array([r[1] for r in rs], float),
                k=np.array([r[2] for r in rs], float), m=np.array([r[3] for r in rs], float),
                y=np.array([r[4] for r in rs]))


def predict(d, c, mem, p, var, q=0):
    n, k, m = d["n"], d["k"], d["m"]
    flops, byts = 2 * n * k * m, 2 * (k * m + n * k + n * m)
    if "wave" in var:
        tm, tn = var["wave"]
        waves = np.ceil(np.ceil(n / tm) * np.ceil(m / tn) / d["sms"])
        flops = np.maximum(flops, waves * d["sms"] * tm * tn * 2 * k)
    tc, tmem = flops / (d["peak"] * c), byts / (d["bw"] * mem)
    if q:
        tmem = np.maximum(tmem, byts / (d["sms"] * d["clk"] * q))
    if math.isinf(p):
        return np.maximum(tc, tmem)
    hi = np.maximum(tc, tmem)
    return hi * ((tc / hi) ** p + (tmem / hi) ** p) ** (1 / p)


def fit(d, var):
    best, y = None, d["y"]
    for q in var.get("qs", [0]):
        for p in (1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4, 8, math.inf):
            for c in np.arange(0.30, 1.001, 0.02):
                for mem in np.arange(0.30, 1.001, 0.02):
                    x = predict(d, c, mem, p, var, q)
                    o = var["o"] if "o" in var else max(0, np.sum((y - x) / y**2) / np.sum(1 / y**2))
                    e = np.mean(np.abs((x + o) / y - 1))
                    if best is None or e < best[0]:
                        best = (e, c, mem, p, o, q)
    return best


def mape(d, b, var):
    _, c, mem, p, o, q = b
    return 100 * np.mean(np.abs((predict(d, c, mem, p, var, q) + o) / d["y"] - 1))


for model in MODELS:
    ampere, h100 = arrays(rows("a100", model) + rows("a40", model)), arrays(rows("h100", model))
    a100, a40 = arrays(rows("a100", model)), arrays(rows("a40", model))
    for name, var in VARIANTS.items():
        b, bh = fit(ampere, var), fit(h100, var)
        print(f"{model:26s} {name:5s} A100+A40->H100 {mape(h100, b, var):5.1f} %  "
              f"H100->A100 {mape(a100, bh, var):5.1f} %  H100->A40 {mape(a40, bh, var):5.1f} %", flush=True)
