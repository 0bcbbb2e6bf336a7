"""What the checks of tests/house share: the files of the tree, the comparison a self-test makes,
and the command line (`check_x.py [repo root]`, `check_x.py --self-test`)."""
import re
import subprocess
import sys
from pathlib import Path

SKIP_PARTS = {".git", ".deps", ".venv", "build", "node_modules"}


def tree_files(root: Path):
    """The files git tracks, and the untracked ones it does not ignore, as absolute paths; without
    git (a copied tree), every file outside build folders and environments."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        paths = [root / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in root.rglob("*") if not SKIP_PARTS & set(p.relative_to(root).parts)]
    return [p for p in paths if p.is_file()]


def texts(root: Path, paths):
    """(path relative to root as posix, text) of each path in order, skipping files that are not
    UTF-8 text."""
    for path in sorted(paths):
        try:
            yield path.relative_to(root).as_posix(), path.read_text()
        except (UnicodeDecodeError, OSError):
            continue


def table_names(doc: Path, heading: str):
    """{name: line number} for every `backticked` name in the first cell of the table rows under
    the heading `## <heading>` of doc (up to the next `## `)."""
    names, inside = {}, False
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if line.startswith("## "):
            inside = line.strip() == "## " + heading
            continue
        cells = line.split("|")
        if inside and len(cells) > 2 and not cells[0].strip():
            for name in re.findall(r"`([^`]+)`", cells[1]):
                names[name] = number
    return names


def expect_found(found, expected) -> int:
    """A self-test's verdict: every expected text occurs in one reported problem, and nothing else
    was reported. 0 when so; otherwise prints what differs and returns 1."""
    missed = [e for e in expected if not any(e in f for f in found)]
    for m in missed:
        print(f"self-test: expected a problem like '{m}', got: {found}")
    if len(found) != len(expected):
        print(f"self-test: expected {len(expected)} problems, got {len(found)}: {found}")
    return 1 if missed or len(found) != len(expected) else 0


def main(name: str, problems, self_test, noun: str = "problem") -> int:
    """Runs `self_test()` for --self-test, else prints every item of `problems(root)` and a count;
    exit status 1 when there were any."""
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    found = list(problems(root))
    for p in found:
        print(p)
    print(f"{name}: {len(found)} {noun}(s)")
    return 1 if found else 0
