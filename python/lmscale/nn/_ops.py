"""What Python adds to the fused-layer ops of liblmscale (src/ops/fused_library.cpp, which defines their
schemas and CPU/CUDA impls): a fake kernel for each, so torch.compile and torch.export trace them,
and the autograd formula of each forward op through its backward op. A backward op's own backward
refuses (no double backward). lmscale.nn.functional calls the forward ops."""
from __future__ import annotations

from typing import Any, Optional

import torch

from .. import _library

_library.load()

ops = torch.ops.lmscale


def _math_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def refuse_double_backward(name: str):
    def backward(ctx: Any, *grads: Any):
        raise RuntimeError(f"lmscale.nn: double backward through {name} is not implemented (a gradient of its "
                           "gradient, e.g. create_graph=True then another backward); use the PyTorch layer it "
                           "replaces for that part of the model.")
    return backward


def _no_context(ctx: Any, inputs: tuple, output: Any) -> None:
    pass


def check_one_device(op: str, **tensors: Optional[torch.Tensor]) -> None:
    """PyTorch's rule, in the fake kernels too: a call whose tensors sit on two devices is refused. The fake
    kernel is also the ``meta`` kernel, and the dispatcher sends a call with any ``meta`` input there: without
    this check one input left on ``meta`` (a model half-moved off a meta-device init) would give empty,
    uninitialised outputs on the other device instead of an error."""
    given = [(name, t) for name, t in tensors.items() if t is not None]
    first_name, first = given[0]
    for name, t in given[1:]:
        torch._check(t.device == first.device,
                     lambda: f"{op}: expected all tensors to be on the same device, but found at least two devices, "
                             f"{first.device} ({first_name}) and {t.device} ({name}). Move them to one device with .to()")


def check_floating(op: str, **tensors: Optional[torch.Tensor]) -> None:
    for name, t in tensors.items():
        if t is not None:
            torch._check(t.dtype.is_floating_point,
                         lambda: f"{op}: {name} must be a floating-point tensor, got {t.dtype} (as in PyTorch's "
                                 "layer: cast it first, e.g. .float())")


for _name in ("rms_norm", "swiglu", "rope_qkv", "cross_entropy"):
    torch.library.register_autograd(f"lmscale::{_name}_backward", refuse_double_backward(_name),
                                    setup_context=_no_context)

# ------------------------------------------------------------------ RMSNorm (+ residual)


@torch.library.register_fake("lmscale::rms_norm_forward")
def _rms_norm_forward_fake(x, residual, weight, eps, out_dtype=None):
    check_one_device("rms_norm", x=x, residual=residual, weight=weight)
    check_floating("rms_norm", x=x, residual=residual, weight=weight)
    torch._check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                 lambda: f"rms_norm: weight {tuple(weight.shape)} must be (C) with C the last dim of x {tuple(x.shape)}")
    if residual is not None:
        torch._check(residual.shape == x.shape, lambda: f"rms_norm: residual {residual.shape} and x {x.shape} differ")
    h = x.new_empty(x.shape) if residual is not None else x.new_empty((0,))
    y = x.new_empty(x.shape, dtype=out_dtype or x.dtype)
    return h, y, x.new_empty(x.shape[:-1], dtype=_math_dtype(x.dtype))


@torch.library.register_fake("lmscale::rms_norm_backward")
def _rms_norm_backward_fake(dy, dh, h, weight, rstd, residual_dtype=None):
    check_one_device("rms_norm_backward", h=h, dy=dy, dh=dh, weight=weight, rstd=rstd)
    dres = (h.new_empty(h.shape, dtype=residual_dtype) if residual_dtype is not None and residual_dtype != h.dtype
            else h.new_empty((0,)))
    return h.new_empty(h.shape), weight.new_empty(weight.shape), dres


def _rms_norm_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, residual, weight, _eps, _out_dtype = inputs
    h, y, rstd = output
    ctx.has_residual = residual is not None
    ctx.residual_dtype = residual.dtype if residual is not None else None
    ctx.y_dtype = y.dtype
    ctx.save_for_backward(h if ctx.has_residual else x, weight, rstd)
    ctx.mark_non_differentiable(rstd)


def _rms_norm_backward(ctx: Any, dh: Optional[torch.Tensor], dy: Optional[torch.Tensor], _drstd: Any):
    h, weight, rstd = ctx.saved_tensors
    if not ctx.has_residual:
        dh = None  # the empty placeholder output
    if dy is None and dh is None:
        return None, None, None, None, None
    if dy is None:  # y unused downstream: its gradient is zero
        dy = torch.zeros(h.shape, dtype=ctx.y_dtype, device=h.device)
    # A residual narrower than h (the bf16 sublayer output beside the fp32 stream) gets its gradient from
    # the same pass (dresidual), not from a cast after it.
    cast = ctx.residual_dtype if ctx.has_residual and ctx.residual_dtype != h.dtype else None
    dx, dweight, dres = ops.rms_norm_backward(dy, dh, h, weight, rstd, cast)
    if not ctx.has_residual:
        return dx, None, dweight, None, None
    return dx, dres if cast is not None else dx, dweight, None, None


