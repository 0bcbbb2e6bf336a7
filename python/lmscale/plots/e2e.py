"""`lmscale bench`: the train step of lmscale against the strongest PyTorch baseline of the same run,
one panel per size (e2e_compare.png: the headline, CUDA-graph replays included); and the eager step
against context, one panel per mode measured (e2e.png: steps replayed as a CUDA graph are left out,
so on a GPU it shows superseded configurations and says so in its title). One figure per GPU
(<name>_<gpu>.png when there are several)."""
import collections

from . import figure_path, groups, load, newest, plt, save

MODES = ["forward", "forward-backward", "train-step"]
COLORS = {"lmscale": "tab:blue", "torch-eager": "tab:orange", "torch-compile": "tab:green",
          "torch-compile-ro": "tab:red"}


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
    what = "End-to-end step time of lmscale's C++ model against context"
    if any(str(r.get("device", "")).startswith("cuda") for r in records):  # on a GPU the default replays a graph
        what = ("Superseded eager steps: lmscale's C++ model run without a CUDA graph, against context, the newest "
                "record per config (the default step on a GPU replays a graph: e2e_compare.png)")
    return save(fig, what, records, path)


def plot_compare(folder):
    """lmscale's step against the strongest PyTorch baseline of the same run, one panel per size, each
    from the newest run that measured that size with a baseline (one figure per GPU)."""
    split = groups(load(folder, "e2e"), ("gpu",))
    return [path for key, rs in split.items()
            if (path := _compare(rs, figure_path(folder, "e2e_compare", key, len(split) > 1)))]


def _train_steps(records):
    """Train-step times that finished, CUDA-graph replays included (the default step on a GPU)."""
    return [r for r in records if r.get("mode") == "train-step" and r.get("metric") == "step_ms"
            and r.get("status", "ok") == "ok"]


def same_run_pairs(records):
    """{(size, precision): (lmscale, baseline impl, baseline, records)}, every series {context: ms}
    from the ONE newest run (same command, commit and GPU) that measured the size with lmscale beside
    a baseline, so an older run's configurations never mix in; per precision the baseline is the one
    with the smallest total time over the contexts lmscale measured."""
    runs = collections.defaultdict(list)
    for r in _train_steps(records):
        runs[(r.get("command"), r.get("commit"), r.get("gpu"), r["size"])].append(r)
    newest_run = {}
    for (_, _, _, size), rs in runs.items():
        pairs = {}
        for prec in dict.fromkeys(r["precision"] for r in rs):
            series = collections.defaultdict(dict)
            for r in sorted((r for r in rs if r["precision"] == prec), key=lambda r: r.get("date", "")):
                series[r.get("impl", "lmscale")][r["context"]] = r["value"]  # the newest of a context wins
            mine = series.pop("lmscale", None)
            full = {impl: pts for impl, pts in series.items() if mine and set(mine) <= set(pts)}
            if full:
                impl = min(full, key=lambda i: sum(full[i][c] for c in mine))
                kept = [r for r in rs if r["precision"] == prec and r.get("impl", "lmscale") in ("lmscale", impl)]
                pairs[(size, prec)] = (mine, impl, {c: full[impl][c] for c in mine}, kept)
        date = max(r.get("date", "") for r in rs)
        if pairs and (size not in newest_run or date > newest_run[size][0]):
            newest_run[size] = (date, pairs)
    return {k: v for _, pairs in newest_run.values() for k, v in pairs.items()}


def _compare(records, path):
    pairs = same_run_pairs(records)
    if not pairs:
        return None
    sizes = list(dict.fromkeys(size for size, _ in pairs))
    fig, axes = _axes(len(sizes), 4)
    drawn = []
    for ax, size in zip(axes, sizes):
        for (s, prec), (mine, impl, theirs, rs) in sorted(pairs.items()):
            if s != size:
                continue
            drawn += rs
            xs = sorted(mine)
            style = "-" if prec == "bf16" else "--"
            ours = [r for r in rs if r.get("impl", "lmscale") == "lmscale"]
            how = ", ".join(sorted({r.get("attention", "?") for r in ours}) +
                            (["CUDA graph"] if all(r.get("cuda_graph") for r in ours) else []))
            ax.plot(xs, [mine[x] for x in xs], marker="o", color=COLORS["lmscale"], linestyle=style,
                    label=f"lmscale {prec} ({how})")
            ax.plot(xs, [theirs[x] for x in xs], marker="s", color=COLORS.get(impl, "tab:red"), linestyle=style,
                    label=f"{impl} {prec}")
            for x in xs:  # the ratio the README quotes: baseline time / lmscale time
                ax.annotate(f"{theirs[x] / mine[x]:.2f}×", (x, theirs[x]), textcoords="offset points",
                            xytext=(0, 5), ha="center", fontsize=6)
        ax.set_title(size)
        _log_axes(ax, "ms per train step" if ax is axes[0] else None, legend=False)
    # One legend for every panel, below them, so no panel's lines hide behind it.
    legend = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    labels = sorted(legend)
    fig.legend([legend[k] for k in labels], labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(6, len(labels)), fontsize=8)
    what = ("Train step: lmscale's step against the strongest PyTorch baseline measured in the same run "
            "(newest run per size; labels: baseline time / lmscale time)")
    return save(fig, what, drawn, path)
