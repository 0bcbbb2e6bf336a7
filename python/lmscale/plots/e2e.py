"""`lmscale bench`: step time against context, one panel per mode that was measured (a CPU run that
measured only the train step draws one panel), and the train step of lmscale against the PyTorch
baselines, one panel per size. Steps replayed as a CUDA graph are left out: they time another way
of running the same config. One figure per GPU (e2e.png, or e2e_<gpu>.png when there are several)."""
import collections

from . import figure_path, groups, load, newest, plt, save

MODES = ["forward", "forward-backward", "train-step"]
COLORS = {"lmscale": "tab:blue", "torch-eager": "tab:orange", "torch-compile": "tab:green"}


def step_records(records):
    eager = [r for r in records if not r.get("cuda_graph")]
    latest = newest(eager, ("size", "context", "precision", "mode", "attention", "impl", "metric", "batch"))
    return [r for r in latest if r.get("metric") == "step_ms" and r.get("status", "ok") == "ok"]


def _each_gpu(folder, name, draw):
    split = groups(load(folder, "e2e"), ("gpu",))
    return [path for key, rs in split.items()
            if (path := draw(step_records(rs), figure_path(folder, name, key, len(split) > 1)))]


def _axes(count, width):
    fig, axes = plt.subplots(1, count, figsize=(width * count, 4.2), squeeze=False)
    return fig, axes[0]


def _log_axes(ax, ylabel=None, legend=True):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context")
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=6, ncol=2)


def plot_step_times(folder):
    return _each_gpu(folder, "e2e", _step_times)


def plot_compare(folder):
    return _each_gpu(folder, "e2e_compare", _compare)


def _step_times(records, path):
    records = [r for r in records if r.get("impl", "lmscale") == "lmscale"]
    modes = [m for m in MODES if any(r.get("mode") == m for r in records)]
    if not modes:
        return None
    fig, axes = _axes(len(modes), 5)
    for ax, mode in zip(axes, modes):
        series = collections.defaultdict(dict)
        for r in records:
            if r.get("mode") == mode:
                series[(r["size"], r["precision"], r.get("attention", ""))][r["context"]] = r["value"]
        for (size, prec, attn), pts in sorted(series.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", label=f"{size} {prec} {attn}")
        ax.set_title(mode)
        _log_axes(ax, "ms per step")
    return save(fig, "End-to-end step time of lmscale's C++ model against context", records, path)


def _compare(records, path):
    records = [r for r in records if r.get("mode") == "train-step"]
    if len({r.get("impl", "lmscale") for r in records}) < 2:
        return None
    sizes = list(dict.fromkeys(r["size"] for r in records))
    fig, axes = _axes(len(sizes), 4)
    for ax, size in zip(axes, sizes):
        series = collections.defaultdict(dict)
        for r in records:
            if r["size"] == size:
                series[(r.get("impl", "lmscale"), r["precision"])][r["context"]] = r["value"]
        for (impl, prec), pts in sorted(series.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", color=COLORS.get(impl, "gray"),
                    linestyle="-" if prec == "bf16" else "--", label=f"{impl} {prec}")
        ax.set_title(size)
        _log_axes(ax, "ms per train step" if ax is axes[0] else None, legend=False)
    # One legend for every panel, below them, so no panel's lines hide behind it.
    legend = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    labels = sorted(legend)
    fig.legend([legend[k] for k in labels], labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(6, len(labels)), fontsize=8)
    what = "Train step: lmscale against PyTorch eager and torch.compile (ratios are fair within one run only)"
    return save(fig, what, records, path)
