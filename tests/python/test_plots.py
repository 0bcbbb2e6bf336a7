"""lmscale.plots: every plot is drawn from records alone, has only panels with data, and names the
GPU, commit and date in a title that fits inside the picture."""
import json

import pytest

matplotlib = pytest.importorskip("matplotlib")

from lmscale import plots  # noqa: E402
from lmscale.plots import __main__ as cli  # noqa: E402
from lmscale.plots import attention, comm, distributed, e2e, memory, train  # noqa: E402

RUN = {"gpu": "TestGPU 80GB", "commit": "abc1234", "date": "2026-11-23T10:00:00Z", "command": "lmscale x",
       "schema": 2, "status": "ok"}


def write(folder, bench, records):
    with open(folder / f"{bench}.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps({**RUN, "bench": bench, **r}) + "\n")


@pytest.fixture
def figures(monkeypatch):
    """Every figure saved, kept open long enough to be inspected."""
    saved = []
    original = plots.save

    def keep(fig, what, records, path):
        out = original(fig, what, records, path)
        saved.append((fig, out, fig._suptitle.get_text()))
        return out

    for module in (e2e, comm, distributed, attention, memory, train):
        monkeypatch.setattr(module, "save", keep)
    return saved


def check(figure_entry):
    fig, path, title = figure_entry
    assert path.exists() and path.stat().st_size > 0
    assert "TestGPU 80GB" in title and "abc1234" in title and "2026-11-23" in title, title
    for ax in fig.axes:
        assert ax.lines or ax.patches, f"empty panel '{ax.get_title()}' in {path.name}"


def test_cpu_run_of_one_mode_draws_one_panel(tmp_path, figures):
    write(tmp_path, "e2e", [
        {"impl": "lmscale", "size": "tiny", "precision": "fp32", "mode": "train-step", "attention": "naive",
         "context": c, "batch": 2, "metric": "step_ms", "value": 1.0 + c / 100, "unit": "ms"} for c in (16, 32)])
    assert e2e.plot_step_times(tmp_path) == [tmp_path / "e2e.png"]
    assert e2e.plot_compare(tmp_path) == []  # one implementation: nothing to compare
    assert len(figures) == 1 and len(figures[0][0].axes) == 1
    check(figures[0])


def test_compare_draws_the_newest_run_against_its_strongest_baseline(tmp_path, figures):
    """The comparison takes one run per size (the newest with a baseline), CUDA-graph steps included,
    and of that run's baselines the fastest; an older run's configurations never mix in."""
    def cell(impl, ctx, ms, command, date, **extra):
        return {"impl": impl, "size": "small", "precision": "bf16", "mode": "train-step", "attention": "flash",
                "context": ctx, "batch": 4, "metric": "step_ms", "value": ms, "unit": "ms", "command": command,
                "date": date, **extra}
    old, new = "lmscale bench --old", "lmscale bench --new"
    rows = [cell("lmscale", c, 30.0, old, "2026-11-20T00:00:00Z") for c in (128, 256)]
    rows += [cell("torch-compile", c, 10.0, old, "2026-11-20T00:00:00Z") for c in (128, 256)]
    rows += [cell("lmscale", c, 5.0, new, "2026-11-23T10:00:00Z", cuda_graph=True) for c in (128, 256)]
    rows += [cell("torch-compile", c, 8.0, new, "2026-11-23T10:00:00Z") for c in (128, 256)]
    rows += [cell("torch-compile-ro", c, 6.0, new, "2026-11-23T10:00:00Z") for c in (128, 256)]
    write(tmp_path, "e2e", rows)
    assert e2e.plot_compare(tmp_path) == [tmp_path / "e2e_compare.png"]
    fig, _, title = figures[0]
    check(figures[0])
    assert "strongest PyTorch baseline measured in the same run" in " ".join(title.split()), title
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].lines}
    assert lines == {"lmscale bf16 (flash, CUDA graph)": [5.0, 5.0], "torch-compile-ro bf16": [6.0, 6.0]}, lines
    assert e2e.plot_step_times(tmp_path) == [tmp_path / "e2e.png"]  # the eager records alone
    assert figures[1][2].startswith("End-to-end step time"), figures[1][2]  # a CPU run: not superseded


