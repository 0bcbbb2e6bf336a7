#!/usr/bin/env python3
"""Draws the PNG plots of docs/results from its JSON Lines files (called by `lmscale report`).

    python3 scripts/plot_results.py docs/results

Each plot uses the newest run (latest `date`) of its benchmark, and its title names the GPU, the
commit and the date, so a picture is never separated from its provenance.
"""
import collections
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def newest(records):
    if not records:
        return []
    last = max(r.get("date", "") for r in records)
    return [r for r in records if r.get("date", "") == last]


def load(folder, name):
    p = folder / f"{name}.jsonl"
    if not p.exists():
        return []
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]


def title(recs, what):
    r = recs[0]
    return f"{what}\n{r.get('gpu', '?')} · commit {r.get('commit', '?')} · {r.get('date', '?')[:10]}"


def plot_e2e(folder):
    recs = [r for r in newest(load(folder, "e2e")) if r.get("metric") == "step_ms" and r.get("status") == "ok"]
    if not recs:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=False)
    for ax, mode in zip(axes, ["forward", "forward-backward", "train-step"]):
        series = collections.defaultdict(dict)
        for r in recs:
            if r["mode"] == mode:
                series[(r["size"], r["precision"], r["impl"])][r["context"]] = r["value"]
        for (size, prec, impl), pts in sorted(series.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", label=f"{size} {prec} {impl}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context")
        ax.set_ylabel("ms per step")
        ax.set_title(mode)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=6, ncol=2)
    fig.suptitle(title(recs, "End-to-end step time"), fontsize=9)
    fig.tight_layout()
    out = folder / "e2e.png"
    fig.savefig(out, dpi=120)
    return out


def main():
    folder = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
    for fn in [plot_e2e]:
        out = fn(folder)
        if out:
            print(f"plot: {out}")


if __name__ == "__main__":
    main()