torch.library.register_autograd("lmscale::rms_norm_forward", _rms_norm_backward, setup_context=_rms_norm_setup)

# ------------------------------------------------------------------ SwiGLU gate


@torch.library.register_fake("lmscale::swiglu_forward")
def _swiglu_forward_fake(a, b):
    check_one_device("swiglu", a=a, b=b)
    check_floating("swiglu", a=a)
    torch._check(a.shape == b.shape and a.dtype == b.dtype,
                 lambda: f"swiglu: a {a.shape} {a.dtype} and b {b.shape} {b.dtype} must have one shape and dtype")
    return a.new_empty(a.shape)


@torch.library.register_fake("lmscale::swiglu_backward")
def _swiglu_backward_fake(dout, a, b):
    check_one_device("swiglu_backward", a=a, b=b, dout=dout)
    return a.new_empty(a.shape), a.new_empty(a.shape)


def _swiglu_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx: Any, dout: torch.Tensor):
    a, b = ctx.saved_tensors
    return ops.swiglu_backward(dout.to(a.dtype), a, b)


torch.library.register_autograd("lmscale::swiglu_forward", _swiglu_backward, setup_context=_swiglu_setup)

# ------------------------------------------------------------------ QKV split + RoPE


@torch.library.register_fake("lmscale::rope_qkv_forward")
def _rope_forward_fake(qkv, rotation, heads, rotate_half=False):
    check_one_device("rope_qkv_forward", qkv=qkv, rotation=rotation)
    check_floating("rope_qkv_forward", qkv=qkv, rotation=rotation)
    torch._check(qkv.dim() == 3, lambda: f"rope_qkv: qkv must be (B, T, 3C), got {tuple(qkv.shape)}")
    B, T, C3 = qkv.shape
    C = C3 // 3
    shape = (B, heads, T, C // heads)
    return qkv.new_empty(shape), qkv.new_empty(shape), qkv.new_empty(shape)


@torch.library.register_fake("lmscale::rope_qkv_backward")
def _rope_backward_fake(dq, dk, dv, rotation, heads, rotate_half=False):
    check_one_device("rope_qkv_backward", dq=dq, dk=dk, dv=dv, rotation=rotation)
    B, H, T, D = dq.shape
    return dq.new_empty((B, T, 3 * H * D))


def _rope_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    _qkv, rotation, heads, *rest = inputs
    ctx.save_for_backward(rotation)
    ctx.heads = heads
    ctx.rotate_half = bool(rest[0]) if rest else False


def _rope_backward(ctx: Any, dq, dk, dv):
    (rotation,) = ctx.saved_tensors
    given = next(g for g in (dq, dk, dv) if g is not None)
    dq, dk, dv = (torch.zeros_like(given) if g is None else g for g in (dq, dk, dv))
    return ops.rope_qkv_backward(dq, dk, dv, rotation, ctx.heads, ctx.rotate_half), None, None, None


torch.library.register_autograd("lmscale::rope_qkv_forward", _rope_backward, setup_context=_rope_setup)

# ------------------------------------------------------------------ cross-entropy


@torch.library.register_fake("lmscale::cross_entropy_forward")
def _cross_entropy_forward_fake(logits, targets, reduction=1, ignore_index=-100, label_smoothing=0.0):
    check_one_device("cross_entropy_forward", logits=logits, targets=targets)
    check_floating("cross_entropy_forward", logits=logits)
    torch._check(targets.shape == logits.shape[:-1],
                 lambda: f"cross_entropy: targets {tuple(targets.shape)} must be logits' shape {tuple(logits.shape)} "
                         "without its last (vocabulary) dim")
    rows = logits.numel() // logits.shape[-1]
    dtype = _math_dtype(logits.dtype)
    loss_shape = targets.shape if reduction == 0 else ()
    return logits.new_empty(loss_shape, dtype=dtype), logits.new_empty((2, rows), dtype=dtype)


@torch.library.register_fake("lmscale::cross_entropy_backward")
def _cross_entropy_backward_fake(grad_loss, logits, targets, stats, reduction=1, ignore_index=-100,
                                 label_smoothing=0.0):
    check_one_device("cross_entropy_backward", logits=logits, targets=targets, stats=stats)
    return logits.new_empty(logits.shape)


def _cross_entropy_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    logits, targets, *options = inputs
    _loss, stats = output
    ctx.save_for_backward(logits, targets, stats)
    ctx.mark_non_differentiable(stats)
    ctx.options = tuple(options)  # (reduction, ignore_index, label_smoothing) as given, defaults left out


def _cross_entropy_backward(ctx: Any, grad_loss: Optional[torch.Tensor], _dstats: Any):
    logits, targets, stats = ctx.saved_tensors
    none = (None,) * len(ctx.options)
    if grad_loss is None:
        return (None, None) + none
    return (ops.cross_entropy_backward(grad_loss, logits, targets, stats, *ctx.options), None) + none


torch.library.register_autograd("lmscale::cross_entropy_forward", _cross_entropy_backward,
                                setup_context=_cross_entropy_setup)
