"""`lmscale bench ddp` and `bench zero`: for each design, the step time split into compute
(forward + backward), exposed communication and the optimizer (ddp), or the step time and the memory
each rank holds (zero); one panel per precision, newest run of each design. One figure per GPU, model
size, world size and backend (ddp.png, or ddp_<gpu>_<size>_<world>_<backend>.png when there are
several): bars of two world sizes side by side would read as one comparison."""
from . import figure_path, groups, load, newest, plt, save

SETUP = ("gpu", "size", "world", "backend")


def _designs(records):
    """'bucketed 25 MB' style labels, in the order measured."""
    label = lambda r: r["impl"].removeprefix("lmscale-") + (f" {r['bucket_mb']:g} MB" if r.get("bucket_mb") else "")
    return label, list(dict.fromkeys(label(r) for r in records))


def _each_setup(folder, bench, draw):
    records = [r for r in load(folder, bench) if r.get("value") is not None and r.get("impl") != "overhead-model"]
    split = groups(records, SETUP)
    return [path for key, rs in split.items() if (path := draw(rs, figure_path(folder, bench, key, len(split) > 1)))]


def plot_ddp(folder):
    return _each_setup(folder, "ddp", _ddp_figure)


def plot_zero(folder):
    return _each_setup(folder, "zero", _zero_figure)


def _ddp_figure(records, path):
    records = newest(records, ("impl", "bucket_mb", "precision", "metric"))
    parts = [("fwd_bwd_ms", "forward + backward", "tab:blue"), ("exposed_comm_ms", "exposed communication",
                                                                     "tab:red"), ("optimizer_ms", "optimizer", "tab:green")]
    records = [r for r in records if r.get("metric") in {p[0] for p in parts} | {"step_ms"}]
    precisions = list(dict.fromkeys(r["precision"] for r in records))
    if not precisions:
        return None
    label, designs = _designs(records)
    fig, axes = plt.subplots(1, len(precisions), figsize=(max(5, 1.2 * len(designs)) * len(precisions), 4.5),
                             squeeze=False)
    for ax, prec in zip(axes[0], precisions):
        value = {(label(r), r["metric"]): r["value"] for r in records if r["precision"] == prec}
        shown = [d for d in designs if (d, "step_ms") in value or (d, "fwd_bwd_ms") in value]
        bottom = [0.0] * len(shown)
        for metric, name, color in parts:
            heights = [value.get((d, metric), 0.0) for d in shown]
            ax.bar(shown, heights, bottom=bottom, label=name, color=color)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.plot(shown, [value.get((d, "step_ms"), float("nan")) for d in shown], "k_", markersize=20, label="step")
        ax.set_ylabel("ms per step")
        ax.set_title(prec)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
        ax.legend(fontsize=7)
    sample = records[0]
    what = (f"DDP designs: step time and the communication it exposes ({sample.get('size', '?')}, "
            f"{sample.get('world', '?')} ranks, {sample.get('backend', '?')})")
    return save(fig, what, records, path)


def _zero_figure(records, path):
    records = newest(records, ("impl", "precision", "metric"))
    memory = [("param_bytes", "parameters"), ("grad_bytes", "gradients"), ("optimizer_state_bytes", "optimizer state")]
    label, designs = _designs(records)
    if not designs:
        return None
    value = {(label(r), r["metric"]): r["value"] for r in records}
    panels = [p for p in ("memory", "step") if any((d, m) in value for d in designs
                                                   for m in ([k for k, _ in memory] if p == "memory" else ["step_ms"]))]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel == "memory":
            bottom = [0.0] * len(designs)
            for metric, name in memory:
                heights = [value.get((d, metric), 0.0) / 2**30 for d in designs]
                ax.bar(designs, heights, bottom=bottom, label=name)
                bottom = [b + h for b, h in zip(bottom, heights)]
            ax.set_ylabel("GiB per rank")
            ax.legend(fontsize=7)
        else:
            ax.bar(designs, [value.get((d, "step_ms"), 0.0) for d in designs], color="tab:gray")
            ax.set_ylabel("ms per step")
        ax.set_title(panel)
    sample = records[0]
    what = f"ZeRO: memory per rank and step time ({sample.get('size', '?')}, {sample.get('world', '?')} ranks)"
    return save(fig, what, records, path)
