"""lmscale.nn.functional: the fused layers as functions on plain tensors, each one autograd-aware
``torch.ops.lmscale`` op (CUDA kernels for bf16/fp32 on the GPU, the ATen reference elsewhere; fake
kernels for torch.compile). The modules of lmscale.nn wrap them."""
from __future__ import annotations

from typing import Optional, Union

import torch

from ._ops import ops

__all__ = ["rms_norm", "add_rms_norm", "swiglu", "rope_table", "rope_qkv", "cross_entropy", "linear_cross_entropy"]


def _autocast_dtype(device: torch.device) -> Optional[torch.dtype]:
    if device.type == "meta":  # no autocast there (torch.is_autocast_enabled refuses the name)
        return None
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


def _eps(eps: Optional[float], x: torch.Tensor) -> float:
    """torch.nn.RMSNorm's default: eps=None means the machine epsilon of x's dtype."""
    if eps is not None:
        return float(eps)
    return torch.finfo(x.dtype).eps if x.dtype.is_floating_point else 0.0  # (the op refuses a non-float x)


def _weight(weight: Optional[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """No weight (elementwise_affine=False): a gain of ones, fp32 (fp64 for fp64 x), which needs no gradient."""
    if weight is not None:
        # A bf16/fp16 gain (a Hugging Face model in bf16) is used as fp32, the kernel's: a cast of C numbers.
        return weight.float() if weight.dtype in (torch.bfloat16, torch.float16) else weight
    return torch.ones(x.shape[-1], dtype=torch.float64 if x.dtype == torch.float64 else torch.float32, device=x.device)


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor], eps: Optional[float] = 1e-5,
             out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``x · rsqrt(mean(x², -1) + eps) · weight`` in fp32 math. x (..., C) floating point, weight (C) (fp32
    for the kernel) or None (no gain); ``eps=None`` is ``torch.finfo(x.dtype).eps``, as F.rms_norm's. The
    result has ``out_dtype``: default x's dtype, or the autocast dtype inside ``torch.autocast`` (the
    matmul that reads it next would cast it anyway; writing it narrow saves that pass)."""
    out_dtype = out_dtype or _autocast_dtype(x.device) or x.dtype
    return ops.rms_norm_forward(x, None, _weight(weight, x), _eps(eps, x), out_dtype)[1]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: Optional[torch.Tensor], eps: Optional[float] = 1e-5,
                 out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the next norm in one pass: returns ``(h, rms_norm(h))`` with
    ``h = x + residual`` in the wider of the two dtypes (the residual stream). ``weight``, ``eps`` and
    ``out_dtype`` as in rms_norm."""
    if torch.promote_types(x.dtype, residual.dtype) != x.dtype:
        x, residual = residual, x  # the op keeps its first argument's dtype for h; addition commutes
    out_dtype = out_dtype or _autocast_dtype(x.device) or x.dtype
    h, y, _ = ops.rms_norm_forward(x, residual, _weight(weight, x), _eps(eps, x), out_dtype)
    return h, y


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate between its GEMMs, ``silu(a) · b`` (a = x W1ᵀ, b = x W3ᵀ), fp32 math, one rounding.
    a and b of one shape; under autocast they are cast to the autocast dtype if they differ."""
    if a.dtype != b.dtype:
        dtype = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(dtype), b.to(dtype)
    return ops.swiglu_forward(a, b)


ROPE_LAYOUTS = ("adjacent", "rotate_half")


def rope_table(d_head: int, max_len: int, theta: float = 10000.0,
               device: Union[torch.device, str, None] = None) -> torch.Tensor:
    """The rotation table rope_qkv reads: (max_len, d_head/2, 2) fp32 of (cos, sin) of position ·
    theta^(-2i/d_head), computed in fp64. Frequency i turns pair i of either layout."""
    if d_head % 2:
        raise ValueError(f"lmscale.nn: RoPE needs an even head dim, got {d_head}")
    i = torch.arange(d_head // 2, dtype=torch.float64, device=device)
    angle = torch.outer(torch.arange(max_len, dtype=torch.float64, device=device), theta ** (-2 * i / d_head))
    return torch.stack((angle.cos(), angle.sin()), -1).float()


def _rotate_half(layout: str) -> bool:
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"lmscale.nn: RoPE layout must be 'adjacent' (pairs (2i, 2i+1): the spec's, GPT-J's, Meta's "
                         f"original Llama) or 'rotate_half' (pairs (i, i + D/2): Hugging Face's Llama, GPT-NeoX), got "
                         f"{layout!r}")
    return layout == "rotate_half"


def rope_qkv(qkv: torch.Tensor, rotation: torch.Tensor, heads: int,
             layout: str = "adjacent") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One fused QKV projection's output (B, T, 3C), columns [q | k | v], to q, k, v each (B, H, T, D),
    q and k rotated by RoPE with the table of rope_table, in one pass. ``layout`` names which dims of a
    head form pair i: ``"adjacent"`` (2i, 2i+1), or ``"rotate_half"`` (i, i + D/2), Hugging Face's
    ``q * cos + rotate_half(q) * sin``. On CUDA the kernel serves ``"adjacent"``; ``"rotate_half"`` runs
    ATen ops (the same values, not fused)."""
    return ops.rope_qkv_forward(qkv, rotation, heads, _rotate_half(layout))


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _reduction(reduction: str, where: str) -> int:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"lmscale.nn.{where}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return _REDUCTIONS[reduction]


