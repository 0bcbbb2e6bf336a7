"""`lmscale bench attention`: forward + backward time and throughput against sequence length, one
line per implementation and head dimension; one row of panels per precision."""
from . import load, newest, plt, save


def plot(folder):
    records = [r for r in load(folder, "attention")
               if r.get("mode", "sweep") == "sweep" and r.get("value") is not None
               and r.get("metric") in ("fwdbwd_ms", "fwdbwd_tflops")]
    records = newest(records, ("impl", "precision", "head_dim", "context", "causal", "batch", "heads", "metric"))
    precisions = list(dict.fromkeys(r.get("precision", "?") for r in records))
    if not precisions:
        return None
    metrics = [(m, y) for m, y in (("fwdbwd_ms", "ms (forward + backward)"), ("fwdbwd_tflops", "TFLOP/s"))
               if any(r["metric"] == m for r in records)]
    fig, axes = plt.subplots(len(precisions), len(metrics), figsize=(6 * len(metrics), 4 * len(precisions)),
                             squeeze=False)
    for row, prec in zip(axes, precisions):
        for ax, (metric, ylabel) in zip(row, metrics):
            lines = {}
            for r in records:
                if r.get("precision") == prec and r["metric"] == metric:
                    lines.setdefault((r["impl"], r.get("head_dim")), {})[r["context"]] = r["value"]
            for (impl, d), pts in sorted(lines.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], marker="o", label=f"{impl} d={d}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{prec}: {'time' if metric.endswith('ms') else 'throughput'}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6, ncol=2)
    return save(fig, "Attention forward + backward against sequence length, per implementation", records,
                folder / "attention.png")
