"""lmscale.nn: lmscale's fused layers for any PyTorch model, as modules (this file) and functions
(lmscale.nn.functional), each one ``torch.ops.lmscale`` op with autograd and a fake kernel, so
``torch.compile(fullgraph=True)`` traces through them. On CUDA bf16/fp32 they run lmscale's kernels
(src/kernels/fused_*.cu); elsewhere (CPU, fp16, fp64) the ATen reference of the same op.

    norm = lmscale.nn.RMSNorm(d)                      # for torch.nn.RMSNorm / a hand-written one
    h, y = norm(sublayer_out, residual=x)             # the residual add fused with the next norm
    gate = lmscale.nn.functional.swiglu(w1(y), w3(y)) # for F.silu(w1(y)) * w3(y)
    loss = lmscale.nn.functional.cross_entropy(logits, targets)
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from . import functional
from .functional import add_rms_norm, cross_entropy, linear_cross_entropy, rms_norm, rope_qkv, rope_table, swiglu

__all__ = ["RMSNorm", "SwiGLU", "RotaryQKV", "CrossEntropyLoss", "functional", "rms_norm", "add_rms_norm", "swiglu",
           "rope_table", "rope_qkv", "cross_entropy", "linear_cross_entropy"]


class RMSNorm(torch.nn.Module):
    """RMSNorm with a learned gain ``weight`` (C), fp32 math, as ``torch.nn.RMSNorm(C, eps)``.

    ``norm(x)`` returns the normed x; ``norm(x, residual=r)`` returns ``(h, norm(h))`` with
    ``h = x + r``, one pass for the residual add of a pre-norm block and the norm after it. The normed
    output has x's dtype, or the autocast dtype inside ``torch.autocast`` (see functional.rms_norm)."""

    def __init__(self, dim: int, eps: float = 1e-5, device: Union[torch.device, str, None] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim, device=device, dtype=dtype or torch.float32))

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        if residual is None:
            return rms_norm(x, self.weight, self.eps)
        return add_rms_norm(x, residual, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class SwiGLU(torch.nn.Module):
    """The SwiGLU feed-forward ``w2(silu(w1 x) · w3 x)`` (no biases), its gate fused between the GEMMs."""

    def __init__(self, dim: int, hidden: int, device: Union[torch.device, str, None] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        kw = {"bias": False, "device": device, "dtype": dtype}
        self.w1, self.w2, self.w3 = (torch.nn.Linear(dim, hidden, **kw), torch.nn.Linear(hidden, dim, **kw),
                                     torch.nn.Linear(dim, hidden, **kw))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(swiglu(self.w1(x), self.w3(x)))


class RotaryQKV(torch.nn.Module):
    """Splits one fused QKV projection's output (B, T, 3C) into q, k, v (B, H, T, D) and rotates q and k
    by RoPE (adjacent pairs), in one pass. Holds the (cos, sin) table for ``max_len`` positions as a
    non-persistent buffer."""

    def __init__(self, heads: int, d_head: int, max_len: int, theta: float = 10000.0,
                 device: Union[torch.device, str, None] = None) -> None:
        super().__init__()
        self.heads = heads
        self.register_buffer("rotation", rope_table(d_head, max_len, theta, device), persistent=False)

    def forward(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return rope_qkv(qkv, self.rotation, self.heads)


class CrossEntropyLoss(torch.nn.Module):
    """``torch.nn.CrossEntropyLoss()`` with mean reduction over every position, logits (..., V) and
    targets (...), computed without an fp32 copy of the logits (functional.cross_entropy)."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, targets)
