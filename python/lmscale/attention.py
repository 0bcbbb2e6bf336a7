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


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """FlashAttention-2: ``softmax(q kᵀ / sqrt(D)) v``, autograd-aware, traceable by ``torch.compile``.

    Args:
        q: (..., Nq, D) queries; any number of leading (batch, head) dims, e.g. (B, N, D) or (B, H, N, D).
        k, v: (..., Nk, D) keys and values, same leading dims and dtype as q.
        is_causal: query i sees keys j <= i only (needs Nq == Nk).

    Returns:
        O of q's shape and dtype. CPU tensors run the tiled reference, CUDA tensors the kernels
        (bf16/fp16 on tensor cores; fp32 at fp32 accuracy; fp64 through the reference).
        Backward recomputes attention from q, k, v, O and the logsumexp L, the only tensors saved:
        ``o.grad_fn.saved_tensors == (q, k, v, o, L)``.
    """
    return _forward_op(q, k, v, is_causal)[0]


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
