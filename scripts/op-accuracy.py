#!/usr/bin/env python3
"""Where the operators' prediction error comes from, from one `bench accuracy`
run's --samples (calibration points) and --observations (live measurements).

  scripts/op-accuracy.py SAMPLES.csv OBS.csv

Prints, per operator:
  timer    the calibration's operator medians (CUDA events on a GPU, what live
           reports) over its host_seconds column: the whole iteration's host
           time since operators are timed inside iterations (a share), the
           operator's own host time (launch + run + synchronize) before;
  noise    the spread of the calibration's timed runs;
  features each candidate feature set fitted to the calibration medians as the
           estimator fits them (relative least squares), scored in sample and
           on the live measurements (all of them, and those that had their GPU
           to themselves: no other operator of the run overlapped them);
  shared   live MAPE of the shipped fit for operators that overlapped another
           on the same device against those that ran alone;
  floor    the live run's own spread: operators at an iteration shape seen more
           than once against that shape's median.
Pure Python (no numpy): the fits are at most six features.
"""
import csv
import math
import sys
from collections import defaultdict


def lstsq_relative(rows, ys):
    """beta minimising sum(((x.beta) - y) / y)^2, columns scaled, normal equations
    solved by Gaussian elimination with partial pivoting (p <= 6)."""
    p = len(rows[0])
    scale = [max(abs(r[j]) / y for r, y in zip(rows, ys)) or 1.0 for j in range(p)]
    a = [[0.0] * p for _ in range(p)]
    b = [0.0] * p
    for r, y in zip(rows, ys):
        z = [r[j] / y / scale[j] for j in range(p)]
        for i in range(p):
            b[i] += z[i]
            for j in range(p):
                a[i][j] += z[i] * z[j]
    for i in range(p):
        a[i][i] += 1e-9  # a whisper of ridge: a column that never varies stays finite
    m = [a[i][:] + [b[i]] for i in range(p)]
    for c in range(p):
        piv = max(range(c, p), key=lambda r: abs(m[r][c]))
        m[c], m[piv] = m[piv], m[c]
        for r in range(p):
            if r != c and m[c][c] != 0:
                f = m[r][c] / m[c][c]
                m[r] = [m[r][k] - f * m[c][k] for k in range(p + 1)]
    return [(m[j][p] / m[j][j] if m[j][j] else 0.0) / scale[j] for j in range(p)]


def predict(beta, x):
    return max(0.0, sum(b * v for b, v in zip(beta, x)))


def mape(pairs):
    pairs = [(p, y) for p, y in pairs if y > 0]
    return 100.0 * sum(abs(p - y) / y for p, y in pairs) / len(pairs) if pairs else float("nan")


def bias(pairs):
    pairs = [(p, y) for p, y in pairs if y > 0]
    return 100.0 * sum((y - p) / y for p, y in pairs) / len(pairs) if pairs else float("nan")


# Candidate features of a layer group from an iteration's aggregate dims:
# T new tokens, S sequences, C cached tokens attended, K the KV cache taken over.
LAYER_SETS = {
    "shipped {T, T(C+T), C+T, 1}": lambda T, S, C, K: [T, T * (C + T), C + T, 1],
    "{T, T(C+T)/S, C+T, 1}": lambda T, S, C, K: [T, T * (C + T) / S, C + T, 1],
    "{T, T(C+T)/S, C+T, S, 1}": lambda T, S, C, K: [T, T * (C + T) / S, C + T, S, 1],
    "{T, T(C+T)/S, C+T, K, S, 1}": lambda T, S, C, K: [T, T * (C + T) / S, C + T, K, S, 1],
}


def sample_dims(r):
    s, t, c, pf = (int(r[k]) for k in ("seqs", "tokens", "context", "prefill"))
    return s * t + pf, s + (1 if pf > 0 else 0), s * c, s * c


def obs_dims(r):
    d = dict(kv.split("=") for kv in r["dims"].split())
    return int(d["tokens"]), int(d["sequences"]), int(d["context"]), int(d.get("kv_prev", d["context"]))


def overlapping(obs):
    """Indices of operators whose [start, start + seconds] overlapped another
    operator's on any accelerator of the same run (one GPU here)."""
    ops = sorted((float(r["start_s"]), float(r["start_s"]) + float(r["seconds"]), i) for i, r in enumerate(obs))
    hit, end, last = set(), -1.0, -1
    for s, e, i in ops:
        if s < end - 1e-7:
            hit.add(i)
            hit.add(last)
        if e > end:
            end, last = e, i
    return hit


