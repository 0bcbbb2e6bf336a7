"""lmscale.flash_attention against F.scaled_dot_product_attention's contract: scale=, enable_gqa=, a
value head size of its own, causal with unequal lengths (SDPA's top-left alignment), the autocast
rule, double backward refused, SDPA-only arguments refused by name, torch.compile(fullgraph=True)
through the new arguments, and the ops usable right after `import lmscale` with no other step."""
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lmscale

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def rand(*shape, dtype=torch.float64, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device, requires_grad=True)


def check_like_sdpa(q, k, v, rtol=1e-9, atol=1e-9, **kwargs):
    """Output and gradients of lmscale.flash_attention and SDPA with the same arguments."""
    o = lmscale.flash_attention(q, k, v, **kwargs)
    want = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert o.shape == want.shape and o.dtype == want.dtype
    dout = torch.randn_like(want)
    got_g = torch.autograd.grad(o, (q, k, v), dout)
    want_g = torch.autograd.grad(want, (q, k, v), dout)
    torch.testing.assert_close(o, want, rtol=rtol, atol=atol)
    for name, g, w in zip("qkv", got_g, want_g):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m: f"d{name}: {m}")


@pytest.mark.parametrize("scale", [0.05, 1.0, None])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_scale_matches_sdpa(scale, causal):
    check_like_sdpa(rand(2, 3, 17, 16), rand(2, 3, 17, 16), rand(2, 3, 17, 16), is_causal=causal, scale=scale)


@pytest.mark.parametrize("heads", [(8, 2), (6, 3), (4, 1)], ids=["8q-2kv", "6q-3kv", "mqa"])
def test_enable_gqa_matches_sdpa(heads):
    hq, hkv = heads
    check_like_sdpa(rand(2, hq, 13, 16), rand(2, hkv, 13, 16), rand(2, hkv, 13, 16), is_causal=True, enable_gqa=True)


def test_gqa_without_enable_gqa_says_how():
    with pytest.raises(ValueError, match="enable_gqa=True"):
        lmscale.flash_attention(rand(1, 4, 5, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8))
    with pytest.raises(ValueError, match="multiple"):
        lmscale.flash_attention(rand(1, 5, 5, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8), enable_gqa=True)


@pytest.mark.parametrize("dv", [8, 32])
def test_value_head_size_of_its_own(dv):
    check_like_sdpa(rand(2, 2, 11, 16), rand(2, 2, 11, 16), rand(2, 2, 11, dv), is_causal=True)
    check_like_sdpa(rand(2, 2, 11, 16), rand(2, 2, 11, 16), rand(2, 2, 11, dv), scale=0.3)


@pytest.mark.parametrize("nq,nk", [(5, 12), (12, 5), (1, 9)])
def test_causal_with_unequal_lengths_aligned_like_sdpa(nq, nk):
    check_like_sdpa(rand(2, 2, nq, 16), rand(2, 2, nk, 16), rand(2, 2, nk, 16), is_causal=True)


def test_sdpa_only_arguments_refused_by_name():
    q = rand(1, 1, 4, 8)
    with pytest.raises(ValueError, match="attn_mask"):
        lmscale.flash_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout_p"):
        lmscale.flash_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(TypeError, match="is_causal"):
        lmscale.flash_attention(q, q, q, torch.ones(4, 4, dtype=torch.bool))  # SDPA's 4th: a mask


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_raises(device):
    q, k, v = (rand(1, 2, 8, 16, dtype=torch.float32, device=device) for _ in range(3))
    o = lmscale.flash_attention(q, k, v, is_causal=True)
    (dq,) = torch.autograd.grad(o.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dq.square().sum().backward()  # a gradient penalty


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_casts_like_sdpa(device, dtype):
    """fp32 inputs under autocast run in the autocast dtype, as SDPA's; fp64 stays fp64 (SDPA's too)."""
    q, k, v = (torch.randn(1, 2, 16, 16, device=device) for _ in range(3))
    with torch.autocast(device, dtype=dtype):
        o = lmscale.flash_attention(q, k, v, is_causal=True)
        o_op = torch.ops.lmscale.flash_attention(q, k, v, True)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o64 = lmscale.flash_attention(q.double(), k.double(), v.double())
    assert o.dtype == o_op.dtype == want.dtype == dtype
    assert o64.dtype == torch.float64
    torch.testing.assert_close(o.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_compile_fullgraph_with_gqa_scale_and_value_size():
    torch._dynamo.reset()
    q, k, v = rand(2, 4, 9, 16), rand(2, 2, 9, 16), rand(2, 2, 9, 8)
    fn = lambda q, k, v: lmscale.flash_attention(q, k, v, is_causal=True, scale=0.2, enable_gqa=True)
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(q, k, v)
    torch.testing.assert_close(got, fn(q, k, v))


def test_ops_registered_at_import():
    """A fresh interpreter: `import lmscale`, then torch.ops.lmscale.* straight away (no load())."""
    code = ("import torch, lmscale\n"
            "q = torch.randn(1, 2, 8, 16)\n"
            "o, L = torch.ops.lmscale.flash_attention_forward(q, q, q, True)\n"
            "y = torch.ops.lmscale.rms_norm_forward(q, None, torch.ones(16), 1e-5, None)[1]\n"
            "print(o.shape[-1] + y.shape[-1])\n")
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(lmscale.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "32"


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["scale", "gqa", "value-size", "causal-nq<nk", "causal-nq>nk"])
def test_cuda_kernels_follow_sdpa(case):
    """The same contract on the CUDA kernels, bf16, against SDPA in bf16 (within bf16 noise)."""
    shapes = {"scale": ((2, 4, 100, 64),) * 3, "gqa": ((2, 8, 100, 64), (2, 2, 100, 64), (2, 2, 100, 64)),
              "value-size": ((2, 4, 100, 64), (2, 4, 100, 64), (2, 4, 100, 32)),
              "causal-nq<nk": ((2, 4, 60, 64), (2, 4, 130, 64), (2, 4, 130, 64)),
              "causal-nq>nk": ((2, 4, 130, 64), (2, 4, 60, 64), (2, 4, 60, 64))}[case]
    kwargs = {"scale": {"scale": 0.07}, "gqa": {"enable_gqa": True, "is_causal": True}, "value-size": {},
              "causal-nq<nk": {"is_causal": True}, "causal-nq>nk": {"is_causal": True}}[case]
    q, k, v = (rand(*s, dtype=torch.bfloat16, device="cuda") for s in shapes)
    check_like_sdpa(q, k, v, rtol=3e-2, atol=3e-2, **kwargs)


@pytest.mark.gpu
def test_cuda_unsupported_value_size_names_the_built_sizes():
    q = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 2, 16, 96, device="cuda", dtype=torch.bfloat16)  # padded width 96: not built
    with pytest.raises(RuntimeError, match="supported"):
        lmscale.flash_attention(q, q, v)
