#!/usr/bin/env python3
"""Fails when docs/results stops being findable: current results by topic, history as dated runs, and
an index of both.

- every folder directly in docs/results/ (a topic) and in docs/results/runs/ (a run) has a README.md,
  whose first line says what it holds;
- a run folder is named `<date>-<commit>-<topic>` (2026-11-26-7b00789-attention);
- records (`.jsonl`) live in run folders only: a topic page cites runs, it does not merge them;
- docs/results/index.md (written by `lmscale report --in docs/results --out docs/results`) lists every
  folder that has a README.md, with that page's first line, and no folder that is gone.

Run by CTest (House.ResultsIndex); no build needed.

    python3 tests/house/check_results_index.py [repo root]
    python3 tests/house/check_results_index.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

RESULTS = "docs/results"
RUN_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-[0-9a-f]{7,40}-[a-z0-9][a-z0-9._-]*$")
ENTRY = re.compile(r"^- \[([^\]]+)/\]\(([^)]+)/README\.md\) — (.*)$")


def first_line(page: Path) -> str:
    lines = page.read_text().splitlines()
    return lines[0].lstrip("# ").rstrip() if lines else ""


def problems(root: Path):
    base = root / RESULTS
    files = [p.relative_to(base).as_posix() for p in house_check.tree_files(root)
             if p.is_relative_to(base)]
    folders = {"/".join(f.split("/")[:n]) for f in files for n in range(1, f.count("/") + 1)}
    have_readme = {f.rsplit("/", 1)[0] for f in files if f.endswith("/README.md")}
    for folder in sorted(folders):
        parts = folder.split("/")
        if len(parts) == 1 and folder != "runs" and folder not in have_readme:
            yield f"{RESULTS}/{folder}/: a topic folder needs a README.md whose first line says what it holds"
        if len(parts) == 2 and parts[0] == "runs":
            if not RUN_NAME.match(parts[1]):
                yield f"{RESULTS}/{folder}/: a run folder is named <date>-<commit>-<topic> (2026-11-26-7b00789-attention)"
            if folder not in have_readme:
                yield f"{RESULTS}/{folder}/: a run folder needs a README.md (first line: what ran, where, when)"
    for f in files:
        if f.endswith(".jsonl") and not f.startswith("runs/"):
            yield f"{RESULTS}/{f}: records live in a run folder (runs/<date>-<commit>-<topic>/), not beside the topics"
    index = base / "index.md"
    if not index.is_file():
        yield f"{RESULTS}/index.md is missing: `lmscale report --in {RESULTS} --out {RESULTS}` writes it"
        return
    listed = {}
    for number, line in enumerate(index.read_text().splitlines(), 1):
        m = ENTRY.match(line)
        if m:
            listed[m.group(1)] = (number, m.group(3).strip())
    for folder in sorted(have_readme):
        want = first_line(base / folder / "README.md")
        if folder not in listed:
            yield (f"{RESULTS}/index.md misses {folder}/ ({want}); rebuild it: "
                   f"lmscale report --in {RESULTS} --out {RESULTS}")
        elif listed[folder][1] != want:
            yield (f"{RESULTS}/index.md:{listed[folder][0]}: {folder}/ is listed as '{listed[folder][1]}', its "
                   f"README.md now opens '{want}'; rebuild the index")
    for folder, (number, _) in sorted(listed.items()):
        if folder not in have_readme:
            yield f"{RESULTS}/index.md:{number}: lists {folder}/, which has no README.md (gone or moved); rebuild the index"


def self_test() -> int:
    """A made-up tree: a topic and a run without README, a badly named run, records beside the topics,
    an index that misses a folder, lists a gone one and has a stale first line."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            f"{RESULTS}/README.md": "# Results\n",
            f"{RESULTS}/e2e/README.md": "# The step\n",
            f"{RESULTS}/notopic/x.md": "x\n",
            f"{RESULTS}/stray.jsonl": "{}\n",
            f"{RESULTS}/runs/2026-11-26-7b00789-attention/README.md": "# Attention, H100\n",
            f"{RESULTS}/runs/2026-11-26-7b00789-attention/attention.jsonl": "{}\n",
            f"{RESULTS}/runs/2026-11-26-7b00789-attention/sub/README.md": "# A call\n",
            f"{RESULTS}/runs/2026-11-27-abc1234-fp8/fp8.jsonl": "{}\n",
            f"{RESULTS}/runs/attention_v5/README.md": "# Old name\n",
            f"{RESULTS}/index.md": "# Results index\n\n## Folders\n\n"
                                   "- [e2e/](e2e/README.md) — The step, old title\n"
                                   "- [gone/](gone/README.md) — Gone\n"
                                   "- [runs/2026-11-26-7b00789-attention/](runs/2026-11-26-7b00789-attention/README.md) — Attention, H100\n"
                                   "- [runs/attention_v5/](runs/attention_v5/README.md) — Old name\n",
        }
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        found = list(problems(root))
    expected = [f"{RESULTS}/notopic/: a topic folder needs a README.md",
                f"{RESULTS}/runs/2026-11-27-abc1234-fp8/: a run folder needs a README.md",
                f"{RESULTS}/runs/attention_v5/: a run folder is named",
                f"{RESULTS}/stray.jsonl: records live in a run folder",
                f"{RESULTS}/index.md:5: e2e/ is listed as 'The step, old title'",
                f"{RESULTS}/index.md misses runs/2026-11-26-7b00789-attention/sub/",
                f"{RESULTS}/index.md:6: lists gone/"]
    return house_check.expect_found(found, expected)


if __name__ == "__main__":
    sys.exit(house_check.main("check_results_index", problems, self_test))
