"""lmscale.nn: lmscale's fused layers for any PyTorch model, as modules (this file) and functions
(lmscale.nn.functional), each one ``torch.ops.lmscale`` op with autograd and a fake kernel, so
``torch.compile(fullgraph=True)`` traces through them. On CUDA bf16/fp32 they run lmscale's kernels
(src/kernels/fused_*.cu); elsewhere (CPU, fp16, fp64) the ATen reference of the same op.

    norm = lmscale.nn.RMSNorm(d)                      # torch.nn.RMSNorm's constructor (eps=None, elementwise_affine)
    h, y = norm(sublayer_out, residual=x)             # the residual add fused with the next norm
    gate = lmscale.nn.functional.swiglu(w1(y), w3(y)) # for F.silu(w1(y)) * w3(y)
    loss = lmscale.nn.functional.cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.1)
    print(lmscale.nn.apply_to(model))                 # or swap a model's layers in place; says what it swapped

Where each matches PyTorch and where it differs: docs/python.md, "lmscale.nn: the fused layers in your model".
"""
from __future__ import annotations

import numbers
from typing import Optional, Sequence, Union

import torch

from . import functional
from .functional import (ROPE_LAYOUTS, add_rms_norm, cross_entropy, linear_cross_entropy, rms_norm, rope_qkv,
                         rope_table, swiglu)

__all__ = ["RMSNorm", "SwiGLU", "RotaryQKV", "CrossEntropyLoss", "apply_to", "SwapReport", "functional", "rms_norm",
           "add_rms_norm", "swiglu", "rope_table", "rope_qkv", "ROPE_LAYOUTS", "cross_entropy", "linear_cross_entropy"]


class RMSNorm(torch.nn.Module):
    """RMSNorm with ``torch.nn.RMSNorm``'s constructor and fp32 math: ``RMSNorm(normalized_shape, eps=None,
    elementwise_affine=True, device=None, dtype=None)``. ``eps=None`` is ``torch.finfo(x.dtype).eps``, as
    PyTorch's; ``elementwise_affine=False`` has no ``weight`` (None); a ``normalized_shape`` of several
    dims normalizes over the last that many dims of x.

    ``norm(x)`` returns the normed x; ``norm(x, residual=r)`` returns ``(h, norm(h))`` with
    ``h = x + r``, one pass for the residual add of a pre-norm block and the norm after it. The normed
    output has x's dtype, or the autocast dtype inside ``torch.autocast`` (see functional.rms_norm)."""

    def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: Optional[float] = None,
                 elementwise_affine: bool = True, device: Union[torch.device, str, None] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The gain back to ones, as ``torch.nn.RMSNorm.reset_parameters`` (meta-device init: call it after
        ``to_empty``)."""
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
        n = len(self.normalized_shape)
        if tuple(x.shape[-n:]) != self.normalized_shape:
            raise RuntimeError(f"lmscale.nn.RMSNorm: expected x of shape (*, {', '.join(map(str, self.normalized_shape))}), "
                               f"got {tuple(x.shape)}")
        weight = self.weight
        if n > 1:  # the norm over the last n dims is a norm over their flattening
            shape = x.shape
            x = x.flatten(-n)
            residual = residual.flatten(-n) if residual is not None else None
            weight = weight.flatten() if weight is not None else None
            if residual is None:
                return rms_norm(x, weight, self.eps).view(shape)
            h, y = add_rms_norm(x, residual, weight, self.eps)
            return h.view(shape), y.view(shape)
        if residual is None:
            return rms_norm(x, weight, self.eps)
        return add_rms_norm(x, residual, weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


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
    by RoPE, in one pass. ``layout`` names the pairs: ``"adjacent"`` (2i, 2i+1), the spec's and GPT-J's, or
    ``"rotate_half"`` (i, i + D/2), Hugging Face's Llama and GPT-NeoX (see functional.rope_qkv).

    Holds the (cos, sin) table for ``max_len`` positions as a non-persistent buffer (not in the
    state_dict: it is computed, not learned). ``reset_parameters()`` computes it again, and moving the
    module off the ``meta`` device (``to_empty``, as in FSDP2's meta-device init) does so by itself, so a
    model built under ``torch.device("meta")`` then ``to_empty`` + ``load_state_dict`` has its table."""

    def __init__(self, heads: int, d_head: int, max_len: int, theta: float = 10000.0,
                 device: Union[torch.device, str, None] = None, *, layout: str = "adjacent") -> None:
        super().__init__()
        functional._rotate_half(layout)  # refuses an unknown layout by name
        self.heads, self.d_head, self.max_len, self.theta, self.layout = heads, d_head, max_len, theta, layout
        self.register_buffer("rotation", rope_table(d_head, max_len, theta, device), persistent=False)

    def reset_parameters(self) -> None:
        """Computes the rotation table again, on the buffer's device (after ``to_empty`` from ``meta``)."""
        with torch.no_grad():
            self.rotation.copy_(rope_table(self.d_head, self.max_len, self.theta, self.rotation.device))

    def _apply(self, fn, recurse=True):
        was_meta = self.rotation.is_meta
        super()._apply(fn, recurse)
        if was_meta and not self.rotation.is_meta:  # to_empty: the table is uninitialised memory now
            self.reset_parameters()
        return self

    def forward(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return rope_qkv(qkv, self.rotation, self.heads, self.layout)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, d_head={self.d_head}, max_len={self.max_len}, theta={self.theta}, layout={self.layout!r}"


class CrossEntropyLoss(torch.nn.Module):
    """``torch.nn.CrossEntropyLoss(ignore_index=-100, reduction='mean', label_smoothing=0.0)`` over logits
    (..., V) and int64 targets (...), computed without an fp32 copy of the logits
    (functional.cross_entropy). PyTorch's ``weight`` (per-class weights) and the deprecated
    ``size_average``/``reduce`` are accepted only as None."""

    def __init__(self, weight: Optional[torch.Tensor] = None, size_average=None, ignore_index: int = -100,
                 reduce=None, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__()
        for name, value in (("weight", weight), ("size_average", size_average), ("reduce", reduce)):
            if value is not None:
                raise NotImplementedError(f"lmscale.nn.CrossEntropyLoss: {name} is not supported (only None); use "
                                          "torch.nn.CrossEntropyLoss for class weights")
        functional._reduction(reduction, "CrossEntropyLoss")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"lmscale.nn.CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, got "
                             f"{label_smoothing}")
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, targets, ignore_index=self.ignore_index, reduction=self.reduction,
                             label_smoothing=self.label_smoothing)


from ._swap import SwapReport, apply_to  # noqa: E402  (uses the modules above)
