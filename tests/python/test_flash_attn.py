"""lmscale.flash_attn (flash-attn's API) on CPU against attention written out in fp64 PyTorch here, with
the mask built from flash-attn's docstring entry by entry: (B, N, H, D) and packed varlen layouts, both
causal alignments (flash-attn's bottom-right; SDPA's top-left through the op), sliding windows, grouped and
multi-query K/V heads, Nq = 1, empty sequences, softmax_scale, the packed variants, softmax_lse, the
arguments it refuses by name, torch.compile and torch.library.opcheck of the new ops, and SDPA's
causal_lower_right accepted by lmscale.flash_attention."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import lmscale
from lmscale.flash_attn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                                flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                                flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)

INF = float("inf")


def visible(nq, nk, causal=False, window=(-1, -1), bottom_right=True):
    """(nq, nk) bool: query i sees key j iff i + shift - left <= j <= i + shift + right (flash-attn's
    docstring; shift = nk - nq bottom-right, 0 top-left; -1 unbounded; causal sets right to 0)."""
    left, right = window
    if causal:
        right = 0
    shift = nk - nq if bottom_right else 0
    mask = torch.zeros(nq, nk, dtype=torch.bool)
    for i in range(nq):
        for j in range(nk):
            mask[i, j] = (left < 0 or j >= i + shift - left) and (right < 0 or j <= i + shift + right)
    return mask


def reference(q, k, v, mask, scale=None):
    """(B, Nq, Hq, D) q with (B, Nk, Hkv, D) k, v in fp64 -> (O (B, Nq, Hq, D), lse (B, Hq, Nq)); a row
    that sees no key gives O = 0 and lse = +inf (flash-attn's rule)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    any_key = mask.any(-1, keepdim=True)
    s = torch.where(any_key, s.masked_fill(~mask, -INF), torch.zeros_like(s))
    p = torch.softmax(s, -1) * mask
    o = torch.einsum("bhqk,bkhd->bqhd", p, v)
    # lse read off log_softmax at each row's first visible key (torch.logsumexp goes through MKL's vector
    # exp on CPU, which can be ~3e-9 off in fp64; see src/ops/flash_reference.cpp).
    first = mask.to(torch.long).argmax(-1, keepdim=True).expand(*s.shape[:-1], 1)
    lse = (s.gather(-1, first) - torch.log_softmax(s, -1).gather(-1, first)).squeeze(-1)
    lse = torch.where(any_key.squeeze(-1), lse, torch.full_like(lse, INF))
    return o, lse.detach()


def rand(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def assert_lse(got, want):
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-10, atol=1e-10)


def check_grads(out, ref, inputs, rtol=1e-9, atol=1e-9):
    dout = torch.randn_like(ref)
    got = torch.autograd.grad(out, inputs, dout)
    want = torch.autograd.grad(ref, inputs, dout)
    for name, g, w in zip("qkv", got, want):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m: f"d{name}: {m}")


WINDOWS = [(-1, -1), (3, 0), (2, 5), (0, 0), (-1, 2), (4, -1)]
LENGTHS = [(1, 1), (1, 23), (23, 1), (17, 70), (70, 17), (33, 33)]
HEADS = [(4, 4), (4, 2), (4, 1)]


