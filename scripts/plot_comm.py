#!/usr/bin/env python3
"""Plots bus bandwidth against payload size from `lmscale bench comm` records, one line per
(backend, op, world), log-log; the newest run per line wins.

    python3 scripts/plot_comm.py docs/results/comm.jsonl docs/results/comm.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    lines = {}
    for raw in open(src):
        if not raw.strip():
            continue
        r = json.loads(raw)
        if r.get("bench") != "comm" or r.get("metric") != "busbw":
            continue
        key = (r["backend"], r["op"], r["world"])
        lines.setdefault(key, {})[r["size_bytes"]] = (r["date"], r["value"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (backend, op, world), pts in sorted(lines.items()):
        xs = sorted(pts)
        ax.plot([x / 2**20 for x in xs], [pts[x][1] for x in xs], marker="o", label=f"{backend} {op} ×{world}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("payload (MiB, fp32)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("lmscale bench comm")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print("wrote", dst)


if __name__ == "__main__":
    main(*(sys.argv[1:3] if len(sys.argv) >= 3 else ("results/comm.jsonl", "results/comm.png")))
