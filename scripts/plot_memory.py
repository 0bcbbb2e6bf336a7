#!/usr/bin/env python3
"""Plot the active-memory timeline that `lmscale memory` writes (memory_*_timeline.json) to a PNG.

    python scripts/plot_memory.py results/memory_2.7B_ctx128_fp32_train-step_timeline.json out.png

x: allocator events in order (allocs and frees), y: bytes held by live tensors; shaded spans mark
the phases (init, forward, backward, optimizer) and a dot marks the peak. `lmscale memory` runs this
itself when it can; the JSON carries everything, so the plot can be redrawn anywhere.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only: GPU machines have no display
import matplotlib.pyplot as plt  # noqa: E402

PHASE_COLORS = {"init": "#dddddd", "forward": "#cfe3ff", "backward": "#ffd9cc", "optimizer": "#d6f5d6"}


def plot(timeline, png_path):
    gib = 1024.0**3
    x = timeline["event_index"]
    y = [b / gib for b in timeline["active_bytes"]]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    labelled = set()
    for span in timeline.get("phases", []):
        name = span["phase"]
        ax.axvspan(span["first"], span["last"], color=PHASE_COLORS.get(name, "#eeeeee"), lw=0,
                   label=None if name in labelled else name)
        labelled.add(name)
    ax.plot(x, y, color="#1f4e79", lw=1.2)
    peak = timeline["peak"]
    ax.plot([peak["event"]], [peak["bytes"] / gib], "o", color="#c00000",
            label=f"peak {peak['bytes'] / gib:.2f} GiB")
    cfg = timeline.get("config", {})
    title = "active memory: {size} ctx {context} batch {batch} {dtype} {mode}".format(
        **{k: cfg.get(k, "?") for k in ("size", "context", "batch", "dtype", "mode")})
    ax.set_title(f"{title}\n{cfg.get('gpu', '')}, commit {cfg.get('commit', '')}", fontsize=10)
    ax.set_xlabel("allocator event (alloc / free, in order)")
    ax.set_ylabel("GiB allocated")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def main(argv):
    if len(argv) != 3:
        sys.exit(f"usage: {argv[0]} TIMELINE.json OUT.png")
    with open(argv[1]) as f:
        timeline = json.load(f)
    plot(timeline, argv[2])
    print(f"wrote {argv[2]}")


if __name__ == "__main__":
    main(sys.argv)
