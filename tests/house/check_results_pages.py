#!/usr/bin/env python3
"""Fails when a committed page names a folder outside the repository: a results page (any .md under
docs/results/, written by `lmscale report` or by hand) may name no absolute path at all, since what it
shows must be findable in the tree, and no page (README.md, docs/**/*.md, scripts/gpu/README.md) may
name a folder of a development machine (/work/..., /home/..., /root/..., /Users/...), where a run's
local checkout leaked in. Paths on the GPU image that the docs explain (`/opt/gcc/bin/g++`) are
allowed outside docs/results/. Logs (.log) are not pages and are not checked; transcripts of runs
(`*_transcript.md`, written by scripts/) quote error messages as they came (a library's own source
path), so only the development-machine rule holds for them. Run by CTest (House.ResultsPages); no
build needed.

    python3 tests/house/check_results_pages.py [repo root]
    python3 tests/house/check_results_pages.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

# An absolute path of at least two parts, not inside a URL, a relative path or a fraction ("1/2").
ABSOLUTE = re.compile(r"(?<![\w.~/:<>-])/[A-Za-z_][\w.-]*/[\w./-]*")
DEV_MACHINE = ("/work/", "/home/", "/root/", "/Users/")
RESULTS = "docs/results/"


def pages(root: Path):
    """The committed pages: README.md, scripts/gpu/README.md and every .md under docs/."""
    keep = []
    for p in house_check.tree_files(root):
        rel = p.relative_to(root).as_posix()
        if p.suffix == ".md" and (rel in ("README.md", "scripts/gpu/README.md") or rel.startswith("docs/")):
            keep.append(p)
    return keep


def problems(root: Path):
    for rel, text in house_check.texts(root, pages(root)):
        results = rel.startswith(RESULTS) and not rel.endswith("_transcript.md")
        for number, line in enumerate(text.splitlines(), 1):
            for path in ABSOLUTE.findall(line):
                if results:
                    yield (f"{rel}:{number}: names {path}, a folder outside the repository; a results page "
                           "names files relative to its folder (rebuild it with `lmscale report` from the "
                           "repository root)")
                elif path.startswith(DEV_MACHINE):
                    yield f"{rel}:{number}: names {path}, a folder of a development machine; write it relative to the repository"


def self_test() -> int:
    """A made-up tree with a local path in an index, one in a note, and what is allowed."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            "docs/results/index.md": "- run it later: PYTHONPATH=/work/main/python python3 -m x\n"
                                     "- [e2e.md](e2e.md), 1/2 of the state, 10 GB/s, https://x.org/a/b\n",
            "docs/results/run/README.md": "built in `/tmp/b` on the GPU machine\n",
            "docs/notes.md": "the GPU image's `/opt/gcc/bin/g++`; see /home/me/lmscale/docs\n",
            "docs/results/run.log": "/work/main/build/lmscale: a log\n",
            "docs/results/x_transcript.md": "error at /pytorch/third_party/gloo/a.cc; in /home/me/x\n",
            "src/a.md": "/home/elsewhere/x is not a page\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        found = list(problems(root))
    expected = ["docs/results/index.md:1: names /work/main/python", "docs/results/run/README.md:1: names /tmp/b",
                "docs/notes.md:1: names /home/me/lmscale/docs", "docs/results/x_transcript.md:1: names /home/me/x"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_results_pages", problems, self_test))
