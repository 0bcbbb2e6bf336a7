#!/usr/bin/env python3
"""Fails when the README's layout table and the folders disagree: every folder a row names must
exist, and every top-level folder (by its own row or rows for folders inside it), and every folder
directly inside src/, tests/, scripts/ and python/, needs a row (so "where is the training step, the kernels, DDP, where do results
get written" is answered by a table that is true). Run by CTest (House.Layout); no build needed.

    python3 tests/house/check_layout.py [repo root]
    python3 tests/house/check_layout.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

DEEP = ("src", "tests", "scripts", "python")  # folders whose subfolders each need a row


def folders(root: Path):
    """Folders holding a file of the tree, as posix paths relative to root."""
    found = set()
    for f in house_check.tree_files(root):
        parts = f.relative_to(root).parts[:-1]
        found.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return found


def rows(readme: Path):
    """{folder: line} named in the first cell of the table under '## Layout'."""
    return {n.rstrip("/"): line for n, line in house_check.table_names(readme, "Layout").items()}


def problems(root: Path):
    readme = root / "README.md"
    named = rows(readme) if readme.is_file() else {}
    if not named:
        yield "README.md has no table under '## Layout' (rows start with | `folder` |)"
        return
    present = folders(root)
    for name, line in sorted(named.items()):
        if name not in present:
            yield f"README.md:{line}: the layout table names `{name}`, which is not a folder of the tree"
    needed = {f for f in present if "/" not in f}
    needed |= {f for f in present if f.count("/") == 1 and f.split("/")[0] in DEEP}
    # A top-level folder is covered by its own row or by rows for folders inside it (src/ by src/core, ...).
    covered = set(named) | {n.split("/")[0] for n in named}
    for f in sorted(needed - covered):
        yield f"{f}/: a folder with no row in README.md's layout table; add one saying what it holds"


def self_test() -> int:
    """A made-up tree with a row for a folder that is gone and two folders without rows."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for f in ("src/core/a.h", "src/model/b.h", "src/model/deep/c.h", "docs/x.md", "docs/results/r.md", "tools/t.cu"):
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            (root / f).write_text("x\n")
        (root / "README.md").write_text("# x\n## Layout\n| folder | what |\n|---|---|\n| `src/core`, `src/gone` | a |\n"
                                        "| `docs` | d |\n## Other\n| `tools` | not this table |\n")
        found = list(problems(root))
    expected = ["README.md:5: the layout table names `src/gone`", "src/model/: a folder with no row",
                "tools/: a folder with no row"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_layout", problems, self_test))