def main():
    samples = [r for r in csv.DictReader(open(sys.argv[1])) if r["what"] != "copy"]
    obs = [r for r in csv.DictReader(open(sys.argv[2])) if r["what"] != "copy"]
    shared = overlapping(obs)
    by_op = defaultdict(list)
    for r in samples:
        by_op[r["what"]].append(r)
    live = defaultdict(list)
    for i, r in enumerate(obs):
        live[r["what"].split("/")[-1]].append((i, r))  # kinds are "model/op"

    print("== timer and noise (calibration)")
    print(f"{'op':10} {'points':>6} {'seconds/host_seconds':>21} {'spread p50 %':>13} {'spread max %':>13}")
    for op, rs in sorted(by_op.items()):
        ratios = sorted(float(r["seconds"]) / float(r["host_seconds"]) for r in rs if float(r["host_seconds"]) > 0)
        spreads = sorted(float(r["spread_pct"]) for r in rs)
        print(f"{op:10} {len(rs):6} {ratios[len(ratios) // 2]:21.3f} {spreads[len(spreads) // 2]:13.1f} {spreads[-1]:13.1f}")

    print("\n== the shipped fit on the live run: operators alone on their GPU vs overlapping another")
    print(f"{'op':10} {'alone n':>8} {'MAPE %':>7} {'bias %':>7} {'shared n':>9} {'MAPE %':>7} {'bias %':>7}")
    for op, items in sorted(live.items()):
        alone = [(float(r["predicted"]), float(r["seconds"])) for i, r in items if i not in shared]
        both = [(float(r["predicted"]), float(r["seconds"])) for i, r in items if i in shared]
        print(f"{op:10} {len(alone):8} {mape(alone):7.1f} {bias(alone):7.1f} {len(both):9} {mape(both):7.1f} {bias(both):7.1f}")

    print("\n== layer-group features: fitted to the calibration, scored in sample and on the live run")
    print(f"{'op':10} {'features':30} {'in-sample %':>11} {'live %':>7} {'live alone %':>12} {'bias alone %':>12}")
    for op, rs in sorted(by_op.items()):
        if not op.startswith("layers"):
            continue
        ys = [float(r["seconds"]) for r in rs]
        for name, f in LAYER_SETS.items():
            xs = [f(*sample_dims(r)) for r in rs]
            beta = lstsq_relative(xs, ys)
            ins = mape([(predict(beta, x), y) for x, y in zip(xs, ys)])
            lv = [(predict(beta, f(*obs_dims(r))), float(r["seconds"]), i in shared) for i, r in live.get(op, [])]
            alone = [(p, y) for p, y, s in lv if not s]
            print(f"{op:10} {name:30} {ins:11.1f} {mape([(p, y) for p, y, _ in lv]):7.1f} {mape(alone):12.1f} "
                  f"{bias(alone):12.1f}")

    print("\n== the live run's own floor: operators at an iteration shape seen more than once, against that")
    print("   shape's median live time: about the best a prediction by shape can do")
    print(f"{'op':10} {'samples':>8} {'shapes':>7} {'MAPE %':>7}")
    for op, items in sorted(live.items()):
        by_shape = defaultdict(list)
        for _, r in items:
            by_shape[r["dims"]].append(float(r["seconds"]))
        pairs = []
        for ys in by_shape.values():
            if len(ys) < 2:
                continue
            m = sorted(ys)[len(ys) // 2]
            pairs += [(m, y) for y in ys]
        shapes = sum(1 for ys in by_shape.values() if len(ys) > 1)
        print(f"{op:10} {len(pairs):8} {shapes:7} {mape(pairs):7.1f}")

    print("\n== live against calibration at the same iteration (alone only): median live / calibrated")
    cal = {}
    for r in samples:
        cal[(r["what"],) + sample_dims(r)[:3]] = float(r["seconds"])
    for op, items in sorted(live.items()):
        ratios = sorted(float(r["seconds"]) / cal[(op,) + obs_dims(r)[:3]]
                        for i, r in items if i not in shared and (op,) + obs_dims(r)[:3] in cal)
        if ratios:
            print(f"{op:10} {len(ratios):5} matches, live/calibrated p10 {ratios[len(ratios) // 10]:.3f} "
                  f"p50 {ratios[len(ratios) // 2]:.3f} p90 {ratios[9 * len(ratios) // 10]:.3f}")


if __name__ == "__main__":
    main()
