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
    # logsumexp read off log_softmax at key 0 (never masked): torch.logsumexp goes through MKL's
    # vector exp on CPU, which can be ~3e-9 off in fp64 (see src/ops/flash_reference.cpp).
    lse = s[..., 0] - torch.log_softmax(s, -1)[..., 0]
    return torch.softmax(s, -1) @ v, lse


def inputs(shape_q, shape_k, dtype=torch.float64, device="cpu"):
    q = torch.randn(*shape_q, dtype=dtype, device=device, requires_grad=True)
    k = torch.randn(*shape_k, dtype=dtype, device=device, requires_grad=True)
    v = torch.randn(*shape_k, dtype=dtype, device=device, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
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


def test_saves_only_qkvo_and_fp32_logsumexp():
    """Memory contract: backward keeps Q, K, V, O and L (fp32, (..., Nq)), nothing else (no (N, N) scores)."""
    q, k, v = inputs((2, 3, 40, 16), (2, 3, 40, 16), dtype=torch.float32)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        o = lmscale.flash_attention(q, k, v, is_causal=True)
    shapes = sorted((tuple(t.shape), t.dtype) for t in saved)
    want = sorted([(tuple(q.shape), torch.float32)] * 4 + [((2, 3, 40), torch.float32)])
    assert shapes == want, shapes
    o.sum().backward()


def max_error(got, want):
    return (got.double() - want).abs().max().item()


# A quarter ulp at 1.0: the floor of the bar where plain attention happens to be exact.
FLOOR = {torch.bfloat16: 2.0**-9, torch.float16: 2.0**-12}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cuda_kernel_within_3x_torch_error(dtype, causal):
    """The kernel against fp64 plain attention: O, L and dQ, dK, dV within 3x the max error of plain
    PyTorch attention run in the same dtype, plus a floor (the bar of tests/cpp/kernels), on a
    length that is not a tile multiple."""
    q, k, v = inputs((2, 4, 257, 64), (2, 4, 257, 64), dtype=dtype, device="cuda")
    o, L = lmscale.flash_attention_forward(q, k, v, causal)
    assert L.dtype == torch.float32 and L.shape == q.shape[:-1]
    dout = torch.randn_like(o)
    grads = torch.autograd.grad(lmscale.flash_attention(q, k, v, is_causal=causal), (q, k, v), dout)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_L = plain_attention(q64, k64, v64, causal)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    low, _ = plain_attention(q, k, v, causal)  # PyTorch in the same dtype: the bar
    low_grads = torch.autograd.grad(low, (q, k, v), dout)
    torch.testing.assert_close(L.double(), ref_L, rtol=1e-3, atol=1e-3)
    for name, got, base, want in zip(("O", "dQ", "dK", "dV"), (o, *grads), (low, *low_grads), (ref, *ref_grads)):
        err, bar = max_error(got, want), 3 * max_error(base, want) + FLOOR[dtype]
        print(f"{dtype} causal={causal} {name}: lmscale {err:.2e}, bar {bar:.2e}")
        assert err <= bar, (name, err, bar)


# fp32 on CUDA (its own kernels, fp32-class accuracy): test_flash_fp32_cuda.py.


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 80, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_deterministic_algorithms_give_the_same_gradients_on_every_run(head_dim, causal):
    """torch.use_deterministic_algorithms(True): the backward's dQ is bitwise the same over reruns on an
    sm_90 GPU (the Hopper kernels add it in key-block order); elsewhere PyTorch's alert raises."""
    q, k, v = inputs((2, 3, 1000, head_dim), (2, 3, 1000, head_dim), dtype=torch.bfloat16, device="cuda")
    dout = torch.randn_like(q)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        if torch.cuda.get_device_capability() != (9, 0):
            with pytest.raises(RuntimeError, match="deterministic"):
                torch.autograd.grad(lmscale.flash_attention(q, k, v, is_causal=causal), (q, k, v), dout)
            return
        runs = [torch.autograd.grad(lmscale.flash_attention(q, k, v, is_causal=causal), (q, k, v), dout)
                for _ in range(3)]
    finally:
        torch.use_deterministic_algorithms(previous)
    for grads in runs[1:]:
        for got, first in zip(grads, runs[0]):
            assert torch.equal(got, first)
