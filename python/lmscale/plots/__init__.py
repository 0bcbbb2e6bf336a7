"""Plots of lmscale's results, drawn from the JSON Lines records alone (docs/results/SCHEMA.md).

    python -m lmscale.plots report docs/results            # every plot the folder's records allow
    python -m lmscale.plots memory TIMELINE.json OUT.png   # one `lmscale memory` timeline

`lmscale report` and `lmscale memory` run these through the interpreter (``$LMSCALE_PYTHON``).
Only matplotlib is needed: importing this package does not load lmscale's C++ library. Every figure
says which GPU, commit and date its numbers come from, draws only panels that have data, and is
saved with its title inside the picture.
"""
import json
import pathlib
import re
import textwrap

import matplotlib

matplotlib.use("Agg")  # files only: GPU machines have no display
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["load", "newest", "groups", "figure_path", "provenance", "save", "plt"]


def load(folder, bench):
    """The records of <folder>/<bench>.jsonl (no file: none). A damaged line is skipped with a warning
    naming file:line, as `lmscale report` does."""
    path = pathlib.Path(folder) / f"{bench}.jsonl"
    if not path.exists():
        return []
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            print(f"warning: {path}:{n}: not valid JSON; line skipped")
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def newest(records, config):
    """The latest record of every `config` tuple, on the GPU of the latest record (a sweep split over
    several invocations is then drawn whole, and two GPUs are never mixed in one picture)."""
    if not records:
        return []
    gpu = max(records, key=lambda r: r.get("date", "")).get("gpu")
    latest = {}
    for r in sorted((r for r in records if r.get("gpu") == gpu), key=lambda r: r.get("date", "")):
        latest[tuple(r.get(k) for k in config)] = r
    return list(latest.values())


def groups(records, keys):
    """The records split by their values of `keys` (one figure each: two GPUs, two world sizes or two
    model sizes are never drawn as if they were one run), in the order first seen."""
    split = {}
    for r in records:
        split.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return split


def figure_path(folder, name, key, several):
    """<folder>/<name>.png for the only group, <name>_<key values>.png when there are several."""
    if not several:
        return pathlib.Path(folder) / f"{name}.png"
    parts = [re.sub(r"[^a-z0-9.]+", "-", str(k).lower()).strip("-") for k in key if k is not None]
    return pathlib.Path(folder) / f"{'_'.join([name] + [p for p in parts if p])}.png"


def provenance(records):
    """'GPU · commit abc, def · 2026-11-23' for the records drawn in one figure."""
    gpus = sorted({str(r.get("gpu", "?")) for r in records})
    commits = sorted({str(r.get("commit", "?")) for r in records})
    dates = sorted({str(r.get("date", "?"))[:10] for r in records})
    return f"{', '.join(gpus)} · commit {', '.join(commits)} · {dates[-1]}"


def save(fig, what, records, path):
    """Titles the figure (wrapped, so it is never cut) with what it shows and its provenance, saves it
    with every label inside the picture, and reports the file as `wrote PATH`."""
    width = max(50, int(fig.get_figwidth() * 13))  # characters that fit across the figure at 9 pt
    title = "\n".join(textwrap.wrap(what, width) + [provenance(records)])
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")
    return pathlib.Path(path)
