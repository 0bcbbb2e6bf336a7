"""`lmscale train`: loss curves. Left, the validation loss (solid) and the training loss (dotted,
the mean since the previous evaluation) of every run against the step; right, when there is a
reference, the validation loss of each run relative to it — lmscale against the PyTorch reference at
the same precision, lmscale at another precision against lmscale bf16 — with the ±1 % band of the
numerics goal and the learning-rate warm-up shaded. One figure per GPU, model size, context, batch,
step count and corpus (train.png, or train_<...>.png when there are several): curves of two setups
are never drawn as one comparison. The newest record of each (run, step, metric) is drawn."""
from . import figure_path, groups, load, newest, plt, save

SETUP = ("gpu", "size", "context", "batch", "steps", "corpus")
RUN = ("impl", "precision")
AGREEMENT = 0.01  # the numerics goal: within 1 % after warm-up (src/train_app/train_compare.h)


def plot(folder):
    records = [r for r in load(folder, "train") if r.get("status", "ok") == "ok" and r.get("value") is not None]
    split = groups(records, SETUP)
    return [path for key, rs in split.items() if (path := _figure(rs, figure_path(folder, "train", key, len(split) > 1)))]


def _curves(records, metric):
    """(impl, precision) → {step: value}."""
    curves = {}
    for r in records:
        if r.get("metric") == metric and "step" in r:
            curves.setdefault(tuple(r.get(k) for k in RUN), {})[r["step"]] = r["value"]
    return curves


def references(runs):
    """(run, reference) pairs among the runs, as train_compare.cpp pairs them."""
    pairs = []
    for impl, prec in runs:
        if impl != "lmscale":
            continue
        for ref in runs:
            if ref[0].startswith("torch-") and ref[1] == prec:
                pairs.append(((impl, prec), ref))
            elif ref == ("lmscale", "bf16") and prec != "bf16":
                pairs.append(((impl, prec), ref))
    return pairs


def _figure(records, path):
    records = newest(records, RUN + ("step", "metric", "seed", "lr", "lr_warmup", "clip"))
    val, train = _curves(records, "val_loss"), _curves(records, "train_loss")
    if not val:
        return None
    runs = sorted(val)
    pairs = references(runs)
    fig, axes = plt.subplots(1, 2 if pairs else 1, figsize=(11 if pairs else 6, 4.2), squeeze=False)
    ax = axes[0][0]
    colors = {run: f"C{i}" for i, run in enumerate(runs)}
    for run in runs:
        steps = sorted(val[run])
        ax.plot(steps, [val[run][s] for s in steps], marker="o", markersize=2, color=colors[run],
                label=f"{run[0]} {run[1]} validation")
        if run in train:
            ts = sorted(train[run])
            ax.plot(ts, [train[run][s] for s in ts], linestyle=":", color=colors[run], label=f"{run[0]} {run[1]} training")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("loss")
    warmup = max((r.get("lr_warmup", 0) for r in records), default=0)
    if pairs:
        ax = axes[0][1]
        for run, ref in pairs:
            steps = sorted(s for s in val[run] if s in val[ref] and s > 0)
            ax.plot(steps, [100 * (val[run][s] - val[ref][s]) / val[ref][s] for s in steps], marker="o", markersize=2,
                    color=colors[run], label=f"{run[0]} {run[1]} vs {ref[0]} {ref[1]}")
        ax.axhspan(-100 * AGREEMENT, 100 * AGREEMENT, color="tab:green", alpha=0.12, label="±1 %")
        if warmup:
            ax.axvspan(0, warmup, color="gray", alpha=0.15, label="lr warm-up")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss difference (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title("relative to the reference")
    r = records[0]
    what = (f"Training on {r.get('corpus', '?')}: {r.get('size', '?')}, context {r.get('context', '?')}, "
            f"batch {r.get('batch', '?')}, {r.get('steps', '?')} steps, lr {r.get('lr', '?')} "
            f"(warm-up {warmup}, cosine to {r.get('lr_min', '?')}), clip {r.get('clip', '?')}")
    return save(fig, what, records, path)
