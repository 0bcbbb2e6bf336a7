#!/usr/bin/env python3
"""Fails when the README's layout table and the tree disagree, so "where is the training step, the
kernels, DDP, where do results get written" is answered by a table that is true:

- every folder a row names must exist, and every top-level folder (by its own row or rows for
  folders inside it), and every folder directly inside src/, tests/, scripts/ and python/, needs a row;
- each row's description is checked too: every file it names in backticks (`training_step.h`,
  `plots/`, `scripts/gpu/README.md`) must exist in the row's folders (at any depth) or from the
  repository root, every link must point at a file of the tree, and every row names at least one
  file, so a description can not drift from its folder unnoticed.

Run by CTest (House.Layout); no build needed.

    python3 tests/house/check_layout.py [repo root]
    python3 tests/house/check_layout.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

DEEP = ("src", "tests", "scripts", "python")  # folders whose subfolders each need a row
# A backticked name in a description that names a file: a name ending in one of the tree's suffixes,
# a path with a folder in it (`.ci/run`), or a folder (ending in /). Placeholders (<out>/<bench>.jsonl)
# and code (torch.ops.lmscale.*) are not.
FILE = re.compile(r"^[\w./-]*\w\.(?:h|cuh|cu|cpp|py|sh|cmake|md|txt|toml|json|in)$|^[\w.-]+/[\w./-]*$")
LINK = re.compile(r"\]\(([^)#\s]+)\)")


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


def descriptions(readme: Path):
    """(line, [folders], description) of every row of the table under '## Layout'."""
    out, inside = [], False
    for number, line in enumerate(readme.read_text().splitlines(), 1):
        if line.startswith("## "):
            inside = line.strip() == "## Layout"
            continue
        cells = line.split("|")
        if inside and len(cells) > 3 and not cells[0].strip():
            folders = [n.rstrip("/") for n in re.findall(r"`([^`]+)`", cells[1])]
            if folders:
                out.append((number, folders, "|".join(cells[2:-1])))
    return out


def named_files(description: str):
    """The files and folders a description names in backticks (not inside a link's text)."""
    return [n for n in re.findall(r"`([^`]+)`", re.sub(r"\[[^\]]*\]", "", description)) if FILE.match(n)]


def row_problems(root: Path, files, line, folders, description):
    """What a row's description names that the tree does not hold."""
    rel = [f.relative_to(root).as_posix() for f in files]
    dirs = {"/".join(p.split("/")[:n]) for p in rel for n in range(1, p.count("/") + 1)}
    names = named_files(description)
    for name in names:
        if name.endswith("/"):
            found = name.rstrip("/") in dirs or any(d == f"{folder}/{name.rstrip('/')}" or
                                                    d.startswith(f"{folder}/") and d.endswith("/" + name.rstrip("/"))
                                                    for folder in folders for d in dirs)
        else:
            found = name in rel or name in dirs or any(p.startswith(f"{folder}/") and (p == f"{folder}/{name}" or
                                                                      p.endswith("/" + name))
                                       for folder in folders for p in rel)
        if not found:
            yield (f"README.md:{line}: the row for `{folders[0]}` names `{name}`, which is not in "
                   f"{' or '.join(folders)}/ (nor at that path from the root)")
    for target in LINK.findall(description):
        if not (root / target).exists():
            yield f"README.md:{line}: the row for `{folders[0]}` links to {target}, which does not exist"
    if not names:
        yield f"README.md:{line}: the row for `{folders[0]}` names no file of the folder; name the ones to read"


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
    files = house_check.tree_files(root)
    for line, row_folders, description in descriptions(readme):
        yield from row_problems(root, files, line, row_folders, description)


def self_test() -> int:
    """A made-up tree with a row for a folder that is gone, two folders without rows, a row naming a
    file its folder does not hold, a dead link, and a row that names no file."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for f in ("src/core/a.h", "src/core/deep/b.h", "src/model/b.h", "src/model/deep/c.h", "docs/x.md",
                  "docs/results/r.md", "tools/t.cu"):
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            (root / f).write_text("x\n")
        (root / "README.md").write_text(
            "# x\n## Layout\n| folder | what |\n|---|---|\n"
            "| `src/core`, `src/gone` | a (`a.h`, `b.h`, `deep/`, `x.md`, `<out>/<b>.jsonl`, `torch.ops.x.*`) |\n"
            "| `docs` | d (`x.md`, `missing.md`, [r](docs/results/r.md), [gone](docs/gone.md)) |\n"
            "| `docs/results` | results, no file named |\n"
            "## Other\n| `tools` | not this table |\n")
        found = list(problems(root))
    expected = ["README.md:5: the layout table names `src/gone`", "src/model/: a folder with no row",
                "tools/: a folder with no row", "README.md:5: the row for `src/core` names `x.md`",
                "README.md:6: the row for `docs` names `missing.md`",
                "README.md:6: the row for `docs` links to docs/gone.md",
                "README.md:7: the row for `docs/results` names no file"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_layout", problems, self_test))
