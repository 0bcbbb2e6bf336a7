#!/usr/bin/env python3
"""Fails when a command the docs tell a user to paste no longer parses. Reads the code blocks of
README.md, docs/*.md and scripts/gpu/README.md (not docs/results/: those are transcripts of runs at
a named commit), takes every `./lmscale ...`, `lmscale ...` and `python -m lmscale...` line (with
its continuation lines), and checks each one without running the work:

- `./lmscale build|test|python-install`: the bootstrap script has that action;
- any other `lmscale` command: `<binary> <the command's words> --help` exits 0 (the subcommand exists
  and every value passes the CLI's validators), prints no deprecation note (the docs use today's
  spellings), and every flag the command uses is listed in that subcommand's help (CLI11 stops at
  --help before it rejects unknown flags, so this is checked here); `launch ... -- <command>` checks
  both halves;
- `python -m <module> ...`: the module's own `--help` parses the command (argparse), or, for
  `python -m lmscale` (no arguments, nothing heavy), the command runs.

Run by CTest (House.DocCommands) with the built CLI; synopsis lines (`[--size small]`) and lines with
placeholders (`<folder>`, `…`) are not commands and are skipped. `$OUT`, `$T` and the like become a
temporary folder.

    python3 tests/house/check_doc_commands.py ROOT --lmscale BUILD/lmscale [--python PYTHON]
    python3 tests/house/check_doc_commands.py --self-test
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import house_check

BOOTSTRAP_ACTION = re.compile(r"^\s{2}([a-z][a-z-]*)\)", re.M)  # `  build)` in ./lmscale's case
FENCE = re.compile(r"^\s*```")
PLACEHOLDER = re.compile(r"<[a-zA-Z][^>]*>|…|\.\.\.|\[--|\[[A-Z]|(?<=\s)[A-Z](?=\s|$)")  # -n N: a placeholder
ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
FLAG = re.compile(r"^(--?[A-Za-z][A-Za-z0-9-]*)")
HELP_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9-]*)")


def doc_files(root: Path):
    files = [root / "README.md", root / "scripts/gpu/README.md"]
    files += sorted(p for p in (root / "docs").glob("*.md"))
    return [f for f in files if f.is_file()]


INLINE = re.compile(r"`((?:[A-Z_]+=\S+ )*(?:\./lmscale|lmscale|python3? -m lmscale)\b[^`]*)`")


def code_lines(text: str):
    """(line number, line) of every line inside a fenced code block or indented by 4+ spaces after
    a blank line (a Markdown code block), continuation lines joined; in prose, each inline code span
    that starts like a command (`./lmscale info`)."""
    out, fenced, pending, start, prev_blank, indented = [], False, "", 0, True, False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            prev_blank = False
            continue
        if not line.strip():
            prev_blank, indented = True, False
            continue
        is_code = fenced or ((indented or prev_blank) and line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|")))
        indented = is_code and not fenced
        prev_blank = False
        if not is_code:
            out += [(number, m.group(1)) for m in INLINE.finditer(line)
                    if not re.search(r"[|&;]", m.group(1)) and " " in m.group(1).strip()]
            continue
        body = strip_comment(line.strip())
        if pending:
            pending += " " + body
        else:
            pending, start = body, number
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append((start, pending))
        pending = ""
    return out


def strip_comment(line: str) -> str:
    if line.startswith("$ "):
        line = line[2:]
    m = re.search(r"\s#\s", line)
    return line[: m.start()].rstrip() if m else line


def commands(root: Path):
    """(where, kind, words): kind 'bootstrap', 'cli' or 'python'."""
    for doc in doc_files(root):
        rel = doc.relative_to(root).as_posix()
        for number, line in code_lines(doc.read_text()):
            if PLACEHOLDER.search(line):
                continue
            try:
                words = shlex.split(line)
            except ValueError:
                continue
            while words and ENV_ASSIGN.match(words[0]):
                words = words[1:]
            where = f"{rel}:{number}"
            if not words:
                continue
            if words[0] == "./lmscale" and len(words) > 1 and words[1] in ("build", "test", "python-install"):
                yield where, "bootstrap", words[1:]
            elif words[0] in ("./lmscale", "lmscale") and len(words) > 1 and not words[1].startswith("#"):
                yield where, "cli", words[1:]
            elif len(words) > 2 and re.fullmatch(r"python3?", words[0]) and words[1] == "-m" and \
                    words[2].split(".")[0] == "lmscale":
                yield where, "python", words[2:]


def substitute(words, tmp):
    return [re.sub(r"\$\{?[A-Z][A-Z0-9_]*\}?", tmp, w) for w in words]


def run(argv, env=None, timeout=60):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        return r.returncode, r.stdout, r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, "", str(e)


def check_cli(binary, words, tmp):
    """Problems of one `lmscale <words>` command (a launch checks its own flags and the inner command)."""
    if "--" in words and words[0] == "launch":
        cut = words.index("--")
        return check_cli(binary, words[:cut], tmp) + check_cli(binary, words[cut + 1:], tmp)
    words = substitute(words, tmp)
    rc, out, err = run([binary] + words + ["--help"])
    if rc != 0:
        return [f"`lmscale {' '.join(words)} --help` exits {rc}: {(err or out).strip().splitlines()[:1]}"]
    found = []
    old = set(re.findall(r"(--[a-z-]+) is deprecated", err))
    if "deprecated" in err:
        found.append(f"uses an old spelling ({err.strip().splitlines()[0]}); write today's")
    usage = re.search(r"^Usage: lmscale ([^\[\n]*)", out, re.M)
    path = usage.group(1).split() if usage else []
    positional = [w for w in words if not w.startswith("-")]
    if path and positional[: len(path)] != path:
        found.append(f"the subcommand is `{' '.join(positional[:len(path)])}`, but --help shows `lmscale {' '.join(path)}`")
    known = set(HELP_FLAG.findall(out.split("Subcommands:")[0]))
    for w in words:
        m = FLAG.match(w)
        if m and not re.match(r"^-\d", w) and m.group(1) not in known | old:
            found.append(f"`{m.group(1)}` is not an option of `lmscale {' '.join(path)}`")
    return found


def check_python(python, words, root, tmp, binary):
    # The package from this tree, the library from the CLI's build folder.
    env = dict(os.environ, PYTHONPATH=str(root / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               LMSCALE_BUILD_DIR=str(Path(binary).resolve().parent))
    words = substitute(words, tmp)
    argv = [python, "-m"] + words + ([] if words == ["lmscale"] else ["--help"])
    rc, out, err = run(argv, env=env, timeout=120)
    if rc != 0:
        return [f"`python -m {' '.join(words)}` exits {rc}: {(err or out).strip().splitlines()[-1:]}"]
    return []


def problems(root: Path, binary: str, python: str):
    actions = set(BOOTSTRAP_ACTION.findall((root / "lmscale").read_text()))
    found, jobs, seen = [], [], {}
    with tempfile.TemporaryDirectory(prefix="lmscale-doc-commands-") as tmp, ThreadPoolExecutor(4) as pool:
        for where, kind, words in commands(root):
            if kind == "bootstrap":
                if words[0] not in actions:
                    found.append(f"{where}: ./lmscale has no action '{words[0]}'")
            elif (kind, tuple(words)) in seen:  # the same command again: checked once, reported at each place
                jobs.append((where, seen[kind, tuple(words)]))
            elif kind == "cli":
                seen[kind, tuple(words)] = pool.submit(check_cli, binary, words, tmp)
                jobs.append((where, seen[kind, tuple(words)]))
            elif python:
                seen[kind, tuple(words)] = pool.submit(check_python, python, words, root, tmp, binary)
                jobs.append((where, seen[kind, tuple(words)]))
        for where, job in jobs:
            found += [f"{where}: {p}" for p in job.result()]
    return found, len(seen)


def self_test() -> int:
    """A made-up tree whose docs hold good and bad commands, checked with a fake CLI."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        (root / "lmscale").write_text('case "$cmd" in\n  build) b ;;\n  test)\n    t ;;\nesac\n')
        fake = root / "fake_cli"
        fake.write_text("#!/bin/sh\n"
                        'case "$1" in bench) ;; *) echo "no subcommand $1" >&2; exit 2 ;; esac\n'
                        'for a in "$@"; do case "$a" in --size=huge|huge) echo "bad size" >&2; exit 2 ;; '
                        '--contexts) echo "note: --contexts is deprecated" >&2 ;; esac; done\n'
                        'echo "Usage: lmscale bench [OPTIONS]"; echo "  --size SIZE"; echo "  --context INT"\n')
        fake.chmod(0o755)
        (root / "README.md").write_text(
            "# x\n```bash\n./lmscale build\n./lmscale bench --size small \\\n    --context 128   # fine\n"
            "./lmscale deploy\nlmscale bench --size huge\nlmscale bench --contexts 128\n"
            "lmscale bench --colour red\nlmscale profile [--size small]\n```\nprose ./lmscale nosuch\n"
            "\n    lmscale launch -n 2 -- bench --size small\n"
            "Prose with `lmscale bench --size small`, `lmscale report --in <folder>`, `lmscale bench --sizes x`.\n")
        found, _ = problems(root, str(fake), "")
    expected = ["README.md:6: `lmscale deploy --help` exits 2", "README.md:7: `lmscale bench --size huge --help`",
                "README.md:8: uses an old", "README.md:9: `--colour`", "README.md:14: `lmscale launch -n 2 --help` exits 2",
                "README.md:15: `--sizes`"]
    return house_check.expect_found(found, expected)


def default_python() -> str:
    import importlib.util
    return sys.executable if importlib.util.find_spec("torch") else ""


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path)
    p.add_argument("--lmscale", required=True, help="the built CLI")
    p.add_argument("--python", default=os.environ.get("LMSCALE_PYTHON") or default_python(),
                   help="an interpreter with torch for the python -m commands (default $LMSCALE_PYTHON, else this "
                        "one when it has torch; none: those are skipped)")
    a = p.parse_args()
    found, checked = problems(a.root.resolve(), a.lmscale, a.python)
    for f in found:
        print(f)
    print(f"check_doc_commands: {checked} distinct commands checked, {len(found)} problem(s)"
          + ("" if a.python else "; python -m commands skipped (no --python)"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
