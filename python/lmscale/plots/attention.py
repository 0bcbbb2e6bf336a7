"""`lmscale bench attention`: forward + backward time and throughput against sequence length, one
line per implementation (backend). The benchmark grid (mode `flash`) draws one figure per GPU,
precision and shape, a row of panels per head dimension (attention_<precision>.png); the plain-attention sweep
(mode `sweep`, torch-naive only) one figure, a line per head dimension (attention_sweep.png). The
leaderboard (one shape) is a table, not a plot."""
import re

from . import figure_path, groups, load, newest, plt, save

METRICS = (("fwdbwd_ms", "ms (forward + backward)", "time"), ("fwdbwd_tflops", "TFLOP/s", "throughput"))
CONFIG = ("impl", "precision", "head_dim", "context", "causal", "batch", "heads", "metric")


def _records(folder, mode):
    return [r for r in load(folder, "attention")
            if r.get("mode") == mode and r.get("value") is not None and r.get("metric") in {m for m, _, _ in METRICS}]


def _panel(ax, records, metric, line_of, row_title):
    lines = {}
    for r in records:
        if r["metric"] == metric:
            lines.setdefault(line_of(r), {})[r["context"]] = r["value"]
    natural = lambda kv: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", kv[0])]  # d=16 before d=128
    for name, pts in sorted(lines.items(), key=natural):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], marker="o", label=name)
    ylabel, what = dict((m, (y, w)) for m, y, w in METRICS)[metric]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{row_title}: {what}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)


def plot(folder):
    return plot_grid(folder) + [p for p in [plot_sweep(folder)] if p]


def plot_grid(folder):
    """One figure per GPU, precision and shape (batch, heads, causal) measured at two lengths or more;
    a shape measured at one length (the leaderboard's) is a table, not a line."""
    shapes = ("gpu", "precision", "batch", "heads", "causal")
    split = {key: newest(records, CONFIG) for key, records in groups(_records(folder, "flash"), shapes).items()}
    split = {key: records for key, records in split.items() if len({r["context"] for r in records}) > 1}
    several_gpus = len({key[0] for key in split}) > 1
    per_precision = {}
    for key in split:
        per_precision[key[:2]] = per_precision.get(key[:2], 0) + 1
    paths = []
    for (gpu, precision, batch, heads, causal), records in split.items():
        head_dims = sorted({r.get("head_dim") for r in records}, key=lambda d: d or 0)
        metrics = [m for m, _, _ in METRICS if any(r["metric"] == m for r in records)]
        fig, axes = plt.subplots(len(head_dims), len(metrics), figsize=(6 * len(metrics), 3.6 * len(head_dims)),
                                 squeeze=False)
        for row, d in zip(axes, head_dims):
            for ax, metric in zip(row, metrics):
                _panel(ax, [r for r in records if r.get("head_dim") == d], metric, lambda r: r["impl"], f"d={d}")
        shape = f"batch {batch} × {heads} heads, {'causal' if causal else 'not causal'}"
        what = f"Attention forward + backward against sequence length per backend ({precision}, {shape})"
        key = ([gpu] if several_gpus else []) + [precision]
        if per_precision[(gpu, precision)] > 1:
            key += [f"b{batch}", f"h{heads}", "causal" if causal else "noncausal"]
        paths.append(save(fig, what, records, figure_path(folder, "attention", key, True)))
    return paths


def plot_sweep(folder):
    records = newest(_records(folder, "sweep"), CONFIG)
    precisions = list(dict.fromkeys(r.get("precision", "?") for r in records))
    if not precisions:
        return None
    metrics = [m for m, _, _ in METRICS if any(r["metric"] == m for r in records)]
    fig, axes = plt.subplots(len(precisions), len(metrics), figsize=(6 * len(metrics), 4 * len(precisions)),
                             squeeze=False)
    for row, prec in zip(axes, precisions):
        for ax, metric in zip(row, metrics):
            _panel(ax, [r for r in records if r.get("precision") == prec], metric,
                   lambda r: f"{r['impl']} d={r.get('head_dim')}", prec)
    return save(fig, "Plain attention (torch-naive) forward + backward against sequence length, per head dimension",
                records, figure_path(folder, "attention_sweep", (), False))
