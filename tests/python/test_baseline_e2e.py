"""The PyTorch e2e baseline (python/lmscale/baseline/e2e.py): it needs only torch, its model is the
spec's (docs/spec.md §1), its batch protocol answers every config (out of memory becomes a record and
the batch goes on), and its records follow docs/results/SCHEMA.md. CPU only; torch.compile runs only
with LMSCALE_TEST_COMPILE=1 (Inductor's CPU code generation takes minutes on a 2-core machine)."""
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from lmscale.baseline import e2e

PACKAGE_DIR = pathlib.Path(e2e.__file__).resolve().parents[2]  # the folder that holds lmscale/
NO_LIBRARY = {"LMSCALE_LIBRARY": "/nonexistent/liblmscale.so", "LMSCALE_BUILD_DIR": "/nonexistent"}
TINY = {"size": "tiny", "vocab": 512, "d_model": 64, "d_ff": 256, "layers": 2, "heads": 4, "model_context": 32,
        "batch": 2, "precision": "fp32", "attention": "naive", "warmup": 1, "steps": 2, "device": "cpu"}
SCHEMA_FIELDS = ("schema", "bench", "impl", "status", "metric", "value", "unit", "gpu", "commit", "date", "command")


def run_python(code_or_args, env_extra):
    env = {**os.environ, **env_extra, "PYTHONPATH": str(PACKAGE_DIR)}
    return subprocess.run([sys.executable, *code_or_args], env=env, capture_output=True, text=True, timeout=300)


def test_module_itself_imports_only_torch():
    # Loaded by path (not through the lmscale package), with no C++ library to be found.
    code = (f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('b', {e2e.__file__!r}); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "maps = open('/proc/self/maps').read(); "
            "assert 'liblmscale' not in maps and not any(k.startswith('lmscale') for k in sys.modules), 'loaded'")
    r = run_python(["-c", code], NO_LIBRARY)
    assert r.returncode == 0, r.stderr


def test_python_m_runs_without_the_cpp_library():
    if run_python(["-c", "import lmscale"], NO_LIBRARY).returncode != 0:
        pytest.skip("this checkout's lmscale/__init__.py loads the C++ library on import (made lazy separately)")
    r = run_python(["-m", "lmscale.baseline.e2e", "--help"], NO_LIBRARY)
    assert r.returncode == 0, r.stderr
    assert "torch-compile-ro" in r.stdout


def batch(capsys, monkeypatch, impl, configs, scope="model", env=None):
    """Runs the batch protocol in this process; returns {id: records}."""
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    path = pathlib.Path(os.environ.get("PYTEST_TMP", "/tmp")) / f"lmscale-baseline-test-{os.getpid()}.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in configs))
    try:
        e2e.main(["--impl", impl, "--baseline-scope", scope, "--configs", str(path)])
    finally:
        path.unlink()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return {line["id"]: line["records"] for line in lines}


def test_batch_answers_every_config_and_survives_out_of_memory(capsys, monkeypatch):
    modes = ["train-step", "forward", "forward-backward", "train-step"]
    configs = [{**TINY, "id": i, "context": 16 if i == 0 else 32, "mode": m} for i, m in enumerate(modes)]
    out = batch(capsys, monkeypatch, "torch-eager", configs, env={"LMSCALE_INJECT_OOM": "tiny:16"})
    assert sorted(out) == [0, 1, 2, 3]
    (oom,) = out[0]  # one status record, the CPU allocator's own error as the reason
    assert (oom["status"], oom["metric"], oom["value"]) == ("oom", "status", None)
    assert "can't allocate memory" in oom["reason"]
    for i in (1, 2, 3):
        by_metric = {r["metric"]: r for r in out[i]}
        assert all(r["status"] == "ok" for r in out[i])
        assert by_metric["step_ms"]["n"] == 2 and by_metric["step_ms"]["value"] > 0
        assert len(by_metric["all_step_ms"]["value"]) == 3  # warm-up included
        assert ("backward_ms" in by_metric) == (modes[i] != "forward")
        assert ("optimizer_ms" in by_metric) == (modes[i] == "train-step")
        assert "compile_s" not in by_metric  # eager compiles nothing
        assert by_metric["step_ms"]["torch_attention"] == "sdpa"
        assert by_metric["step_ms"]["warmup_steps_run"] == 1


def test_records_follow_the_schema(capsys, monkeypatch):
    out = batch(capsys, monkeypatch, "torch-eager", [{**TINY, "id": 0, "context": 16, "mode": "train-step"}])
    units = {"forward_ms": "ms", "backward_ms": "ms", "optimizer_ms": "ms", "step_ms": "ms", "all_step_ms": "ms",
             "tokens_per_s": "tokens/s"}
    for r in out[0]:
        assert all(k in r for k in SCHEMA_FIELDS), r
        assert (r["schema"], r["bench"], r["impl"], r["gpu"]) == (2, "e2e", "torch-eager", "cpu")
        assert r["unit"] == units[r["metric"]]
        assert r["params"] == e2e.param_count(TINY)
        if r["unit"] == "ms" and r["metric"] != "all_step_ms":
            assert all(k in r for k in ("std", "median", "min", "max", "n")), r