def test_comm_ddp_zero_attention(tmp_path, figures):
    write(tmp_path, "comm", [
        {"impl": "lmscale-c10d-gloo", "backend": "gloo", "op": "all_reduce", "world": 2, "size_bytes": s,
         "metric": m, "value": s / 1e6, "unit": "GB/s"} for s in (1 << 20, 1 << 24) for m in ("algbw", "busbw")])
    write(tmp_path, "ddp", [
        {"impl": impl, "size": "tiny", "precision": "fp32", "world": 2, "backend": "gloo", "metric": m,
         "value": v, "unit": "ms", **({"bucket_mb": 25} if impl.endswith("bucketed") else {})}
        for impl in ("lmscale-naive", "lmscale-bucketed")
        for m, v in (("step_ms", 10.0), ("fwd_bwd_ms", 6.0), ("exposed_comm_ms", 3.0), ("optimizer_ms", 1.0))])
    write(tmp_path, "zero", [
        {"impl": impl, "size": "tiny", "precision": "fp32", "world": 2, "metric": m, "value": v,
         "unit": "bytes" if m != "step_ms" else "ms"}
        for impl in ("lmscale-unsharded", "lmscale-sharded")
        for m, v in (("param_bytes", 2**30), ("grad_bytes", 2**30), ("optimizer_state_bytes", 2**31),
                     ("step_ms", 5.0))])
    write(tmp_path, "attention", [
        {"impl": impl, "mode": mode, "precision": "bf16", "head_dim": d, "context": c, "causal": True,
         "batch": 1, "heads": 1, "metric": m, "value": c / 1000, "unit": "ms"}
        for mode, impls in (("flash", ("lmscale-flash", "sdpa-flash")), ("sweep", ("torch-naive",)))
        for impl in impls for d in (32, 64) for c in (128, 256) for m in ("fwdbwd_ms", "fwdbwd_tflops")])
    assert cli.main(["report", str(tmp_path)]) == 0
    names = sorted(entry[1].name for entry in figures)
    assert names == ["attention_bf16.png", "attention_sweep.png", "comm.png", "ddp.png", "zero.png"]
    for entry in figures:
        check(entry)
    grid = next(fig for fig, path, _ in figures if path.name == "attention_bf16.png")
    assert len(grid.axes) == 4  # a row per head dimension: time and TFLOP/s
    assert {line.get_label() for line in grid.axes[0].lines} == {"lmscale-flash", "sdpa-flash"}


def test_attention_shapes_are_never_one_line(tmp_path, figures):
    """Two shapes at one length (the grid and a 16-head leaderboard run): the single-length shape is
    not drawn, and its point never joins the grid's lines."""
    write(tmp_path, "attention", [
        {"impl": "lmscale-flash", "mode": "flash", "precision": "bf16", "head_dim": 64, "context": c, "causal": True,
         "batch": 1, "heads": heads, "metric": "fwdbwd_ms", "value": value, "unit": "ms"}
        for heads, c, value in ((1, 1024, 1.0), (1, 4096, 2.0), (16, 4096, 99.0))])
    assert [p.name for p in attention.plot(tmp_path)] == ["attention_bf16.png"]
    assert list(figures[0][0].axes[0].lines[0].get_ydata()) == [1.0, 2.0]


