#!/usr/bin/env python3
"""Figures printed to a stdout that cannot take them (/dev/full: a full
disk, a pipe that broke) are lost: the command fails with one line saying
so and a non-zero exit (found by an outside probe: validate, simulate and
bench roofline --json exited 0). Where /dev/full is missing it exits 77
(ctest: skipped).

  stdout_full.py SLICESCHED CONFIG
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import check  # noqa: E402

slicesched, config = sys.argv[1:3]
if not os.path.exists("/dev/full"):
    print("no /dev/full here: skipped")
    sys.exit(77)
for argv in (["validate"], ["simulate", config, "--policy", "Static-Online"], ["validate", "--json"]):
    with open("/dev/full", "w") as full:
        p = subprocess.run([slicesched] + argv, stdout=full, stderr=subprocess.PIPE, text=True)
    lines = [l for l in p.stderr.replace("\r", "\n").splitlines() if l.strip() and not l.endswith(")") or l.startswith("slicesched:")]
    check(p.returncode == 2, f"{argv[0]} to /dev/full: exit 2 (got {p.returncode})")
    check(len(lines) == 1 and lines[0] in ("slicesched: standard output: write failed (No space left on device)",
                                           "slicesched: standard output: write failed (disk full, or a closed pipe?)"),
          f"{argv[0]} to /dev/full: one line saying stdout took nothing: {lines}")
    with open(os.devnull, "w") as null:
        ok = subprocess.run([slicesched] + argv, stdout=null, stderr=subprocess.PIPE, text=True)
    check(ok.returncode == 0, f"{argv[0]} to /dev/null: exit 0 (got {ok.returncode}: {ok.stderr})")
print("PASS")
