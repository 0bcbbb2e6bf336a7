#!/usr/bin/env python3
"""Fails when a page links to a file or folder that is not in the tree: every relative Markdown link
(`[text](path)`, `[text](path#anchor)`) of README.md, docs/**/*.md, scripts/gpu/README.md and
tools/**/*.md must resolve from the page's folder, so moving a results folder or a doc cannot leave a
dead link behind. Web links and in-page anchors are not checked; links inside code (backticks, fenced
blocks) are code, not links.

Run by CTest (House.Links); no build needed.

    python3 tests/house/check_links.py [repo root]
    python3 tests/house/check_links.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")
FENCE = re.compile(r"^\s*```")


def pages(root: Path):
    for p in house_check.tree_files(root):
        rel = p.relative_to(root).as_posix()
        if p.suffix == ".md" and (rel in ("README.md", "scripts/gpu/README.md") or rel.startswith(("docs/", "tools/"))):
            yield p


def problems(root: Path):
    present = {p.relative_to(root).as_posix() for p in house_check.tree_files(root)}
    folders = {"/".join(f.split("/")[:n]) for f in present for n in range(1, f.count("/") + 1)}
    for rel, text in house_check.texts(root, list(pages(root))):
        fenced = False
        for number, line in enumerate(text.splitlines(), 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            for target in LINK.findall(CODE_SPAN.sub("", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                path = target.split("#")[0]
                resolved = (root / rel).parent / path
                try:
                    key = resolved.resolve().relative_to(root.resolve()).as_posix()
                except ValueError:
                    yield f"{rel}:{number}: links to {target}, outside the repository"
                    continue
                if key not in present and key not in folders and key != ".":
                    yield f"{rel}:{number}: links to {target}, which is not in the tree"


def self_test() -> int:
    """A made-up tree: a dead link, a dead folder link, a link out of the repository, and what passes
    (a good link, a folder, an anchor, a web link, a link inside code)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            "README.md": "[a](docs/a.md) [b](docs/gone.md) [web](https://x.org/y) [top](#top)\n",
            "docs/a.md": "[r](results/run/README.md#x) [f](results/run/) [g](results/old/)\n"
                         "`[code](nothing.md)`\n```\n[fenced](nothing.md)\n```\n[up](../../etc/passwd)\n",
            "docs/results/run/README.md": "# run\n",
            "tools/probes/x/README.md": "[s](../../../scripts/gpu/README.md)\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        found = list(problems(root))
    expected = ["README.md:1: links to docs/gone.md", "docs/a.md:1: links to results/old/",
                "docs/a.md:6: links to ../../etc/passwd, outside", "tools/probes/x/README.md:1: links to ../../../scripts/gpu/README.md"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_links", problems, self_test))
