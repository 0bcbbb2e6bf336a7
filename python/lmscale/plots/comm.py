"""`lmscale bench comm`: algorithm and bus bandwidth against payload size, one line per
(backend, collective, world size), log-log; the newest measurement of each point wins. One figure
per GPU (comm.png, or comm_<gpu>.png when the records come from several)."""
from . import figure_path, groups, load, newest, plt, save


def plot(folder):
    records = [r for r in load(folder, "comm") if r.get("status", "ok") == "ok" and r.get("value") is not None]
    by_gpu = groups(records, ("gpu",))
    return [path for key, rs in by_gpu.items()
            if (path := _figure(rs, figure_path(folder, "comm", key, len(by_gpu) > 1)))]


def _figure(records, path):
    records = newest(records, ("backend", "op", "world", "size_bytes", "metric"))
    panels = [m for m in ("algbw", "busbw") if any(r.get("metric") == m for r in records)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    for ax, metric in zip(axes[0], panels):
        lines = {}
        for r in records:
            if r.get("metric") == metric:
                lines.setdefault((r["backend"], r["op"], r["world"]), {})[r["size_bytes"]] = r["value"]
        for (backend, op, world), pts in sorted(lines.items()):
            xs = sorted(pts)
            ax.plot([x / 2**20 for x in xs], [pts[x] for x in xs], marker="o", label=f"{backend} {op} ×{world}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("payload (MiB)")
        ax.set_ylabel(f"{'algorithm' if metric == 'algbw' else 'bus'} bandwidth (GB/s)")
        ax.set_title(metric)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    drawn = [r for r in records if r.get("metric") in panels]
    return save(fig, "Collective bandwidth against payload size (lmscale bench comm)", drawn, path)
