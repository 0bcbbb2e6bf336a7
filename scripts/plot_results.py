#!/usr/bin/env python3
"""Draws the PNG plots of docs/results from its JSON Lines files (called by `lmscale report`).

    python3 scripts/plot_results.py docs/results

Each plot draws the latest measurement of every config on the GPU of the newest record (so a sweep
split over several invocations is drawn whole), and its title names the GPU, the commits and the
date, so a picture is never separated from its provenance.
"""
import collections
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def newest(records):
    """The latest measurement of every config on the GPU of the latest record (a sweep split over
    several invocations, by size or by --resume, is then drawn whole)."""
    if not records:
        return []
    gpu = max(records, key=lambda r: r.get("date", "")).get("gpu")
    config = ("size", "context", "precision", "mode", "attention", "impl", "metric", "batch")
    by_config = {}
    for r in sorted((r for r in records if r.get("gpu") == gpu), key=lambda r: r.get("date", "")):
        by_config[tuple(r.get(k) for k in config)] = r
    return list(by_config.values())


def load(folder, name):
    p = folder / f"{name}.jsonl"
    if not p.exists():
        return []
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]


def title(recs, what):
    commits = ", ".join(sorted({r.get("commit", "?") for r in recs}))
    dates = sorted({r.get("date", "?")[:10] for r in recs})
    return f"{what}\n{recs[0].get('gpu', '?')} · commit {commits} · {dates[-1]}"


def e2e_steps(folder):
    """The newest successful step-time records of the e2e sweeps in folder. Steps replayed as a CUDA
    graph (--cuda-graph) are left out: they time a different way of running the same config."""
    eager = [r for r in load(folder, "e2e") if not r.get("cuda_graph")]
    return [r for r in newest(eager) if r.get("metric") == "step_ms" and r.get("status") == "ok"]


def plot_e2e(folder):
    recs = [r for r in e2e_steps(folder) if r.get("impl", "lmscale") == "lmscale"]
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
    fig.suptitle(title(recs, "End-to-end step time, lmscale"), fontsize=9)
    fig.tight_layout()
    out = folder / "e2e.png"
    fig.savefig(out, dpi=120)
    return out


def plot_e2e_compare(folder):
    """Train step per size: lmscale, PyTorch eager and torch.compile over context (bf16 solid, fp32 dashed)."""
    recs = [r for r in e2e_steps(folder) if r.get("mode") == "train-step"]
    if len({r.get("impl", "lmscale") for r in recs}) < 2:
        return None
    sizes = list(dict.fromkeys(r["size"] for r in recs))
    fig, axes = plt.subplots(1, len(sizes), figsize=(3.6 * len(sizes), 3.8), squeeze=False)
    colors = {"lmscale": "tab:blue", "torch-eager": "tab:orange", "torch-compile": "tab:green"}
    for ax, size in zip(axes[0], sizes):
        series = collections.defaultdict(dict)
        for r in recs:
            if r["size"] == size:
                series[(r.get("impl", "lmscale"), r["precision"])][r["context"]] = r["value"]
        for (impl, prec), pts in sorted(series.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", color=colors.get(impl, "gray"),
                    linestyle="-" if prec == "bf16" else "--", label=f"{impl} {prec}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context")
        ax.set_title(size)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ms per train step")
    axes[0][-1].legend(fontsize=6)
    fig.suptitle(title(recs, "Train step: lmscale vs PyTorch eager vs torch.compile (see the table for which "
                             "ratios come from one run)"), fontsize=9)
    fig.tight_layout()
    out = folder / "e2e_compare.png"
    fig.savefig(out, dpi=120)
    return out


def main():
    folder = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
    for fn in [plot_e2e, plot_e2e_compare]:
        out = fn(folder)
        if out:
            print(f"plot: {out}")


if __name__ == "__main__":
    main()
