#!/usr/bin/env python3
"""The offline binary never maps LibTorch (issue 27): `ldd slicesched` names no
torch, CUDA, NCCL or Python library, `--help` stays small, and a live command
whose runtime library is missing fails with one line and exit 2.
Usage: live_on_demand.py SLICESCHED"""
import os
import re
import resource
import subprocess
import sys

exe = sys.argv[1]
failures = []

before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
help_run = subprocess.run([exe, "--help"], capture_output=True, text=True)
rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if help_run.returncode != 0 or "simulate" not in help_run.stdout:
    failures.append(f"--help exited {help_run.returncode}")
# AddressSanitizer's shadow memory says nothing about the binary's own size.
if "ASAN_OPTIONS" not in os.environ and rss_mb > 50:
    failures.append(f"--help peaked at {rss_mb:.1f} MB of resident memory (target <= 50 MB)")
ldd = subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout
# Name and path only: the load address "(0x00007f3c10a2b000)" may spell c10.
heavy = [l.split()[0] for l in ldd.splitlines() if re.search(r"torch|c10|cuda|nccl|python|zmq", l.split("(0x")[0])]
if heavy:
    failures.append(f"ldd {exe} names live-only libraries: {', '.join(heavy)}")

print(f"--help: peak RSS {rss_mb:.1f} MB; ldd: {len(ldd.splitlines())} libraries, none live-only")

env = dict(os.environ, SLICESCHED_LIVE_LIBRARY="/nonexistent/libslicesched_live.so")
missing = subprocess.run([exe, "devices"], capture_output=True, text=True, env=env)
lines = missing.stderr.strip().splitlines()
if missing.returncode != 2 or len(lines) != 1 or "live runtime" not in lines[0] or "/nonexistent/" not in lines[0]:
    failures.append(f"a missing live runtime gave exit {missing.returncode} and {missing.stderr!r}")
else:
    print(f"missing runtime: {lines[0]}")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