def _check_targets(targets: torch.Tensor, where: str) -> None:
    if targets.is_floating_point():
        raise ValueError(f"lmscale.nn.{where}: targets must be int64 class indices; class-probability targets "
                         f"(a float {targets.dtype} tensor) are not supported: use F.cross_entropy for those")


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """``F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=..., reduction=...,
    label_smoothing=...)`` for logits (..., V) of any float dtype (the vocabulary last, the language-model
    layout) and int64 targets (...). Positions whose target is ``ignore_index`` (default -100, PyTorch's
    and Hugging Face's padding label) count for nothing: loss 0, gradient 0, left out of the mean (a
    mean over no counted position is NaN, as PyTorch's). ``reduction="none"`` gives the loss per position
    (the targets' shape). The loss is fp32 (fp64 for fp64 logits) whatever the logits' dtype; the fp32
    log-softmax is never formed: each row's max and log-sum are kept, and the gradient is written in the
    logits' dtype. Any other target outside [0, V) is an error naming it on the CPU; on the CUDA kernel
    path it gives that position a NaN loss instead (checking it would stall the GPU)."""
    _check_targets(targets, "cross_entropy")
    return ops.cross_entropy_forward(logits, targets, _reduction(reduction, "cross_entropy"), int(ignore_index),
                                     float(label_smoothing))[0]


