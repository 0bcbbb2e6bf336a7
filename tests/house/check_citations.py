#!/usr/bin/env python3
"""Fails when a citation in the tree names a section that does not exist: `docs/spec.md §N` (or
§N.M) must match a heading `## N.` (or `### N.M`) of docs/spec.md, the same for docs/design.md, and
a bare §N inside one of those two files must match a heading of that file. Also fails on citations
of the documents that are not in this repository (the spec's and design's predecessors). Run by
CTest (House.Citations); no build needed.

    python3 tests/house/check_citations.py [repo root]
    python3 tests/house/check_citations.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

CITED = {"spec": "docs/spec.md", "design": "docs/design.md"}
CITATION = re.compile(r"\b(spec|design)\.md §(\d+(?:\.\d+)?)")
BARE = re.compile(r"(?<!\.md )§(\d+(?:\.\d+)?)")
HEADING = re.compile(r"^(##|###)\s+(\d+(?:\.\d+)?)\.?\s")
# Documents that lived outside the repository; written split so this file does not match itself.
GONE = {"REFERENCE" + " §": "docs/spec.md §N (same numbers)", "STYLE" + ".md": "docs/design.md §5",
        "DESIGN" + ".md": "docs/design.md §N"}
TEXT_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".py", ".sh", ".md", ".txt", ".cmake", ""}


def sections(doc: Path):
    found = set()
    for line in doc.read_text().splitlines():
        m = HEADING.match(line)
        if m and (m.group(1) == "##") == ("." not in m.group(2)):
            found.add(m.group(2))
    return found


def tracked_files(root: Path):
    return [p for p in house_check.tree_files(root) if p.suffix in TEXT_SUFFIXES or p.name == "CMakeLists.txt"]


def problems(root: Path):
    known = {}
    for key, rel in CITED.items():
        doc = root / rel
        if not doc.is_file():
            yield f"{rel} is missing: every `{key}.md §N` citation needs it"
            return
        known[key] = sections(doc)
    for rel, text in house_check.texts(root, tracked_files(root)):
        own = next((k for k, v in CITED.items() if v == rel), None)
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{rel}:{number}"
            for m in CITATION.finditer(line):
                if m.group(2) not in known[m.group(1)]:
                    yield (f"{where}: {m.group(0)} names no section of {CITED[m.group(1)]} "
                           f"(it has {', '.join(sorted(known[m.group(1)], key=sort_key))})")
            if own and not HEADING.match(line):
                for m in BARE.finditer(line):
                    if m.group(1) not in known[own]:
                        yield f"{where}: §{m.group(1)} names no section of this file"
            for gone, instead in GONE.items():
                if gone in line:
                    yield f"{where}: cites {gone.strip()}, which is not in this repository; cite {instead}"


def sort_key(section: str):
    return [int(x) for x in section.split(".")]


def self_test() -> int:
    """A made-up tree with one good and four bad citations: all four must be reported."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        (root / "src").mkdir()
        (root / "docs/spec.md").write_text("# spec\n## 1. The model\n### 1.1 Parts\nsee §1.1 and §4\n")
        (root / "docs/design.md").write_text("# design\n## 1. Layers\n")
        spec, design = "docs/spec" + ".md §", "docs/design" + ".md §"  # split: the real check reads this file
        (root / "src/a.cpp").write_text(f"// {spec}1.1 is fine\n// {spec}2 is not\n// {design}3 is not\n"
                                        "// " + "STYLE" + ".md is gone\n")
        found = list(problems(root))
    expected = ["spec.md:4: §4", "a.cpp:2: spec.md §2", "a.cpp:3: design.md §3", "a.cpp:4: cites"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_citations", problems, self_test))