@pytest.mark.parametrize("heads", HEADS, ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("nq,nk", LENGTHS)
@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attn_func_matches_reference(causal, window, nq, nk, heads):
    hq, hkv = heads
    q, k, v = rand(2, nq, hq, 8), rand(2, nk, hkv, 8), rand(2, nk, hkv, 8)
    out, lse, probs = flash_attn_func(q, k, v, causal=causal, window_size=window, return_attn_probs=True)
    ref, ref_lse = reference(q, k, v, visible(nq, nk, causal, window))
    assert out.shape == q.shape and out.is_contiguous() and probs is None
    assert lse.shape == (2, hq, nq) and lse.dtype == torch.float64
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    assert_lse(lse, ref_lse)
    check_grads(out, ref, (q, k, v))


def test_causal_is_bottom_right_like_flash_attn():
    """flash-attn's docstring example: seqlen_q = 2, seqlen_k = 5 keeps 1 1 1 1 0 / 1 1 1 1 1, and with
    seqlen_q = 5, seqlen_k = 2 the first three rows see nothing (output zero)."""
    assert visible(2, 5, causal=True).int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    q, k = rand(1, 5, 1, 8), rand(1, 2, 1, 8)
    out = flash_attn_func(q, k, k, causal=True)
    assert out[:, :3].abs().max().item() == 0.0 and out[:, 3:].abs().min().item() > 0.0


def test_softmax_scale_and_low_precision():
    q, k, v = rand(1, 19, 2, 16), rand(1, 19, 2, 16), rand(1, 19, 2, 16)
    out = flash_attn_func(q, k, v, softmax_scale=0.05, causal=True)
    ref, _ = reference(q, k, v, visible(19, 19, True), scale=0.05)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    out16 = flash_attn_func(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), causal=True)
    assert out16.dtype == torch.bfloat16
    torch.testing.assert_close(out16.double(), reference(q, k, v, visible(19, 19, True))[0], rtol=3e-2, atol=3e-2)


def test_packed_variants_match_the_unpacked_call():
    qkv = rand(2, 21, 3, 4, 8)
    out = flash_attn_qkvpacked_func(qkv, causal=True, window_size=(5, 0))
    q, k, v = qkv.unbind(2)
    ref, _ = reference(q, k, v, visible(21, 21, True, (5, 0)))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    dout = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, qkv, dout)
    (want,) = torch.autograd.grad(ref, qkv, dout)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)

    q, kv = rand(2, 7, 4, 8), rand(2, 30, 2, 2, 8)  # grouped K/V heads, Nq < Nk
    out = flash_attn_kvpacked_func(q, kv, causal=True)
    ref, _ = reference(q, *kv.unbind(2), visible(7, 30, True))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- packed variable-length batches
def cu_seqlens(lengths):
    return F.pad(torch.tensor(lengths).cumsum(0), (1, 0)).to(torch.int32)


def reference_varlen(q, k, v, lens_q, lens_k, causal, window, scale=None):
    """Per sequence in fp64, packed back: (O (total_q, Hq, D), lse (Hq, total_q)); rows past the last
    sequence 0 and +inf."""
    outs, lses, sq, sk = [], [], 0, 0
    for nq, nk in zip(lens_q, lens_k):
        if nk == 0:
            outs.append(q[sq:sq + nq] * 0)
            lses.append(torch.full((q.shape[1], nq), INF, dtype=q.dtype))
        else:
            o, lse = reference(q[None, sq:sq + nq], k[None, sk:sk + nk], v[None, sk:sk + nk],
                               visible(nq, nk, causal, window), scale)
            outs.append(o[0])
            lses.append(lse[0])
        sq, sk = sq + nq, sk + nk
    pad = q.shape[0] - sq
    outs.append(q[sq:] * 0)
    lses.append(torch.full((q.shape[1], pad), INF, dtype=q.dtype))
    return torch.cat(outs), torch.cat(lses, 1)


PACKINGS = {
    "empty-seqs": ([5, 0, 17, 1, 33], [5, 3, 40, 0, 20], 0),  # no queries; no keys; Nq = 1; Nq != Nk
    "decode": ([1, 1, 1], [9, 1, 30], 3),  # Nq = 1 each, 3 padding rows past the last sequence
    "one": ([37], [37], 0),
}


