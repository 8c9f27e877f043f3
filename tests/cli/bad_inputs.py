#!/usr/bin/env python3
"""Drives the bad-input table of docs/reliability.md: every row's command must
exit non-zero (not by a crash) with its error on one line of stderr, and that
line must read as the table says ("..." in the table stands for anything).

    bad_inputs.py SLICESCHED SOURCE_DIR BUILD_DIR WORK_DIR

Rows sit between the markers <!-- bad-inputs --> and <!-- /bad-inputs -->:
| what a careless user gives | `slicesched ARGS` | `the one line` |
ARGS run from SOURCE_DIR; {build} and {work} are replaced by BUILD_DIR and
WORK_DIR. ARGS that start with "^C after N s:" get SIGINT N seconds in;
then the last line of stderr is the one checked, and the exit is 130.
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import time


def rows(doc):
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"<!-- bad-inputs -->(.*?)<!-- /bad-inputs -->", text, re.S)
    if not m:
        sys.exit(f"{doc}: no <!-- bad-inputs --> table")
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        yield cells[0], cells[1].strip("`"), cells[2].strip("`")


def matches(line, expected):
    pos = 0
    for piece in expected.split("..."):
        at = line.find(piece, pos)
        if at < 0:
            return False
        pos = at + len(piece)
    return True


def main():
    slicesched, source, build, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    failures, count = [], 0
    for what, args, expected in rows(os.path.join(source, "docs", "reliability.md")):
        count += 1
        args = args.replace("{build}", build).replace("{work}", work)
        interrupt = None
        m = re.match(r"\^C after (\d+(?:\.\d+)?) s:\s*(.*)", args)
        if m:
            interrupt, args = float(m.group(1)), m.group(2)
        argv = [slicesched] + shlex.split(args.removeprefix("slicesched "))
        proc = subprocess.Popen(argv, cwd=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace")
        if interrupt is not None:
            time.sleep(interrupt)
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            failures.append(f"{what}: did not end within 120 s")
            continue
        lines = [l for l in err.splitlines() if l.strip()]
        problem = None
        if interrupt is not None:
            if proc.returncode != 130:
                problem = f"exit status {proc.returncode}, expected 130"
            lines = lines[-1:]
        elif proc.returncode <= 0:
            problem = f"exit status {proc.returncode}, expected a non-zero exit (not a crash)"
        if problem is None and len(lines) != 1:
            problem = f"{len(lines)} lines on stderr, expected one"
        if problem is None and not matches(lines[0], expected):
            problem = f"got {lines[0]!r}, expected {expected!r}"
        if problem:
            failures.append(f"{what} ({args}): {problem}\n    stderr: {err.strip()[:2000]}")
    for f in failures:
        print("FAIL", f)
    print(f"bad-input table: {count - len(failures)} passed, {len(failures)} failed")
    if count < 10:
        sys.exit("the table has fewer than 10 rows: is it still there?")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
