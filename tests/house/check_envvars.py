#!/usr/bin/env python3
"""Fails when the table of environment variables (docs/building.md) and the code disagree: every
`LMSCALE_*` variable read in src/, python/, scripts/, tests/ or the ./lmscale bootstrap needs a row
in the table under "## Environment variables", and every row must name a variable something still
reads.
Run by CTest (House.EnvVars); no build needed.

What counts as reading a variable: in C++ and Python, a string literal that is exactly the name
(`getenv("LMSCALE_X")`, `os.environ.get("LMSCALE_X")`, `{"LMSCALE_X", value}` for a child); in
shell, `$LMSCALE_X`, `${LMSCALE_X...}` or `LMSCALE_X=` (set for a child); in CMake, `$ENV{LMSCALE_X}`.
A name after `-D` is a CMake option, not a variable; macros and CMake variables are never quoted.

    python3 tests/house/check_envvars.py [repo root]
    python3 tests/house/check_envvars.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

NAME = r"LMSCALE_[A-Z0-9_]*[A-Z0-9]"
QUOTED = re.compile(r"""(?<![-\w])["'](%s)["']""" % NAME)
SHELL = re.compile(r"(?<!-D)(?:\$\{?(%s)\b|\b(%s)=)" % (NAME, NAME))
CMAKE_ENV = re.compile(r"\$ENV\{(%s)\}" % NAME)
FOLDERS = ("src", "python", "scripts", "tests")
SHELL_SUFFIXES = {".sh", ""}
CODE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".py"}
SELF = "tests/house/check_envvars.py"
TABLE = "docs/building.md"  # the page holding the table


def files(root: Path):
    keep = []
    for p in house_check.tree_files(root):
        rel = p.relative_to(root).as_posix()
        if rel != SELF and (rel == "lmscale" or rel.split("/")[0] in FOLDERS or p.name == "CMakeLists.txt"
                            or p.suffix == ".cmake"):
            keep.append(p)
    return keep


def reads(root: Path):
    """{name: first place it is read}."""
    found = {}
    for rel, text in house_check.texts(root, files(root)):
        path = Path(rel)
        cmake = path.name == "CMakeLists.txt" or path.suffix == ".cmake"
        shell = not cmake and (path.suffix in SHELL_SUFFIXES and (text.startswith("#!") or path.suffix == ".sh"))
        for number, line in enumerate(text.splitlines(), 1):
            names = []
            if cmake:
                names += CMAKE_ENV.findall(line)
            else:
                names += QUOTED.findall(line)  # also inline Python inside shell scripts
                if shell:
                    names += [a or b for a, b in SHELL.findall(line)]
            for name in names:
                found.setdefault(name, f"{rel}:{number}")
    return found


def documented(readme: Path):
    """{name: line} for every row of the table under '## Environment variables'."""
    return {n: line for n, line in house_check.table_names(readme, "Environment variables").items()
            if re.fullmatch(NAME, n)}


def mentioned_anywhere(root: Path):
    """Every LMSCALE_* token in the files that are read, in any form (a row for a variable only
    docs or tests name is stale)."""
    names = set()
    for path in files(root):
        try:
            names.update(re.findall(NAME, path.read_text()))
        except (UnicodeDecodeError, OSError):
            continue
    return names


def problems(root: Path):
    page = root / TABLE
    if not page.is_file():
        yield f"{TABLE} is missing: the table of environment variables lives there"
        return
    rows = documented(page)
    if not rows:
        yield f"{TABLE} has no table under '## Environment variables' (rows start with | `LMSCALE_...` |)"
        return
    for name, where in sorted(reads(root).items()):
        if name not in rows:
            yield f"{where}: reads {name}, which has no row in {TABLE}'s table of environment variables; add one"
    alive = mentioned_anywhere(root)
    for name, line in sorted(rows.items()):
        if name not in alive:
            yield f"{TABLE}:{line}: the row for {name} names a variable nothing in the tree reads; remove the row"


def self_test() -> int:
    """A made-up tree with one variable read but not documented in each language and one stale row."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in ("src", "python", "scripts", "docs"):
            (root / d).mkdir()
        p = "LMSCALE" + "_"  # split: the real check reads this file
        (root / TABLE).write_text(f"# x\n## Environment variables\n| name | by |\n|---|---|\n"
                                        f"| `{p}OK`, `{p}ALSO` | x |\n| `{p}GONE` | x |\n## Next\n| `{p}ELSEWHERE` | x |\n")
        (root / "src/a.cpp").write_text(f'auto v = std::getenv("{p}OK");\nauto w = std::getenv("{p}CPP");\n'
                                        f'#ifdef {p}MACRO\n// -D{p}OPTION=1 in a "-D{p}QUOTED" string\n')
        (root / "python/b.py").write_text(f'import os\nos.environ.get("{p}ALSO")\nos.environ["{p}PY"]\n')
        (root / "scripts/c.sh").write_text(f'#!/bin/bash\necho "${{{p}SH:-x}}" $MISSING\n{p}CHILD=1 run\n'
                                           f"cmake -D{p}CUDA=ON\n")
        found = list(problems(root))
    expected = [f"src/a.cpp:2: reads {p}CPP", f"python/b.py:3: reads {p}PY", f"scripts/c.sh:2: reads {p}SH",
                f"scripts/c.sh:3: reads {p}CHILD", f"{TABLE}:6: the row for {p}GONE"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_envvars", problems, self_test))