@pytest.mark.parametrize("heads", HEADS, ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("packing", PACKINGS.values(), ids=PACKINGS.keys())
@pytest.mark.parametrize("window", [(-1, -1), (3, 0), (2, 2), (-1, 1)], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attn_varlen_func_matches_reference(causal, window, packing, heads):
    lens_q, lens_k, pad = packing
    hq, hkv = heads
    q, k, v = rand(sum(lens_q) + pad, hq, 8), rand(sum(lens_k), hkv, 8), rand(sum(lens_k), hkv, 8)
    out, lse, _ = flash_attn_varlen_func(q, k, v, cu_seqlens(lens_q), cu_seqlens(lens_k), max(lens_q), max(lens_k),
                                         softmax_scale=0.3, causal=causal, window_size=window,
                                         return_attn_probs=True)
    ref, ref_lse = reference_varlen(q, k, v, lens_q, lens_k, causal, window, scale=0.3)
    assert out.shape == q.shape and lse.shape == (hq, q.shape[0])
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    assert_lse(lse, ref_lse)
    check_grads(out, ref, (q, k, v))


def test_varlen_of_equal_lengths_is_the_dense_call():
    q, k, v = rand(3, 20, 4, 8), rand(3, 26, 2, 8), rand(3, 26, 2, 8)
    dense = flash_attn_func(q, k, v, causal=True, window_size=(6, -1))
    packed = flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_seqlens([20] * 3),
                                    cu_seqlens([26] * 3), 20, 26, causal=True, window_size=(6, -1))
    torch.testing.assert_close(packed.view(3, 20, 4, 8), dense, rtol=1e-12, atol=1e-12)


def test_varlen_packed_variants():
    lens = [4, 0, 11]
    cu = cu_seqlens(lens)
    qkv = rand(15, 3, 2, 8)
    out = flash_attn_varlen_qkvpacked_func(qkv, cu, 11, causal=True)
    ref, _ = reference_varlen(*qkv.unbind(1), lens, lens, True, (-1, -1))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    q, kv = rand(15, 4, 8), rand(15, 2, 2, 8)
    out = flash_attn_varlen_kvpacked_func(q, kv, cu, cu, 11, 11, window_size=(1, 1))
    ref, _ = reference_varlen(q, *kv.unbind(1), lens, lens, False, (1, 1))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


def test_varlen_checks_name_the_argument():
    q = rand(10, 2, 8)
    with pytest.raises(RuntimeError, match="int32"):
        flash_attn_varlen_func(q, q, q, cu_seqlens([4, 6]).long(), cu_seqlens([4, 6]), 6, 6)
    with pytest.raises(RuntimeError, match="max_seqlen_k"):
        flash_attn_varlen_func(q, q, q, cu_seqlens([4, 6]), cu_seqlens([4, 6]), 6, 5)
    with pytest.raises(RuntimeError, match="non-decreasing"):
        flash_attn_varlen_func(q, q, q, torch.tensor([0, 6, 4], dtype=torch.int32), cu_seqlens([4, 6]), 6, 6)


# ---------------------------------------------------------------- what is refused, by name
@pytest.mark.parametrize("kwargs,name", [({"dropout_p": 0.1}, "dropout_p"), ({"softcap": 30.0}, "softcap"),
                                         ({"alibi_slopes": torch.ones(2)}, "alibi_slopes")])
def test_unsupported_arguments_are_refused_by_name(kwargs, name):
    q = rand(1, 4, 2, 8)
    for call in (lambda: flash_attn_func(q, q, q, **kwargs),
                 lambda: flash_attn_varlen_func(q[0], q[0], q[0], cu_seqlens([4]), cu_seqlens([4]), 4, 4, **kwargs)):
        with pytest.raises(ValueError, match=name):
            call()


def test_kv_cache_and_paged_blocks_are_refused_by_name():
    q = rand(4, 2, 8)
    with pytest.raises(ValueError, match="block_table"):
        flash_attn_varlen_func(q, q, q, cu_seqlens([4]), cu_seqlens([4]), 4, 4, block_table=torch.zeros(1, 1))
    with pytest.raises(NotImplementedError, match="KV cache"):
        flash_attn_with_kvcache(q[None], q[None], q[None])


def test_layout_is_checked():
    with pytest.raises(ValueError, match=r"\(B, Nq, Hq, D\)"):
        flash_attn_func(rand(4, 2, 8), rand(4, 2, 8), rand(4, 2, 8))


def test_deterministic_is_accepted_and_reproducible_on_cpu():
    q, k, v = rand(1, 30, 4, 16), rand(1, 30, 2, 16), rand(1, 30, 2, 16)
    grads = []
    for _ in range(2):
        out = flash_attn_func(q, k, v, causal=True, deterministic=True)
        grads.append(torch.autograd.grad(out.sum(), (q, k, v)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_reachable_as_an_attribute_of_the_package():
    assert lmscale.flash_attn.flash_attn_func is flash_attn_func


# ---------------------------------------------------------------- custom-op machinery
def test_compile_fullgraph_traces_the_dense_and_varlen_ops():
    torch._dynamo.reset()
    q, k, v = rand(2, 9, 4, 16), rand(2, 13, 2, 16), rand(2, 13, 2, 16)
    dense = lambda q, k, v: flash_attn_func(q, k, v, causal=True, window_size=(4, -1))
    cu_q, cu_k = cu_seqlens([5, 0, 13]), cu_seqlens([7, 3, 16])
    varlen = lambda q, k, v: flash_attn_varlen_func(q, k, v, cu_q, cu_k, 13, 16, causal=True)
    qp, kp, vp = rand(18, 4, 16), rand(26, 2, 16), rand(26, 2, 16)
    for fn, args in ((dense, (q, k, v)), (varlen, (qp, kp, vp))):
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*args)
        want = fn(*args)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        dout = torch.randn_like(got)
        for g, w in zip(torch.autograd.grad(got, args, dout), torch.autograd.grad(want, args, dout)):
            torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_mask_arguments_and_varlen_ops(dtype):
    ops = torch.ops.lmscale
    q, k = torch.randn(2, 4, 21, 16, dtype=dtype), torch.randn(2, 2, 30, 16, dtype=dtype)
    q.requires_grad_()
    mask = {"scale": 0.3, "bottom_right": True, "window_left": 6, "window_right": 0}
    torch.library.opcheck(ops.flash_attention_forward.default, (q, k, k, True), mask)
    torch.library.opcheck(ops.flash_attention.default, (q, k, k, True), mask)
    with torch.no_grad():
        o, L = ops.flash_attention_forward(q, k, k, True, **mask)
    torch.library.opcheck(ops.flash_attention_backward.default, (q.detach(), k, k, o, L, torch.randn_like(o), True),
                          mask)
    cu_q, cu_k = cu_seqlens([5, 0, 16]), cu_seqlens([9, 4, 17])
    qp, kp = torch.randn(21, 4, 16, dtype=dtype, requires_grad=True), torch.randn(30, 2, 16, dtype=dtype)
    args = (qp, kp, kp, cu_q, cu_k, 16, 17, True)
    torch.library.opcheck(ops.flash_attention_varlen_forward.default, args, mask)
    with torch.no_grad():
        o, L = ops.flash_attention_varlen_forward(*args, **mask)
    assert L.shape == (4, 21)
    torch.library.opcheck(ops.flash_attention_varlen_backward.default,
                          (qp.detach(), kp, kp, o, L, torch.randn_like(o), cu_q, cu_k, 16, 17, True), mask)


def test_output_takes_q_order_of_dimensions():
    """O of a (B, H, N, D) view of a (B, N, H, D) tensor is such a view (Note [output layout], flash_attention.cpp),
    so flash_attn_func's out needs no copy and a model's (B, N, H * D) rows are a free reshape; q sliced from a packed
    (B, N, 3, H, D) projection gives O dense in the same order; opcheck holds the fake to the real strides."""
    ops = torch.ops.lmscale
    q, k, v = (torch.randn(2, 7, 3, 16, dtype=torch.float32) for _ in range(3))  # (B, N, H, D)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    o, _ = ops.flash_attention_forward(qt, kt, vt, True)
    assert o.stride() == qt.stride() and o.transpose(1, 2).is_contiguous()
    out = flash_attn_func(q, k, v, causal=True)
    assert out.is_contiguous() and out._is_view()  # the op's O, transposed back: no copy was made
    torch.testing.assert_close(out, o.transpose(1, 2), rtol=0, atol=0)
    qkv = torch.randn(2, 7, 3, 3, 16, dtype=torch.float32)
    qs, ks, vs = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    o2 = ops.flash_attention(qs, ks, vs, True)
    assert o2.transpose(1, 2).is_contiguous()
    # fp32 tolerance, not bitwise: the CPU reference's matmuls may take another BLAS path for strided inputs (seen:
    # 3.6e-7 apart on one machine, equal on another); the layout is what this test is about.
    torch.testing.assert_close(o2, ops.flash_attention(qs.contiguous(), ks.contiguous(), vs.contiguous(), True),
                               rtol=1e-5, atol=1e-6)
    torch.library.opcheck(ops.flash_attention_forward.default, (qt.requires_grad_(), kt, vt, True))
    torch.library.opcheck(ops.flash_attention.default, (qs, ks, vs, True))


# ---------------------------------------------------------------- SDPA's causal biases
@pytest.mark.parametrize("nq,nk", [(5, 12), (12, 12), (1, 9)])
def test_sdpa_causal_lower_right_accepted_like_sdpa(nq, nk):
    q, k, v = rand(2, 4, nq, 16), rand(2, 2, nk, 16), rand(2, 2, nk, 16)
    bias = causal_lower_right(nq, nk)
    out = lmscale.flash_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    torch.testing.assert_close(out, want, rtol=1e-9, atol=1e-9)
    check_grads(out, want, (q, k, v))
    upper = lmscale.flash_attention(q, k, v, attn_mask=causal_upper_left(nq, nk), enable_gqa=True)
    torch.testing.assert_close(upper, lmscale.flash_attention(q, k, v, is_causal=True, enable_gqa=True))


def test_sdpa_causal_lower_right_with_more_queries_gives_zero_rows():
    """Nq > Nk: the first Nq - Nk queries see no key; lmscale gives 0 there, as flash-attn (SDPA: NaN)."""
    q, k, v = rand(1, 2, 7, 8), rand(1, 2, 3, 8), rand(1, 2, 3, 8)
    out = lmscale.flash_attention(q, k, v, attn_mask=causal_lower_right(7, 3))
    ref, _ = reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), visible(7, 3, causal=True))
    torch.testing.assert_close(out, ref.transpose(1, 2), rtol=1e-10, atol=1e-10)
    assert out[..., :4, :].abs().max().item() == 0.0