def test_two_gpus_and_two_world_sizes_are_never_one_figure(tmp_path, figures):
    """Records of two GPUs (or of two world sizes on one) draw one figure each, named after them."""
    rows = []
    for gpu, world in (("TestGPU 80GB", 2), ("cpu", 4), ("cpu", 8)):
        for m, v in (("step_ms", 10.0 * world), ("fwd_bwd_ms", 6.0), ("exposed_comm_ms", 3.0), ("optimizer_ms", 1.0)):
            rows.append({"impl": "lmscale-naive", "size": "tiny", "precision": "fp32", "world": world,
                         "backend": "gloo", "metric": m, "value": v, "unit": "ms", "gpu": gpu})
    write(tmp_path, "ddp", rows)
    write(tmp_path, "comm", [
        {"impl": "lmscale-c10d-gloo", "backend": "gloo", "op": "all_reduce", "world": 2, "size_bytes": s,
         "metric": "busbw", "value": 1.0, "unit": "GB/s", "gpu": gpu} for s in (1 << 20, 1 << 24)
        for gpu in ("TestGPU 80GB", "cpu")])
    assert cli.main(["report", str(tmp_path)]) == 0
    names = sorted(entry[1].name for entry in figures)
    assert names == ["comm_cpu.png", "comm_testgpu-80gb.png", "ddp_cpu_tiny_4_gloo.png", "ddp_cpu_tiny_8_gloo.png",
                     "ddp_testgpu-80gb_tiny_2_gloo.png"]
    for fig, path, title in figures:
        shown, other = ("cpu", "TestGPU") if "_cpu" in path.name else ("TestGPU 80GB", "cpu")
        assert shown in title and other not in title, title
        for ax in fig.axes:
            assert ax.lines or ax.patches, f"empty panel in {path.name}"
    world8 = next(fig for fig, path, _ in figures if path.name == "ddp_cpu_tiny_8_gloo.png")
    assert [line.get_ydata()[0] for line in world8.axes[0].lines if line.get_label() == "step"] == [80.0]


def test_report_redraws_every_memory_timeline(tmp_path, figures):
    for mode in ("forward", "train-step"):
        (tmp_path / f"memory_tiny_ctx16_fp32_{mode}_timeline.json").write_text(json.dumps({
            "event_index": [0, 1], "active_bytes": [0, 2**20], "peak": {"event": 1, "bytes": 2**20}, "phases": [],
            "config": {"size": "tiny", "context": 16, "batch": 1, "precision": "fp32", "mode": mode,
                       "gpu": "TestGPU 80GB", "commit": "abc1234", "date": "2026-11-23T10:00:00Z"}}))
    assert cli.main(["report", str(tmp_path)]) == 0
    assert sorted(path.name for _, path, _ in figures) == ["memory_tiny_ctx16_fp32_forward_timeline.png",
                                                           "memory_tiny_ctx16_fp32_train-step_timeline.png"]
    for entry in figures:
        check(entry)


def test_memory_timeline_reads_old_and_new_config(tmp_path, figures):
    timeline = {"event_index": [0, 1, 2], "active_bytes": [0, 2**30, 2**29], "peak": {"event": 1, "bytes": 2**30},
                "phases": [{"phase": "forward", "first": 0, "last": 2}],
                "config": {"size": "tiny", "context": 16, "batch": 1, "dtype": "fp32", "mode": "forward",
                           "gpu": "TestGPU 80GB", "commit": "abc1234", "date": "2026-11-23T10:00:00Z"}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(timeline))
    assert cli.main(["memory", str(path), str(tmp_path / "t.png")]) == 0
    check(figures[0])
    assert "fp32" in figures[0][2]


def test_empty_folder_draws_nothing(tmp_path, figures):
    assert cli.main(["report", str(tmp_path)]) == 0
    assert figures == []


def test_train_curves_and_difference_from_the_reference(tmp_path, figures):
    setup = {"size": "small", "context": 512, "batch": 4, "steps": 20, "corpus": "python-3.12-stdlib", "lr": 1e-3,
             "lr_min": 1e-4, "lr_warmup": 5, "clip": 1.0, "seed": 0}
    rows = []
    for impl, shift in (("lmscale", 0.0), ("torch-eager", 0.01)):
        for step in (0, 10, 20):
            rows.append({**setup, "impl": impl, "precision": "bf16", "step": step, "metric": "val_loss",
                         "value": 9.0 - 0.2 * step + shift, "unit": "nats"})
            if step:
                rows.append({**setup, "impl": impl, "precision": "bf16", "step": step, "metric": "train_loss",
                             "value": 9.1 - 0.2 * step, "unit": "nats"})
    write(tmp_path, "train", rows)
    assert cli.main(["report", str(tmp_path)]) == 0
    drawn = [entry for entry in figures if entry[1].name == "train.png"]
    assert len(drawn) == 1
    check(drawn[0])
    fig = drawn[0][0]
    assert len(fig.axes) == 2  # the curves, and lmscale relative to the reference
    difference = fig.axes[1].lines[0].get_ydata()
    assert list(difference) == pytest.approx([-100 * 0.01 / (9.0 - 2.0 + 0.01), -100 * 0.01 / (9.0 - 4.0 + 0.01)])
