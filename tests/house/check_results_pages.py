#!/usr/bin/env python3
"""Fails when a committed page names a folder outside the repository: a results page (any .md under
docs/results/, written by `lmscale report` or by hand) may name no absolute path at all, since what it
shows must be findable in the tree, and no page (README.md, docs/**/*.md, scripts/gpu/README.md) may
name a folder of the machine it was written on (the checkout's folder or one above it, the home
folder), where a run's local checkout leaked in. Paths on the GPU image that the docs explain (`/opt/gcc/bin/g++`) are
allowed outside docs/results/. Logs (.log) are not pages and are not checked; transcripts of runs
(`*_transcript.md`, written by scripts/) quote error messages as they came (a library's own source
path), so only the development-machine rule holds for them. Run by CTest (House.ResultsPages); no
build needed.

    python3 tests/house/check_results_pages.py [repo root]
    python3 tests/house/check_results_pages.py --self-test   # it catches what it should, on a made-up tree
"""
import os
import re
import sys
from pathlib import Path

import house_check

# An absolute path of at least two parts, not inside a URL, a relative path or a fraction ("1/2").
ABSOLUTE = re.compile(r"(?<![\w.~/:<>-])/[A-Za-z_][\w.-]*/[\w./-]*")
RESULTS = "docs/results/"


def pages(root: Path):
    """The committed pages: README.md, scripts/gpu/README.md and every .md under docs/."""
    keep = []
    for p in house_check.tree_files(root):
        rel = p.relative_to(root).as_posix()
        if p.suffix == ".md" and (rel in ("README.md", "scripts/gpu/README.md") or rel.startswith("docs/")):
            keep.append(p)
    return keep


def machine_folders(root: Path, home: str):
    """This machine's folders a page must not name: the checkout's, those above it (not /), the home folder."""
    folders = {str(p) for p in [root.resolve(), *root.resolve().parents] if str(p) != "/"}
    if home and home != "/":
        folders.add(home.rstrip("/"))
    return tuple(f + "/" for f in folders)


def problems(root: Path, home: str = os.path.expanduser("~")):
    local = machine_folders(root, home)
    for rel, text in house_check.texts(root, pages(root)):
        results = rel.startswith(RESULTS) and not rel.endswith("_transcript.md")
        for number, line in enumerate(text.splitlines(), 1):
            for path in ABSOLUTE.findall(line):
                if results:
                    yield (f"{rel}:{number}: names {path}, a folder outside the repository; a results page "
                           "names files relative to its folder (rebuild it with `lmscale report` from the "
                           "repository root)")
                elif path.startswith(local):
                    yield f"{rel}:{number}: names {path}, a folder of a development machine; write it relative to the repository"


def self_test() -> int:
    """A made-up tree with the tree's own folder in an index, the home folder in a note, and what is allowed."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "checkout"
        here, home = root.resolve(), str(Path(tmp).resolve() / "me")
        files = {
            "docs/results/index.md": f"- run it later: PYTHONPATH={here}/python python3 -m x\n"
                                     "- [e2e.md](e2e.md), 1/2 of the state, 10 GB/s, https://x.org/a/b\n",
            "docs/results/run/README.md": "built in `/tmp/b` on the GPU machine\n",
            "docs/notes.md": f"the GPU image's `/opt/gcc/bin/g++`; see {home}/lmscale/docs\n",
            "docs/results/run.log": f"{here}/build/lmscale: a log\n",
            "docs/results/x_transcript.md": f"error at /pytorch/third_party/gloo/a.cc; in {home}/x\n",
            "src/a.md": f"{home}/elsewhere/x is not a page\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        found = list(problems(root, home))
    expected = [f"docs/results/index.md:1: names {here}/python", "docs/results/run/README.md:1: names /tmp/b",
                f"docs/notes.md:1: names {home}/lmscale/docs", f"docs/results/x_transcript.md:1: names {home}/x"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_results_pages", problems, self_test))
