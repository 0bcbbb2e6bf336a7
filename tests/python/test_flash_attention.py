"""lmscale.flash_attention from Python against plain attention in fp64 (CPU: the tiled reference;
CUDA, when present: the kernel), forward, logsumexp and gradients."""
import math

import pytest
import torch

import lmscale


def plain_attention(q, k, v, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def inputs(shape_q, shape_k, dtype=torch.float64, device="cpu"):
    q = torch.randn(*shape_q, dtype=dtype, device=device, requires_grad=True)
    k = torch.randn(*shape_k, dtype=dtype, device=device, requires_grad=True)
    v = torch.randn(*shape_k, dtype=dtype, device=device, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 97, 16), (5, 33, 32)])
def test_matches_plain_attention_with_gradients(causal, shape):
    q, k, v = inputs(shape, shape)
    o = lmscale.flash_attention(q, k, v, is_causal=causal)
    ref, _ = plain_attention(q, k, v, causal)
    torch.testing.assert_close(o, ref, rtol=1e-10, atol=1e-10)
    grad = torch.randn_like(o)
    got = torch.autograd.grad(o, (q, k, v), grad)
    want = torch.autograd.grad(ref, (q, k, v), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


def test_low_level_ops_return_logsumexp_and_gradients():
    q, k, v = inputs((2, 65, 32), (2, 40, 32))  # Nq != Nk, not causal
    o, L = lmscale.flash_attention_forward(q, k, v)
    ref, ref_L = plain_attention(q, k, v, False)
    torch.testing.assert_close(o, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(L, ref_L, rtol=1e-10, atol=1e-10)
    dout = torch.randn_like(o)
    dq, dk, dv = lmscale.flash_attention_backward(q, k, v, o, L, dout)
    want = torch.autograd.grad(ref, (q, k, v), dout)
    for g, w in zip((dq, dk, dv), want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9)


def test_mismatched_head_dims_fail_with_a_clear_message():
    q, k, v = inputs((1, 8, 16), (1, 8, 8))
    with pytest.raises(RuntimeError, match="must share the head dim"):
        lmscale.flash_attention(q, k, v)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_kernel_bf16_close_to_fp64(causal):
    q, k, v = inputs((1, 4, 257, 64), (1, 4, 257, 64), dtype=torch.bfloat16, device="cuda")
    o = lmscale.flash_attention(q, k, v, is_causal=causal)
    ref, _ = plain_attention(q.double(), k.double(), v.double(), causal)
    err = (o.double() - ref).norm() / ref.norm()
    assert err < 1e-2, err
    o.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