def test_sdpa_causal_bias_misuse_is_refused():
    q = rand(1, 1, 4, 8)
    with pytest.raises(ValueError, match="is_causal"):
        lmscale.flash_attention(q, q, q, is_causal=True, attn_mask=causal_lower_right(4, 4))
    with pytest.raises(ValueError, match="made for Nq = 5"):
        lmscale.flash_attention(q, q, q, attn_mask=causal_lower_right(5, 4))


def test_op_top_left_and_bottom_right_differ_only_when_lengths_do():
    q, k = rand(1, 2, 6, 8), rand(1, 2, 9, 8)
    top = torch.ops.lmscale.flash_attention_forward(q, k, k, True)[0]
    bottom = torch.ops.lmscale.flash_attention_forward(q, k, k, True, bottom_right=True)[0]
    torch.testing.assert_close(top, reference(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2),
                                              visible(6, 9, True, bottom_right=False))[0].transpose(1, 2))
    torch.testing.assert_close(bottom, reference(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2),
                                                 visible(6, 9, True))[0].transpose(1, 2))
    assert not torch.allclose(top, bottom)


# ---------------------------------------------------------------- CUDA (skipped without a GPU)
CUDA_CASES = {  # q, k/v shapes (B, N, H, D); flash_attn_func's arguments
    "gqa-causal": ((2, 100, 8, 64), (2, 100, 2, 64), {"causal": True}),
    "bottom-right-nq<nk": ((2, 60, 4, 64), (2, 130, 4, 64), {"causal": True}),
    "bottom-right-nq>nk": ((2, 130, 4, 64), (2, 60, 2, 64), {"causal": True}),
    "decode": ((3, 1, 4, 64), (3, 77, 1, 64), {"causal": True}),
    "scale": ((2, 100, 4, 64), (2, 100, 4, 64), {"softmax_scale": 0.07}),
    "window-right-only": ((2, 100, 4, 64), (2, 100, 4, 64), {"window_size": (-1, 3)}),
    "window-wider-than-keys": ((2, 100, 4, 64), (2, 100, 4, 64), {"causal": True, "window_size": (4096, 0)}),
    "sliding-window": ((2, 300, 4, 64), (2, 300, 2, 64), {"causal": True, "window_size": (37, 0)}),
    "window-both-sides-d128": ((1, 200, 4, 128), (1, 170, 4, 128), {"window_size": (20, 15)}),
}


