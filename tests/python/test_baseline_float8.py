"""The torch-float8 baselines (python/lmscale/baseline/float8.py and their wiring in e2e.py), on the CPU:
the swap to nn.Linear keeps every parameter and the model's output, the layer filter is lmscale's
(no LM head, no layer narrower than min_dim), precision fp8 and the float8 impls go together (anything
else is an error record, not a silent bf16 run), and without the pinned torchao the error says how to
get it. The float8 step itself needs a GPU with FP8 (scripts/gpu/gpu_check.sh, stage float8, runs it on an H100)."""
import importlib.util

import pytest
import torch

from lmscale.baseline import e2e, float8

TINY = {"size": "tiny", "vocab": 512, "d_model": 64, "d_ff": 256, "layers": 2, "heads": 4, "model_context": 32,
        "context": 32, "batch": 2, "precision": "fp32", "attention": "naive", "warmup": 1, "steps": 2,
        "device": "cpu", "mode": "train-step"}


def tiny_model():
    torch.manual_seed(0)
    return e2e.LM(512, 64, 256, 2, 4, 32, "naive")


def test_swap_to_nn_linear_keeps_parameters_and_output():
    model = tiny_model()
    ids = torch.randint(512, (2, 16))
    before = model(ids)
    params = {id(p) for p in model.parameters()}
    float8.as_nn_linear(model, e2e.Linear)
    assert not any(isinstance(m, e2e.Linear) for m in model.modules())
    assert sum(isinstance(m, torch.nn.Linear) for m in model.modules()) == 2 * 7 + 1
    assert {id(p) for p in model.parameters()} == params
    assert torch.equal(model(ids), before)


def test_precision_fp8_goes_with_the_float8_impls_only():
    for impl, precision in (("torch-eager", "fp8"), ("torch-float8", "bf16")):
        records = e2e.run_one(e2e.Runner(impl, "model"), e2e.normalise({**TINY, "precision": precision}))
        assert records[0]["status"] == "error", records[0]
        assert "torch-float8" in records[0]["reason"]


@pytest.mark.skipif(importlib.util.find_spec("torchao") is not None, reason="torchao is installed")
def test_missing_torchao_names_the_pinned_version():
    with pytest.raises(RuntimeError, match="torchao==" + float8.TORCHAO_VERSION):
        float8.convert(tiny_model(), e2e.Linear)


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="needs torchao")
def test_convert_follows_lmscales_layer_choice():
    model = float8.convert(tiny_model(), e2e.Linear, min_dim=64)
    from torchao.float8.float8_linear import Float8Linear
    converted = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert "head" not in converted and len(converted) == 2 * 7
    assert not any(isinstance(m, Float8Linear) for m in float8.convert(tiny_model(), e2e.Linear).modules())
