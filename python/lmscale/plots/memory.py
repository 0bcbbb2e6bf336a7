"""The active-memory timeline `lmscale memory` writes (memory_*_timeline.json): x is the allocator's
events in order (allocations and frees), y the bytes held by live tensors; shaded spans mark the
phases (init, forward, backward, optimizer) and a dot marks the peak. `lmscale report` redraws every
timeline of a folder (plot_folder): the picture beside each timeline is always its own."""
import json
import pathlib

from . import plt, save

PHASE_COLORS = {"init": "#dddddd", "forward": "#cfe3ff", "backward": "#ffd9cc", "optimizer": "#d6f5d6"}


def plot(timeline, png_path):
    gib = 1024.0**3
    fig, ax = plt.subplots(figsize=(11, 4.5))
    labelled = set()
    for span in timeline.get("phases", []):
        name = span["phase"]
        ax.axvspan(span["first"], span["last"], color=PHASE_COLORS.get(name, "#eeeeee"), lw=0,
                   label=None if name in labelled else name)
        labelled.add(name)
    ax.plot(timeline["event_index"], [b / gib for b in timeline["active_bytes"]], color="#1f4e79", lw=1.2)
    peak = timeline["peak"]
    ax.plot([peak["event"]], [peak["bytes"] / gib], "o", color="#c00000", label=f"peak {peak['bytes'] / gib:.2f} GiB")
    ax.set_xlabel("allocator event (alloc / free, in order)")
    ax.set_ylabel("GiB allocated")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    cfg = timeline.get("config", {})
    precision = cfg.get("precision", cfg.get("dtype", "?"))  # timelines before schema 2 said dtype
    what = (f"Active memory: {cfg.get('size', '?')}, context {cfg.get('context', '?')}, batch {cfg.get('batch', '?')}, "
            f"{precision}, {cfg.get('mode', '?')}")
    return save(fig, what, [cfg], png_path)


def plot_folder(folder):
    """Draws memory_*_timeline.png beside every memory_*_timeline.json of the folder."""
    paths = []
    for timeline in sorted(pathlib.Path(folder).glob("memory_*_timeline.json")):
        try:
            data = json.loads(timeline.read_text())
        except ValueError:
            print(f"warning: {timeline}: not valid JSON; its timeline is not drawn")
            continue
        paths.append(plot(data, timeline.with_suffix(".png")))
    return paths
