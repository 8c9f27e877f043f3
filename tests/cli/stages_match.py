"""A policy written as stages picks exactly what the built-in it composes
picks, and early stopping under a makespan objective changes no pick.

  stages_match.py SLICESCHED CONFIG OUT

Runs CONFIG (tests/cli/stages.toml) twice: with --explain (every what-if
simulated to the end, every round recorded) and without (what-ifs cut short
once they cannot win). Checks:
  - SliceScheduler (simulation-guided) and Staged ([feasible,
    mean-completion]) make the same decision in every round (the same
    candidates, outcomes and pick) and end with the same summary (all but
    the plugins they name);
  - Staged's rounds carry the stages' reasons;
  - Staged-Makespan ([feasible, 2 x makespan]) declares the makespan
    objective: without --explain some what-ifs are cut short
    (scheduling.dominated > 0) and its summary is otherwise the one of the
    run that simulated every candidate to the end.
"""
import json
import subprocess
import sys

slicesched, config, out = sys.argv[1:4]


def run(folder, *extra):
    p = subprocess.run([slicesched, "simulate", config, "--out", folder, *extra], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"simulate {' '.join(extra)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    with open(f"{folder}/summary.json") as f:
        return json.load(f)


def fail(what):
    sys.exit("stages_match: " + what)


full = run(f"{out}/explain", "--explain")
pruned = run(f"{out}/pruned")

rounds = {}
with open(f"{out}/explain/decisions.jsonl") as f:
    for line in f:
        d = json.loads(line)
        rounds.setdefault(d["policy"], []).append(d)
a, b = rounds.get("SliceScheduler", []), rounds.get("Staged", [])
if not a or len(a) != len(b):
    fail(f"SliceScheduler recorded {len(a)} rounds, Staged {len(b)}")
picked = 0
for x, y in zip(a, b):
    reasons = y.pop("reasons", None)
    x.pop("policy"), y.pop("policy")
    if x != y:
        fail(f"round {x['round']} differs:\n  simulation-guided: {json.dumps(x)}\n  stages:            {json.dumps(y)}")
    if not reasons or not any(r.startswith("filter 'feasible' left ") for r in reasons):
        fail(f"round {y['round']}: Staged recorded no stage reasons: {reasons}")
    picked += x["pick"] is not None
if picked < 50:
    fail(f"only {picked} rounds picked a candidate: too small a test")


def strip(policy, *keys):
    p = dict(policy)
    for k in ("plugins", *keys):
        p.pop(k, None)
    return p


sg, st = full["policies"]["SliceScheduler"], full["policies"]["Staged"]
if strip(sg) != strip(st):
    diff = {k: (sg.get(k), st.get(k)) for k in set(sg) | set(st) if k != "plugins" and sg.get(k) != st.get(k)}
    fail(f"summaries differ: {json.dumps(diff)[:2000]}")
kinds = [(p["kind"], p["plugin"], p.get("weight")) for p in st["plugins"]]
if ("filter stage", "feasible", None) not in kinds or ("score stage", "mean-completion", 1.0) not in kinds:
    fail(f"Staged's plugins in summary.json: {kinds}")

m_full, m_pruned = full["policies"]["Staged-Makespan"], pruned["policies"]["Staged-Makespan"]
cut = m_pruned["scheduling"]["dominated"]
if cut <= 0:
    fail(f"no makespan what-if was cut short: {m_pruned['scheduling']}")
for p in (m_full, m_pruned):
    p["scheduling"] = {k: v for k, v in p["scheduling"].items() if k not in ("dominated", "cut_away")}
if strip(m_full) != strip(m_pruned):
    diff = {k: (m_full.get(k), m_pruned.get(k)) for k in set(m_full) if m_full.get(k) != m_pruned.get(k)}
    fail(f"cutting makespan what-ifs short changed the run: {json.dumps(diff)[:2000]}")
print(f"stages_match: {len(a)} rounds identical ({picked} picks); "
      f"makespan: {cut} of {m_pruned['scheduling']['simulations']} what-ifs cut short, same run")
