#!/usr/bin/env python3
"""Checks that module names follow file paths and that re-exports say why.

- An interface `export module M;` in ROOM/a/b.cppm is `slicesched.ROOM.a.b`; a
  folder's own interface (ROOM/x/x.cppm) is `slicesched.ROOM.x`, and an
  interface partition `M:b` lives in M's folder as b.cppm. Under tests/, the
  test support modules are `slicesched.testing` (tests/support/testing.cppm)
  and `slicesched.testing.<file name>`.
- An implementation unit `module M;` lives in the folder of M's interface.
- Every `export import` carries a comment saying why it is re-exported: on its
  own line, or one comment line just above a run of export imports. A file
  imports what it uses; a re-export is the exception.
Usage: module_names_check.py REPO
"""
import pathlib
import re
import subprocess
import sys

EXPORT = re.compile(r"^export\s+module\s+([\w.:]+)\s*;", re.M)
IMPL = re.compile(r"^module\s+([\w.]+)\s*;", re.M)
REEXPORT = re.compile(r"^export\s+import\s+[\w.:]+\s*;(.*)$")


def expected_name(rel):
    """The module name a .cppm at repo-relative path `rel` must declare."""
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "tests":
        return "slicesched.testing" + ("" if parts[-1] == "testing" else "." + parts[-1])
    if len(parts) >= 2 and parts[-1] == parts[-2]:
        parts.pop()
    return "slicesched." + ".".join(parts)


def sources(repo):
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "*.cppm", "*.cpp"], capture_output=True, text=True)
    if out.returncode != 0:  # not a checkout (a source archive): every file on disk
        return sorted(p.relative_to(repo) for ext in ("*.cppm", "*.cpp") for p in repo.rglob(ext)
                      if not p.relative_to(repo).parts[0].startswith("build"))
    return [pathlib.Path(line) for line in out.stdout.split() if (repo / line).exists()]


def check(repo):
    errors = []
    files = [f for f in sources(repo) if f.parts[0] != "docs"]  # docs/examples: out-of-tree plugins
    interfaces = {}  # module name -> folder of its interface
    for rel in files:
        if rel.suffix != ".cppm":
            continue
        text = (repo / rel).read_text()
        m = EXPORT.search(text)
        if not m:
            errors.append(f"{rel}: no `export module` declaration")
            continue
        name = m.group(1)
        if ":" in name:
            primary, part = name.split(":", 1)
            want = expected_name(rel.parent / (rel.parent.name + ".cppm"))
            if part != rel.stem or primary != want:
                errors.append(f"{rel}: declares `{name}`, expected `{want}:{rel.stem}` (module names follow file paths)")
        elif name != expected_name(rel):
            errors.append(f"{rel}: declares `{name}`, expected `{expected_name(rel)}` (module names follow file paths)")
        interfaces[name] = rel.parent
    for rel in files:
        text = (repo / rel).read_text()
        if rel.suffix == ".cpp":
            m = IMPL.search(text)
            if m and interfaces.get(m.group(1)) != rel.parent:
                where = interfaces.get(m.group(1))
                errors.append(f"{rel}: implements `{m.group(1)}`, whose interface is "
                              + (f"in {where}/" if where else "nowhere") + " (an implementation lives beside its interface)")
        lines = text.split("\n")
        for i, line in enumerate(lines):
            m = REEXPORT.match(line)
            if not m or "//" in m.group(1):
                continue
            j = i - 1
            while j >= 0 and REEXPORT.match(lines[j]):
                j -= 1
            if j < 0 or not lines[j].lstrip().startswith("//"):
                errors.append(f"{rel}:{i + 1}: `{line.strip()}` re-exports without a comment saying why "
                              "(import what the file uses; re-export only a deliberate public face)")
    return errors


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: module_names_check.py REPO")
    errors = check(pathlib.Path(sys.argv[1]).resolve())
    for e in errors:
        print(e)
    if errors:
        sys.exit(1)
    print("module names follow file paths; every re-export says why")


if __name__ == "__main__":
    main()
