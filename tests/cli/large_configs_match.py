#!/usr/bin/env python3
"""The large configs are what scripts/make-large-config.py writes: each file's
header names the command, so a user who edits the script (or the file) finds
out here instead of measuring a config nobody can write again."""
import subprocess
import sys
import tempfile
from pathlib import Path

root = Path(sys.argv[1])
configs = {
    "large.toml": [],
    "cluster-1000.toml": ["--cluster-wide"],
    "cluster-10000.toml": ["--cluster-wide", "--accels", "10000", "--online", "400", "--offline", "100"],
}
with tempfile.TemporaryDirectory() as tmp:
    for name, args in configs.items():
        out = Path(tmp) / name
        subprocess.run([sys.executable, str(root / "scripts/make-large-config.py"), *args, str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        shipped = root / "configs/experiments" / name
        if out.read_bytes() != shipped.read_bytes():
            sys.exit(f"large_configs_match: {shipped} is not what scripts/make-large-config.py "
                     f"{' '.join(args)} writes: run that command and commit the result")
print(f"large_configs_match: {len(configs)} configs as their generator writes them")