def assert_bf16_close_with_grads(out, ref, inputs, inputs64):
    """A bf16 CUDA output and its gradients for a random dO against the fp64 reference's, within bf16 noise."""
    torch.testing.assert_close(out.double().cpu(), ref, rtol=2e-2, atol=2e-2)
    dout = torch.randn_like(ref)
    got = torch.autograd.grad(out, inputs, dout.to("cuda", torch.bfloat16))
    want = torch.autograd.grad(ref, inputs64, dout)
    for name, g, w in zip("qkv", got, want):
        torch.testing.assert_close(g.double().cpu(), w, rtol=4e-2, atol=4e-2, msg=lambda m: f"d{name}: {m}")


@pytest.mark.gpu
@pytest.mark.parametrize("case", CUDA_CASES.keys())
def test_cuda_serves_grouped_heads_and_both_alignments(case):
    """bf16 on the kernels (grouped heads by index, every mask in the kernels) against the fp64 reference of
    the same rounded inputs, within bf16 noise."""
    shape_q, shape_kv, kwargs = CUDA_CASES[case]
    q = torch.randn(*shape_q, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(*shape_kv, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in "kv")
    out = flash_attn_func(q, k, v, **kwargs)
    q64, k64, v64 = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    mask = visible(shape_q[1], shape_kv[1], kwargs.get("causal", False), kwargs.get("window_size", (-1, -1)))
    ref, _ = reference(q64, k64, v64, mask, kwargs.get("softmax_scale"))
    assert_bf16_close_with_grads(out, ref, (q, k, v), (q64, k64, v64))


@pytest.mark.gpu
@pytest.mark.parametrize("window", [(-1, -1), (16, 0)], ids=["causal", "sliding"])
def test_cuda_packed_batches_match_the_reference(window):
    """flash_attn_varlen_func on the kernels: an empty sequence, a one-token one, Nq != Nk, rows past the last
    offset, grouped heads; bf16 against the fp64 reference of the rounded inputs."""
    lens_q, lens_k, pad = [37, 0, 130, 1, 64], [37, 12, 150, 1, 60], 3
    q = torch.randn(sum(lens_q) + pad, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(sum(lens_k), 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in "kv")
    cq, ck = cu_seqlens(lens_q).cuda(), cu_seqlens(lens_k).cuda()
    out = flash_attn_varlen_func(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True, window_size=window)
    q64, k64, v64 = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    ref, _ = reference_varlen(q64, k64, v64, lens_q, lens_k, True, window)
    assert_bf16_close_with_grads(out, ref, (q, k, v), (q64, k64, v64))


def test_meta_inputs_mixed_with_cpu_are_refused():
    """A `meta` tensor among CPU ones reaches the fake (the meta kernel) or the CPU check: either refuses."""
    q, k = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16, device="meta")
    with pytest.raises(RuntimeError, match="one device"):
        torch.ops.lmscale.flash_attention_forward(q, k, k, True, bottom_right=True)
    cu = cu_seqlens([8])
    with pytest.raises(RuntimeError, match="one device|q's device"):
        torch.ops.lmscale.flash_attention_varlen_forward(q[0].transpose(0, 1), k[0].transpose(0, 1),
                                                         k[0].transpose(0, 1), cu, cu, 8, 8, True)
    # All on meta: shapes only, through the fakes.
    qm = q.to("meta")
    o, L = torch.ops.lmscale.flash_attention_varlen_forward(qm[0], qm[0], qm[0], cu.to("meta"), cu.to("meta"), 8, 8)
    assert o.shape == (2, 8, 16) and L.shape == (8, 2) and o.device.type == "meta"


# ---------------------------------------------------------------- the eager path
def test_eager_calls_are_the_registered_formula_bit_for_bit():
    """Eager calls run the ops' autograd formula outside register_autograd's wrapper (for its host time, attention.py
    _attend): dense ones through the O-only op's C++ Function, packed ones as a plain autograd.Function; O and the
    gradients are the registered formula's exactly."""
    from lmscale.attention import _forward_op, _varlen_forward_op
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 9, 4, 16, requires_grad=True) for _ in range(3))
    dout = torch.randn(2, 9, 4, 16)
    out = flash_attn_func(q, k, v, causal=True, window_size=(3, 0))
    ref = _forward_op(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True, bottom_right=True,
                      window_left=3, window_right=0)[0].transpose(1, 2)
    assert type(ref.grad_fn.next_functions[0][0]).__name__.startswith("GeneratedBackwardFor")
    # flash_attn_func's dense calls take the O-only op's C++ autograd Function (its host time is the least).
    assert "FlashAttentionFunction" in out.grad_fn.next_functions[0][0].name()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), dout), torch.autograd.grad(ref, (q, k, v), dout)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    cu = torch.tensor([0, 3, 3, 11], dtype=torch.int32)  # an empty document among them
    qp, kp, vp = (torch.randn(11, 4, 16, requires_grad=True) for _ in range(3))
    dp = torch.randn(11, 4, 16)
    o = flash_attn_varlen_func(qp, kp, vp, cu, cu, 8, 8, causal=True)
    assert type(o.grad_fn).__name__ == "_EagerAttentionBackward"
    r = _varlen_forward_op(qp, kp, vp, cu, cu, 8, 8, True, bottom_right=True)[0]
    torch.testing.assert_close(o, r, rtol=0, atol=0)
    for got, want in zip(torch.autograd.grad(o, (qp, kp, vp), dp), torch.autograd.grad(r, (qp, kp, vp), dp)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_backward_runs_the_backward_op_and_no_fill():
    """The backward of an eager call and of the registered formula is the backward op and views: no zero-filled
    gradient is made up for the L the forward returns beside O (a kernel and an allocation per call)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from lmscale.attention import _forward_op

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    q, k, v = (torch.randn(2, 9, 4, 16, requires_grad=True) for _ in range(3))
    dout = torch.randn(2, 9, 4, 16)
    registered = _forward_op(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True)[0].transpose(1, 2)
    for out in (flash_attn_func(q, k, v, causal=True), registered):
        with Ops() as ops:
            torch.autograd.grad(out, (q, k, v), dout)
        assert "lmscale.flash_attention_backward" in ops.names, ops.names
        assert not [n for n in ops.names if "fill" in n or "zero" in n], ops.names


def test_meta_inputs_that_require_grad_infer_the_output():
    """A model run on the meta device (shape inference, deferred init) gets O's shape through the eager path too."""
    q = torch.randn(1, 2, 8, 16, device="meta", requires_grad=True)
    o = lmscale.flash_attention(q, q, q, is_causal=True)
    assert o.device.type == "meta" and o.shape == q.shape
    out = flash_attn_func(q.transpose(1, 2), q.transpose(1, 2), q.transpose(1, 2), causal=True)
    assert out.device.type == "meta" and out.shape == (1, 8, 2, 16)
