#!/usr/bin/env python3
"""A full disk under --out: simulate's results appear all together or not
at all. On a 64 KiB tmpfs that already holds an earlier run's summary.json,
a run whose results do not fit fails with one line naming the file it could
not write and saying nothing was put in place; no other file (and no
temporary) is left, and the earlier summary.json is byte for byte as it
was.

Where tmpfs cannot be mounted (not root, no CAP_SYS_ADMIN) it says why and
exits 77 (ctest: skipped).

  out_full_disk.py SLICESCHED CONFIG WORKDIR
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_server import check, tmpfs_or_skip  # noqa: E402

slicesched, config, work = sys.argv[1:4]
disk = tmpfs_or_skip(work, "64k")
try:
    out = os.path.join(disk, "out")
    os.makedirs(out)
    earlier = b'{"config": "an earlier run"}\n'
    with open(os.path.join(out, "summary.json"), "wb") as f:
        f.write(earlier)
    p = subprocess.run([slicesched, "simulate", config, "--out", out], capture_output=True, text=True)
    # (the progress lines aside: they are not errors)
    lines = [l for l in p.stderr.replace("\r", "\n").splitlines() if l.strip() and not l.endswith("%")]
    check(p.returncode != 0 and p.returncode < 128, f"a full disk: a non-zero exit, not a crash (got {p.returncode})")
    check(len(lines) == 1 and lines[0].startswith("slicesched: " + out + "/")
          and lines[0].endswith(": write failed (disk full?); no result of this run was put in place")
          and ".tmp" not in lines[0], f"one line naming the result it could not write: {lines}")
    left = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    check(left == ["summary.json"], f"nothing of the run is left, temporaries included: {left}")
    with open(os.path.join(out, "summary.json"), "rb") as f:
        check(f.read() == earlier, "the earlier summary.json is as it was")
finally:
    subprocess.run(["umount", disk], capture_output=True)
