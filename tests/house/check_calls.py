#!/usr/bin/env python3
"""Fails on a call that cannot work inside a process that has loaded libtorch:

- `std::filesystem::remove_all` (or `fs::remove_all`) in src/ or tests/cpp/: libtorch.so exports its own copy of
  that symbol, the dynamic linker binds lmscale's call to it, and that copy crashes (a call through a null pointer:
  the resumed `lmscale train` of 2026-12-02 died so while pruning an old checkpoint). Remove a tree with nftw
  (src/train_app/checkpoint.cpp's remove_tree, tests/cpp/support/temp_dirs.h).

A comment that names the call (to say why it is not used) is not a call: lines whose code part before `//` lacks
it pass. Run by CTest (House.Calls); no build needed.

    python3 tests/house/check_calls.py [repo root]
    python3 tests/house/check_calls.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

FORBIDDEN = {re.compile(r"\b(std::filesystem|fs)::remove_all\s*\("):
             "std::filesystem::remove_all binds to libtorch's copy and crashes; remove the tree with nftw "
             "(remove_tree in src/train_app/checkpoint.cpp, tests/cpp/support/temp_dirs.h)"}
SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".hpp", ".cc"}


def problems(root: Path):
    files = [p for p in house_check.tree_files(root)
             if p.suffix in SUFFIXES and p.relative_to(root).parts[0] in ("src", "tests", "tools", "python")]
    for rel, text in house_check.texts(root, files):
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("//", 1)[0]
            for pattern, why in FORBIDDEN.items():
                if pattern.search(code):
                    yield f"{rel}:{number}: {why}"


def self_test() -> int:
    """A made-up tree with two calls and one comment naming the call: both calls, and only they, reported."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src").mkdir()
        call = "remove" + "_all("  # split: the real check reads this file
        (root / "src/a.cpp").write_text(f"void f() {{ std::filesystem::{call}p); }}\n"
                                        f"// not std::filesystem::{call}): it crashes\n")
        (root / "src/b.cpp").write_text(f"void g() {{ fs::{call}p, ec); }}\n")
        found = list(problems(root))
    return house_check.expect_found(found, ["a.cpp:1:", "b.cpp:1:"])


if __name__ == "__main__":
    sys.exit(house_check.main("check_calls", problems, self_test))