def test_naive_scope_writes_attention_out(capsys, monkeypatch):
    out = batch(capsys, monkeypatch, "torch-eager", [{**TINY, "id": 0, "context": 16, "mode": "forward"}], "naive")
    assert {r["torch_attention"] for r in out[0]} == {"naive"}


def test_single_config_prints_records(capsys):
    e2e.main(["--impl", "torch-eager", "--vocab", "512", "--d-model", "64", "--d-ff", "256", "--layers", "2",
              "--heads", "4", "--context", "16", "--batch", "2", "--precision", "fp32", "--mode", "forward-backward",
              "--warmup", "1", "--steps", "2", "--device", "cpu"])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["metric"] for r in records} == {"forward_ms", "backward_ms", "step_ms", "tokens_per_s", "all_step_ms"}


# ----------------------------------------------------------------- the model is the spec's (§1)

def tiny_model(attention="sdpa"):
    torch.manual_seed(0)
    return e2e.LM(vocab=97, d_model=32, d_ff=80, layers=2, heads=4, max_len=16, attention=attention)


def test_parameter_count_and_untied_head():
    model = tiny_model()
    c = {"vocab": 97, "d_model": 32, "d_ff": 80, "layers": 2}
    assert sum(p.numel() for p in model.parameters()) == e2e.param_count(c)
    assert model.emb.data_ptr() != model.head.weight.data_ptr()
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 weights; autocast does the rest


def test_rmsnorm_is_fp32_math_cast_back():
    norm = e2e.RMSNorm(8)
    norm.weight.data = torch.linspace(0.5, 2.0, 8)
    x = torch.randn(3, 8, dtype=torch.float64)
    expect = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    y = norm(x.to(torch.bfloat16))
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), expect, atol=2e-2, rtol=2e-2)  # bf16 input and output
    torch.testing.assert_close(norm(x.float()).double(), expect, atol=1e-5, rtol=1e-5)


def test_rope_rotates_adjacent_pairs():
    rope = e2e.Rope(10000.0, 4, 8)
    x = torch.randn(1, 1, 8, 4)
    y = rope(x)
    for t in range(8):
        for k in range(2):
            a = t * 10000.0 ** (-2 * k / 4)
            x0, x1 = x[0, 0, t, 2 * k].item(), x[0, 0, t, 2 * k + 1].item()
            assert y[0, 0, t, 2 * k].item() == pytest.approx(x0 * math.cos(a) - x1 * math.sin(a), abs=1e-5)
            assert y[0, 0, t, 2 * k + 1].item() == pytest.approx(x0 * math.sin(a) + x1 * math.cos(a), abs=1e-5)


def test_sdpa_and_naive_attention_agree_and_are_causal():
    sdpa, naive = tiny_model("sdpa"), tiny_model("naive")
    naive.load_state_dict(sdpa.state_dict())
    ids = torch.randint(97, (2, 16))
    torch.testing.assert_close(sdpa(ids), naive(ids), atol=1e-5, rtol=1e-5)
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 97  # later tokens must not change earlier logits
    torch.testing.assert_close(sdpa(changed)[:, :10], sdpa(ids)[:, :10])


def test_swiglu_block():
    block = e2e.Block(8, 12, 2, 4, "sdpa")
    x = torch.randn(1, 4, 8)
    h = x + block.attn(block.ln1(x))
    y = block.ln2(h)
    torch.testing.assert_close(block(x), h + block.w2(torch.nn.functional.silu(block.w1(y)) * block.w3(y)))


@pytest.mark.skipif(not os.environ.get("LMSCALE_TEST_COMPILE"),
                    reason="torch.compile on CPU takes minutes on a 2-core machine; LMSCALE_TEST_COMPILE=1 runs it")
def test_compile_records_its_mode_and_never_times_a_compile(capsys, monkeypatch):
    configs = [{**TINY, "id": i, "context": ctx, "mode": "train-step"} for i, ctx in enumerate((16, 32))]
    out = batch(capsys, monkeypatch, "torch-compile", configs)
    for i in (0, 1):
        step = next(r for r in out[i] if r["metric"] == "step_ms")
        assert step["status"] == "ok", step
        assert (step["compile_mode"], step["compile_scope"], step["dynamic_shapes"]) == ("default", "model", "none")
        assert step["compiled_in_timed_steps"] == 0
        assert step["graphs_compiled"] > 0  # static shapes: each context compiles its own graph
        assert any(r["metric"] == "compile_s" and r["unit"] == "s" for r in out[i])