class _LinearCrossEntropy(torch.autograd.Function):
    """The LM head and the loss chunk by chunk of rows: each chunk's logits are made, reduced to their
    loss and turned into their gradients at once, so the (rows, V) logits never exist whole. Only the
    gradients asked for are computed (a frozen head: no dW)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_rows: int, reduction: int,
                ignore_index: int, label_smoothing: float):
        rows = x.shape[0]
        dtype = _autocast_dtype(x.device) or torch.promote_types(x.dtype, weight.dtype)
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        w = weight.to(dtype)
        dx = torch.empty(x.shape, dtype=dtype, device=x.device) if need_dx else None
        dw = (torch.zeros(weight.shape, dtype=torch.float32 if dtype != torch.float64 else dtype, device=x.device)
              if need_dw else None)
        loss = torch.zeros((), dtype=torch.float64 if dtype == torch.float64 else torch.float32, device=x.device)
        counted = (targets != ignore_index).sum()
        # d(loss)/d(each row's loss), on the device (no sync): 1 for the sum, 1/counted for the mean.
        share = torch.ones((), dtype=loss.dtype, device=x.device)
        if reduction == _REDUCTIONS["mean"]:
            share = share / counted
        with torch.autocast(x.device.type, enabled=False):
            for start in range(0, rows, chunk_rows):
                xc, tc = x[start:start + chunk_rows].to(dtype), targets[start:start + chunk_rows]
                logits = xc @ w.t()
                chunk_loss, stats = ops.cross_entropy_forward(logits, tc, _REDUCTIONS["sum"], ignore_index,
                                                              label_smoothing)
                loss += chunk_loss
                dlogits = ops.cross_entropy_backward(share, logits, tc, stats, _REDUCTIONS["sum"], ignore_index,
                                                     label_smoothing)
                if need_dx:
                    dx[start:start + chunk_rows] = dlogits @ w
                if need_dw:
                    dw += (dlogits.t() @ xc).to(dw.dtype)
        ctx.save_for_backward(dx, dw)
        ctx.dtypes = (x.dtype, weight.dtype)
        return loss / counted if reduction == _REDUCTIONS["mean"] else loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        dx, dw = ctx.saved_tensors
        return (None if dx is None else (dx * grad_loss).to(ctx.dtypes[0]),
                None if dw is None else (dw * grad_loss).to(ctx.dtypes[1]), None, None, None, None, None)


def _linear_cross_entropy_loss_only(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_rows: int,
                                    reduction: int, ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """The forward alone, chunk by chunk (evaluation, torch.no_grad, or nothing requiring grad)."""
    dtype = _autocast_dtype(x.device) or torch.promote_types(x.dtype, weight.dtype)
    w = weight.to(dtype)
    per_chunk = _REDUCTIONS["none"] if reduction == _REDUCTIONS["none"] else _REDUCTIONS["sum"]
    losses = []
    with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        for start in range(0, x.shape[0], chunk_rows):
            logits = x[start:start + chunk_rows].to(dtype) @ w.t()
            losses.append(ops.cross_entropy_forward(logits, targets[start:start + chunk_rows], per_chunk, ignore_index,
                                                    label_smoothing)[0])
        loss_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        if reduction == _REDUCTIONS["none"]:
            return torch.cat(losses) if losses else torch.zeros(0, dtype=loss_dtype, device=x.device)
        total = torch.stack(losses).sum() if losses else torch.zeros((), dtype=loss_dtype, device=x.device)
        if reduction == _REDUCTIONS["sum"]:
            return total
        return total / (targets != ignore_index).sum()  # NaN over no counted row, as cross_entropy's


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_rows: int = 8192, *,
                         ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """``cross_entropy(x @ weight.T, targets, ...)`` without the logits: x (..., C) hidden states, weight (V, C)
    the LM head, targets (...); ``ignore_index``, ``reduction`` and ``label_smoothing`` as in cross_entropy.
    The rows go through in chunks of ``chunk_rows`` (the head's matmul in the autocast dtype inside
    torch.autocast). When a gradient is wanted (grad mode on, x or weight requiring grad), the gradients
    of those that need one are computed in the forward, chunk by chunk, so peak memory holds one chunk's
    logits instead of all of them; otherwise (evaluation, torch.no_grad) only the loss is computed.
    ``reduction="none"`` (the loss per position) is for evaluation: with a gradient wanted it is refused.
    Not traced by torch.compile (a Python loop over chunks): call it outside the compiled region, or use
    cross_entropy on the logits there."""
    if chunk_rows < 1:
        raise ValueError(f"lmscale.nn.linear_cross_entropy: chunk_rows must be >= 1, got {chunk_rows}")
    if targets.shape != x.shape[:-1]:
        raise ValueError(f"lmscale.nn.linear_cross_entropy: targets {tuple(targets.shape)} must be x's shape "
                         f"{tuple(x.shape)} without its last dim")
    _check_targets(targets, "linear_cross_entropy")
    code = _reduction(reduction, "linear_cross_entropy")
    args = (x.reshape(-1, x.shape[-1]), weight, targets.reshape(-1), int(chunk_rows), code, int(ignore_index),
            float(label_smoothing))
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        loss = _linear_cross_entropy_loss_only(*args)
        return loss.view(targets.shape) if code == _REDUCTIONS["none"] else loss
    if code == _REDUCTIONS["none"]:
        raise NotImplementedError("lmscale.nn.linear_cross_entropy: reduction='none' is for evaluation (no gradient): "
                                  "under torch.no_grad() it gives the loss per position; to train, use 'mean' or "
                                  "'sum', or cross_entropy(..., reduction='none') on the logits")
    return _LinearCrossEntropy.apply(*args)
