"""FlashAttention-2 for PyTorch: the C++ ops ``torch.ops.lmscale.flash_attention_{forward,backward}``
(schemas and CPU/CUDA kernels registered by liblmscale, src/ops/flash_attention.cpp) completed here
through ``torch.library`` with what PyTorch 2.x asks of a custom op:

- a fake (meta) implementation of both ops, so ``torch.compile`` and ``torch.export`` trace them with
  symbolic shapes (no graph break, no recompile for a new sequence length);
- the autograd formula of the forward op (``register_autograd``): ``setup_context`` saves q, k, v, O
  and the logsumexp L with ``save_for_backward``; backward calls the backward op. So
  ``o.grad_fn.saved_tensors`` lists those five tensors, L being the one of shape (..., Nq).

``torch.ops.lmscale.flash_attention`` (O only) gets a fake kernel here too; its autograd is the C++
``autograd::Function`` (so C++ programs get gradients through the dispatcher), whose grad_fn is a C++
node: Python code wanting the saved tensors calls ``lmscale.flash_attention`` (this module).

Importing this module loads liblmscale (``lmscale._library``). Why the schemas stay in C++ and are
not redefined with ``torch.library.custom_op``: the C++ training code and CLI run the same ops with
no Python in the process; one definition serves both, and Python adds only what needs Python.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from . import _library

_library.load()

__all__ = ["flash_attention", "flash_attention_forward", "flash_attention_backward", "FlashAttentionFunction"]

_forward_op = torch.ops.lmscale.flash_attention_forward.default
_backward_op = torch.ops.lmscale.flash_attention_backward.default


def _logsumexp_dtype(q: torch.Tensor) -> torch.dtype:
    # fp64 inputs (served by the reference) keep an fp64 L; every other dtype gets fp32.
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _check_fake_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> None:
    """The shape rules of the C++ check_qkv, in a form symbolic shapes understand (torch._check), so a
    traced program fails at compile time with the same message as eager."""
    torch._check(q.dim() >= 2 and q.dim() == k.dim() == v.dim(),
                 lambda: f"flash_attention: q, k, v must be (..., N, D) with equal rank; got {q.shape}, {k.shape}, {v.shape}")
    torch._check(k.shape == v.shape, lambda: f"flash_attention: k and v must have the same shape; got {k.shape}, {v.shape}")
    torch._check(q.shape[:-2] == k.shape[:-2],
                 lambda: f"flash_attention: q and k must share their leading (batch/head) dims; got {q.shape}, {k.shape}")
    torch._check(q.shape[-1] == k.shape[-1],
                 lambda: f"flash_attention: q and k must share the head dim D; got {q.shape}, {k.shape}")
    torch._check(q.dtype == k.dtype == v.dtype,
                 lambda: f"flash_attention: q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if is_causal:
        torch._check(q.shape[-2] == k.shape[-2],
                     lambda: f"flash_attention: is_causal=True needs Nq == Nk; got {q.shape[-2]}, {k.shape[-2]}")


@torch.library.register_fake("lmscale::flash_attention_forward")
def _forward_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
    # Both devices return contiguous O and L (the C++ op guarantees it), so the fake does too.
    _check_fake_inputs(q, k, v, is_causal)
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=_logsumexp_dtype(q))


@torch.library.register_fake("lmscale::flash_attention")
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False):
    _check_fake_inputs(q, k, v, is_causal)
    return q.new_empty(q.shape)


@torch.library.register_fake("lmscale::flash_attention_backward")
def _backward_fake(q, k, v, o, L, dout, is_causal: bool = False):
    _check_fake_inputs(q, k, v, is_causal)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, is_causal = inputs
    o, L = output
    ctx.save_for_backward(q, k, v, o, L)
    ctx.is_causal = is_causal
    ctx.mark_non_differentiable(L)  # L is a by-product for backward; no gradient flows through it


def _backward(ctx: Any, dout: Optional[torch.Tensor], _dL: Optional[torch.Tensor]):
    q, k, v, o, L = ctx.saved_tensors
    if dout is None:  # only L was used downstream: nothing reaches q, k, v
        return None, None, None, None
    dq, dk, dv = _backward_op(q, k, v, o, L, dout, ctx.is_causal)
    return dq, dk, dv, None


torch.library.register_autograd("lmscale::flash_attention_forward", _backward, setup_context=_setup_context)


def _refuse_double_backward(ctx: Any, *grads: Any):
    raise RuntimeError(
        "lmscale.flash_attention: double backward (a gradient of a gradient through attention, e.g. a "
        "gradient penalty or torch.autograd.grad(..., create_graph=True) followed by another backward) is "
        "not implemented, as in SDPA's flash backend. Use F.scaled_dot_product_attention with the math "
        "backend (torch.nn.attention.sdpa_kernel(SDPBackend.MATH)) for that part of the model."
    )


def _backward_setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    pass  # nothing to save: the backward of the backward only refuses


# The backward op's own backward refuses, so a second differentiation raises instead of silently
# treating dQ, dK, dV as constants (what an op without autograd gives, with only a warning).
torch.library.register_autograd("lmscale::flash_attention_backward", _refuse_double_backward,
                                setup_context=_backward_setup_context)


def _sdpa_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, enable_gqa: bool):
    """SDPA's broadcasting of heads for grouped-query attention: k, v (..., Hkv, Nk, D) repeated to q's
    Hq heads (each key/value head serves Hq/Hkv consecutive query heads, as SDPA's repeat_interleave)."""
    if not enable_gqa:
        # Eager only: under torch.compile the comparison would guard on symbolic head counts, and the
        # op's own shape check (fake kernel included) still refuses the mismatch.
        if not torch.compiler.is_compiling() and q.dim() >= 3 and k.dim() == q.dim() and q.shape[-3] != k.shape[-3]:
            raise ValueError(f"lmscale.flash_attention: q has {q.shape[-3]} heads but k and v have {k.shape[-3]}; pass "
                             "enable_gqa=True for grouped-query attention (as with SDPA), or repeat k/v heads yourself.")
        return k, v
    if q.dim() < 3 or k.dim() != q.dim() or q.shape[-3] == k.shape[-3]:
        return k, v
    hq, hkv = q.shape[-3], k.shape[-3]
    if v.shape[-3] != hkv or hq % hkv != 0:
        raise ValueError(f"lmscale.flash_attention: enable_gqa needs q's heads ({hq}) to be a multiple of k's and "
                         f"v's (got k {hkv}, v {v.shape[-3]}), as SDPA requires.")
    return k.repeat_interleave(hq // hkv, dim=-3), v.repeat_interleave(hq // hkv, dim=-3)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """The op on SDPA's causal alignment: with Nq != Nk, query i sees keys j <= i (the top-left
    diagonal, SDPA's is_causal), which the kernels' square causal mask serves exactly in two parts."""
    if not is_causal:
        return _forward_op(q, k, v, is_causal)[0]
    nq, nk = q.shape[-2], k.shape[-2]
    if nq == nk:
        return _forward_op(q, k, v, is_causal)[0]
    if nq < nk:  # keys past Nq are seen by no query
        return _forward_op(q, k[..., :nq, :], v[..., :nq, :], True)[0]
    # Nq > Nk: the first Nk queries are a square causal block; the later ones see every key.
    head = _forward_op(q[..., :nk, :], k, v, True)[0]
    tail = _forward_op(q[..., nk:, :], k, v, False)[0]
    return torch.cat((head, tail), dim=-2)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, *,
                    scale: Optional[float] = None, enable_gqa: bool = False, attn_mask: None = None,
                    dropout_p: Optional[float] = None) -> torch.Tensor:
    """FlashAttention-2 with ``F.scaled_dot_product_attention``'s contract: ``softmax(q kᵀ · scale) v``,
    autograd-aware, traceable by ``torch.compile``.

    Args:
        q: (..., Hq, Nq, D) queries; any number of leading (batch, head) dims, e.g. (B, H, N, D) or (B, N, D).
        k: (..., Hkv, Nk, D) keys, same leading dims and dtype as q (Hkv = Hq unless enable_gqa).
        v: (..., Hkv, Nk, Dv) values; Dv may differ from D (both padded to the larger with zeros, which
            changes nothing but the work; on CUDA the larger must be a head dim the kernels were built for,
            and the error names them).
        is_causal: query i sees keys j <= i; with Nq != Nk aligned as SDPA does (top-left).
        scale: the scores' factor; default 1/sqrt(D), as SDPA. Another value multiplies q by
            scale·sqrt(D) before the kernel (one elementwise op that torch.compile fuses; in bf16/fp16
            one extra rounding of q).
        enable_gqa: grouped-query attention as SDPA's: Hq a multiple of Hkv, each k/v head serving
            Hq/Hkv consecutive query heads (k and v are repeated before the kernel).
        attn_mask, dropout_p: SDPA's, accepted as None and None/0.0 only: the kernels have neither an
            arbitrary mask nor dropout.

    Returns:
        O of shape (..., Hq, Nq, Dv), q's dtype. CPU tensors run the tiled reference, CUDA tensors the
        kernels (bf16/fp16 on tensor cores; fp32 at fp32 accuracy; fp64 through the reference). Under
        ``torch.autocast``, float inputs are cast to the autocast dtype first, as SDPA does (the op's
        autocast rule, registered in C++, so ``torch.ops.lmscale.*`` follow it too).
        Backward recomputes attention from q, k, v, O and the logsumexp L, the only tensors saved.
        Double backward raises (as SDPA's flash backend).
    """
    if not isinstance(is_causal, bool):
        raise TypeError("lmscale.flash_attention: is_causal must be a bool; the 4th positional argument is "
                        "is_causal here (SDPA's is attn_mask, which lmscale does not take): pass is_causal=... "
                        "by name.")
    if attn_mask is not None:
        raise ValueError("lmscale.flash_attention: attn_mask is not supported (the kernels apply no mask but the "
                         "causal one); use is_causal=True, or F.scaled_dot_product_attention for other masks.")
    # None by default, not SDPA's 0.0: comparing a float default makes torch.compile restart its analysis.
    if dropout_p is not None and dropout_p != 0.0:
        raise ValueError("lmscale.flash_attention: dropout_p must be 0.0 (the kernels have no attention dropout); "
                         "use F.scaled_dot_product_attention where dropout on the attention weights is needed.")
    k, v = _sdpa_layout(q, k, v, enable_gqa)
    d, dv = q.shape[-1], v.shape[-1]
    if scale is None and dv == d:  # the kernels' own case (no symbolic arithmetic for torch.compile)
        return _attention(q, k, v, is_causal)
    if k.shape[-1] != d:
        return _attention(q, k, v, is_causal)  # the op's check names the mismatch
    width = max(d, dv)  # the head dim the kernels see, whose factor is 1/sqrt(width)
    factor = (1.0 / math.sqrt(d) if scale is None else float(scale)) * math.sqrt(width)
    if not math.isclose(factor, 1.0, rel_tol=1e-12, abs_tol=0.0):
        q = q * factor
    if dv == d:
        return _attention(q, k, v, is_causal)
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[-1]))
    return _attention(pad(q), pad(k), pad(v), is_causal)[..., :dv]


def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (O, L): O like q, L the logsumexp of the scaled scores, shape (..., Nq), fp32 (fp64
    for fp64 inputs). Differentiable in O."""
    return _forward_op(q, k, v, is_causal)


def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                             L: torch.Tensor, dout: torch.Tensor,
                             is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward by recomputation from the forward's O and L: returns (dQ, dK, dV). Not differentiable."""
    return _backward_op(q, k, v, o, L, dout, is_causal)


class FlashAttentionFunction(torch.autograd.Function):
    """The same attention as a ``torch.autograd.Function``, for code written against that convention
    (``FlashAttentionFunction.apply(q, k, v, is_causal)``). Forward saves q, k, v, O and L with
    ``save_for_backward``, so ``o.grad_fn.saved_tensors`` holds them; backward calls the backward op."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
        o, L = _forward_op(q, k, v, is_causal)
        ctx.save_for_backward(q, k, v, o, L)
        ctx.is_causal = is_causal
        return o

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor):
        q, k, v, o, L = ctx.saved_tensors
        dq, dk, dv = _backward_op(q, k, v, o, L, dout, ctx.is_causal)
        return dq, dk, dv, None
