"""lmscale.nn.functional: the fused layers as functions on plain tensors, each one autograd-aware
``torch.ops.lmscale`` op (CUDA kernels for bf16/fp32 on the GPU, the ATen reference elsewhere; fake
kernels for torch.compile). The modules of lmscale.nn wrap them."""
from __future__ import annotations

from typing import Optional, Union

import torch

from ._ops import ops

__all__ = ["rms_norm", "add_rms_norm", "swiglu", "rope_table", "rope_qkv", "cross_entropy", "linear_cross_entropy"]


def _autocast_dtype(device: torch.device) -> Optional[torch.dtype]:
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5,
             out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``x · rsqrt(mean(x², -1) + eps) · weight`` in fp32 math. x (..., C), weight (C), fp32 for the
    kernel. The result has ``out_dtype``: default x's dtype, or the autocast dtype inside
    ``torch.autocast`` (the matmul that reads it next would cast it anyway; writing it narrow saves
    that pass)."""
    out_dtype = out_dtype or _autocast_dtype(x.device) or x.dtype
    return ops.rms_norm_forward(x, None, weight, eps, out_dtype)[1]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5,
                 out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the next norm in one pass: returns ``(h, rms_norm(h))`` with
    ``h = x + residual`` in the wider of the two dtypes (the residual stream). ``out_dtype`` as in
    rms_norm."""
    if torch.promote_types(x.dtype, residual.dtype) != x.dtype:
        x, residual = residual, x  # the op keeps its first argument's dtype for h; addition commutes
    out_dtype = out_dtype or _autocast_dtype(x.device) or x.dtype
    h, y, _ = ops.rms_norm_forward(x, residual, weight, eps, out_dtype)
    return h, y


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate between its GEMMs, ``silu(a) · b`` (a = x W1ᵀ, b = x W3ᵀ), fp32 math, one rounding.
    a and b of one shape; under autocast they are cast to the autocast dtype if they differ."""
    if a.dtype != b.dtype:
        dtype = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(dtype), b.to(dtype)
    return ops.swiglu_forward(a, b)


def rope_table(d_head: int, max_len: int, theta: float = 10000.0,
               device: Union[torch.device, str, None] = None) -> torch.Tensor:
    """The rotation table rope_qkv reads: (max_len, d_head/2, 2) fp32 of (cos, sin) of position ·
    theta^(-2i/d_head), computed in fp64."""
    if d_head % 2:
        raise ValueError(f"lmscale.nn: RoPE needs an even head dim, got {d_head}")
    i = torch.arange(d_head // 2, dtype=torch.float64, device=device)
    angle = torch.outer(torch.arange(max_len, dtype=torch.float64, device=device), theta ** (-2 * i / d_head))
    return torch.stack((angle.cos(), angle.sin()), -1).float()


def rope_qkv(qkv: torch.Tensor, rotation: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One fused QKV projection's output (B, T, 3C), columns [q | k | v], to q, k, v each (B, H, T, D),
    q and k rotated by RoPE (adjacent pairs (2i, 2i+1), the table of rope_table), in one pass."""
    return ops.rope_qkv_forward(qkv, rotation, heads)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every position: logits (..., V) of any float dtype, targets (...) int64.
    The loss (0-dim) is fp32 (fp64 for fp64 logits); the fp32 log-softmax is never formed: each row's
    max and log-sum are kept, and the gradient is written in the logits' dtype. On the kernel path a
    target outside [0, V) gives NaN rather than an error (checking it would stall the GPU)."""
    return ops.cross_entropy_forward(logits, targets)[0]


class _LinearCrossEntropy(torch.autograd.Function):
    """The LM head and the loss chunk by chunk of rows: each chunk's logits are made, reduced to their
    loss and turned into their gradients at once, so the (rows, V) logits never exist whole."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_rows: int):
        rows = x.shape[0]
        dtype = _autocast_dtype(x.device) or torch.promote_types(x.dtype, weight.dtype)
        w = weight.to(dtype)
        dx = torch.empty(x.shape, dtype=dtype, device=x.device)
        dw = torch.zeros(weight.shape, dtype=torch.float32 if dtype != torch.float64 else dtype, device=x.device)
        loss = torch.zeros((), dtype=torch.float64 if dtype == torch.float64 else torch.float32, device=x.device)
        one = torch.ones((), dtype=loss.dtype, device=x.device)
        with torch.autocast(x.device.type, enabled=False):
            for start in range(0, rows, chunk_rows):
                xc = x[start:start + chunk_rows].to(dtype)
                logits = xc @ w.t()
                chunk_loss, stats = ops.cross_entropy_forward(logits, targets[start:start + chunk_rows])
                share = xc.shape[0] / rows  # the chunk's mean, weighted into the mean over all rows
                loss += chunk_loss * share
                dlogits = ops.cross_entropy_backward(one * share, logits, targets[start:start + chunk_rows], stats)
                dx[start:start + chunk_rows] = dlogits @ w
                dw += (dlogits.t() @ xc).to(dw.dtype)
        ctx.save_for_backward(dx, dw)
        ctx.dtypes = (x.dtype, weight.dtype)
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        dx, dw = ctx.saved_tensors
        return (dx * grad_loss).to(ctx.dtypes[0]), (dw * grad_loss).to(ctx.dtypes[1]), None, None


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         chunk_rows: int = 8192) -> torch.Tensor:
    """``cross_entropy(x @ weight.T, targets)`` without the logits: x (..., C) hidden states, weight (V, C)
    the LM head, targets (...). The rows go through in chunks of ``chunk_rows`` (the head's matmul in
    the autocast dtype inside torch.autocast), and the gradients of x and weight are computed in the
    forward, so peak memory holds one chunk's logits instead of all of them. Not traced by
    torch.compile (a Python loop over chunks): call it outside the compiled region, or use
    cross_entropy on the logits there."""
    if chunk_rows < 1:
        raise ValueError(f"lmscale.nn.linear_cross_entropy: chunk_rows must be >= 1, got {chunk_rows}")
    if targets.shape != x.shape[:-1]:
        raise ValueError(f"lmscale.nn.linear_cross_entropy: targets {tuple(targets.shape)} must be x's shape "
                         f"{tuple(x.shape)} without its last dim")
    return _LinearCrossEntropy.apply(x.reshape(-1, x.shape[-1]), weight, targets.reshape(-1), int(chunk_rows))

