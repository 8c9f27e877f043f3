#!/usr/bin/env python3
"""Checks docs/architecture.md's rooms table against the CMake targets.

Every top-level folder that builds a target must have a row, and the row's
"may import" column must name exactly the project folders whose targets that
folder's targets link directly (its CMakeLists.txt and the .cmake files it
includes). So the page fails this test the moment a target gains or loses an
import the page does not list. Usage: architecture_check.py REPO [--print]
"""
import pathlib
import re
import sys

SKIP = {"tests", "cmake", "scripts", "build"}


def commands(text, name):
    """Yields the argument lists of every `name(...)` call in CMake text."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b" + name + r"\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text[m.end() : i - 1].split()


def folder_files(repo):
    """Each top-level folder's CMake sources: CMakeLists.txt and its .cmake files."""
    for cm in sorted(repo.glob("*/CMakeLists.txt")):
        folder = cm.parent.name
        if folder in SKIP or folder.startswith("build"):
            continue
        yield folder, [cm, *sorted(cm.parent.rglob("*.cmake"))]


def target_graph(repo):
    defined = {}  # target name (may hold ${var}) -> folder
    links = []  # (folder, target, [linked names])
    for folder, files in folder_files(repo):
        for f in files:
            text = f.read_text()
            for args in [*commands(text, "add_library"), *commands(text, "add_executable")]:
                if args:
                    defined[args[0]] = folder
            for args in commands(text, "target_link_libraries"):
                if args:
                    links.append((folder, args[0], args[1:]))
    patterns = [(re.compile("^" + re.sub(r"\\\$\\\{[^}]*\\\}", ".+", re.escape(t)) + "$"), f)
                for t, f in defined.items()]

    def owner(name):
        for rx, f in patterns:
            if rx.match(name):
                return f
        return None

    deps = {f: set() for f, _ in folder_files(repo)}
    for folder, _target, linked in links:
        for name in linked:
            f = owner(name)
            if f is not None and f != folder:
                deps[folder].add(f)
    return deps


def doc_table(doc):
    rows = {}
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"`[a-z_]+/`", cells[0]):
            continue
        folder = cells[0].strip("`/")
        rows[folder] = (n, {m for m in re.findall(r"`([a-z_]+)/`", cells[2])})
    return rows


def check(repo):
    """The page's disagreements with the CMake targets, one line each."""
    deps = target_graph(repo)
    doc = repo / "docs" / "architecture.md"
    rows = doc_table(doc)
    errors = []
    for f in sorted(deps):
        if f not in rows:
            errors.append(f"{doc}: the rooms table has no row for `{f}/`, which builds a CMake target")
            continue
        line, listed = rows[f]
        want = {d for d in deps[f]}
        if listed - {"tests"} != want:
            extra = ", ".join(f"{d}/" for d in sorted(listed - want)) or "none"
            missing = ", ".join(f"{d}/" for d in sorted(want - listed)) or "none"
            errors.append(f"{doc}:{line}: `{f}/` may import lists {extra} that its targets do not link, "
                          f"and omits {missing} that they do (from {f}/CMakeLists.txt)")
    for f in sorted(set(rows) - set(deps) - {"tests"}):
        errors.append(f"{doc}:{rows[f][0]}: row `{f}/` names a folder that builds no CMake target")
    return deps, errors


def trial(repo):
    """The check must fail when a target gains an import the page does not
    list: simulator/ linking engine/ in a scratch copy of the CMake files."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        scratch = pathlib.Path(tmp)
        for folder, files in folder_files(repo):
            for f in files:
                dst = scratch / f.relative_to(repo)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, dst)
        (scratch / "docs").mkdir()
        shutil.copy(repo / "docs" / "architecture.md", scratch / "docs")
        with open(scratch / "simulator" / "CMakeLists.txt", "a") as f:
            f.write("\ntarget_link_libraries(slicesched_simulator PUBLIC slicesched_engine)\n")
        _, errors = check(scratch)
        return any("`simulator/`" in e and "omits engine/" in e for e in errors)


def main():
    repo = pathlib.Path(sys.argv[1]).resolve()
    if "--print" in sys.argv:
        for f, d in sorted(target_graph(repo).items()):
            print(f"{f}/: " + ", ".join(f"{x}/" for x in sorted(d)))
        return 0
    deps, errors = check(repo)
    for e in errors:
        print(e)
    if not trial(repo):
        print("architecture_check: a deliberate extra import (simulator/ -> engine/) went unnoticed")
        return 1
    if not errors:
        print(f"architecture.md: {len(deps)} rooms agree with their CMake targets "
              "(and a deliberate extra import is caught)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
