"""FlashAttention-2 for PyTorch: the C++ ops ``torch.ops.lmscale.flash_attention_{forward,backward}`` and
their packed variable-length twins ``flash_attention_varlen_{forward,backward}`` (schemas and CPU/CUDA
kernels registered by liblmscale, src/ops/flash_attention.cpp) completed here through ``torch.library``
with what PyTorch 2.x asks of a custom op:

- a fake (meta) implementation of every op, so ``torch.compile`` and ``torch.export`` trace them with
  symbolic shapes (no graph break, no recompile for a new sequence length);
- the autograd formula of the forward ops (``register_autograd``): ``setup_context`` saves q, k, v, O
  and the logsumexp L (and the varlen offsets) with ``save_for_backward``; backward calls the backward
  op. So ``o.grad_fn.saved_tensors`` lists those five tensors, L being the one of shape (..., Nq). Eager calls
  of ``lmscale.flash_attention`` and ``lmscale.flash_attn`` outside autocast take the same formula as a plain
  ``autograd.Function`` (``_EagerAttention``: the same saved tensors, a fraction of the wrapper's host time), and
  ``flash_attn_func``'s dense calls the O-only op's C++ Function (less host time still; a C++ grad_fn).

Every op takes the mask and scale as keyword-only arguments after ``is_causal``: ``scale``,
``bottom_right`` (the causal diagonal's alignment: SDPA's top-left by default, FlashAttention's
bottom-right), ``window_left`` / ``window_right`` (a sliding window, -1 unbounded) and ``deterministic``
(the backward's). ``lmscale.flash_attention`` below is SDPA's contract over them; ``lmscale.flash_attn``
is FlashAttention's.

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
_varlen_forward_op = torch.ops.lmscale.flash_attention_varlen_forward.default
_varlen_backward_op = torch.ops.lmscale.flash_attention_varlen_backward.default
_attention_op = torch.ops.lmscale.flash_attention.default  # O only; autograd by the C++ Function

# The keyword-only arguments every op shares after is_causal (the mask, the scale, the backward's
# determinism; src/ops/flash_attention.cpp, docs/spec.md §3.6), with their defaults.
_MASK_DEFAULTS = {"scale": None, "bottom_right": False, "window_left": -1, "window_right": -1, "deterministic": False}


def _logsumexp_dtype(q: torch.Tensor) -> torch.dtype:
    # fp64 inputs (served by the reference) keep an fp64 L; every other dtype gets fp32.
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _check_fake_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """The shape rules of the C++ check_qkv, in a form symbolic shapes understand (torch._check), so a
    traced program fails at compile time with the same message as eager."""
    torch._check(q.dim() >= 2 and q.dim() == k.dim() == v.dim(),
                 lambda: f"flash_attention: q, k, v must be (..., N, D) with equal rank; got {q.shape}, {k.shape}, {v.shape}")
    torch._check(k.shape == v.shape, lambda: f"flash_attention: k and v must have the same shape; got {k.shape}, {v.shape}")
    if q.dim() >= 3:
        torch._check(q.shape[:-3] == k.shape[:-3],
                     lambda: f"flash_attention: q and k must share their leading (batch) dims; got {q.shape}, {k.shape}")
        torch._check(q.shape[-3] % k.shape[-3] == 0,
                     lambda: f"flash_attention: q's heads (dim -3) must be a multiple of k's; got {q.shape}, {k.shape}")
    torch._check(q.shape[-1] == k.shape[-1],
                 lambda: f"flash_attention: q and k must share the head dim D; got {q.shape}, {k.shape}")
    torch._check(q.dtype == k.dtype == v.dtype,
                 lambda: f"flash_attention: q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    # The fake is also the meta kernel, which a call with any `meta` input reaches: refuse the mix, as PyTorch does.
    torch._check(q.device == k.device == v.device,
                 lambda: f"flash_attention: q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")


def _check_backward_fake(q: torch.Tensor, o: torch.Tensor, L: torch.Tensor, dout: torch.Tensor) -> None:
    torch._check(q.device == o.device == L.device == dout.device,
                 lambda: f"flash_attention_backward: o, L, dout must be on q's device {q.device}; got {o.device}, "
                         f"{L.device}, {dout.device}")


def _check_fake_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    torch._check(q.dim() == 3 and k.dim() == 3 and k.shape == v.shape,
                 lambda: f"flash_attention_varlen: q must be (total_q, Hq, D), k and v (total_k, Hkv, D); got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    torch._check(q.shape[1] % k.shape[1] == 0 and q.shape[2] == k.shape[2],
                 lambda: f"flash_attention_varlen: q's heads must be a multiple of k's, and D shared; got {q.shape}, "
                         f"{k.shape}")
    torch._check(q.dtype == k.dtype == v.dtype,
                 lambda: f"flash_attention_varlen: q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    torch._check(q.device == k.device == v.device,
                 lambda: f"flash_attention_varlen: q, k, v must be on one device; got {q.device}, {k.device}, "
                         f"{v.device}")


def _output_like(q: torch.Tensor) -> torch.Tensor:
    """O as both devices lay it out (Note [output layout], src/ops/flash_attention.cpp): a 4-D O in q's order of
    dimensions, dense, as torch.empty_like gives it; any other rank contiguous."""
    return torch.empty_like(q) if q.dim() == 4 else q.new_empty(q.shape)


# The fakes give the C++ ops' layouts: O by _output_like, L contiguous.
@torch.library.register_fake("lmscale::flash_attention_forward")
def _forward_fake(q, k, v, is_causal=False, **_mask):
    _check_fake_inputs(q, k, v)
    return _output_like(q), q.new_empty(q.shape[:-1], dtype=_logsumexp_dtype(q))


@torch.library.register_fake("lmscale::flash_attention")
def _attention_fake(q, k, v, is_causal=False, **_mask):
    _check_fake_inputs(q, k, v)
    return _output_like(q)


@torch.library.register_fake("lmscale::flash_attention_backward")
def _backward_fake(q, k, v, o, L, dout, is_causal=False, **_mask):
    _check_fake_inputs(q, k, v)
    _check_backward_fake(q, o, L, dout)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@torch.library.register_fake("lmscale::flash_attention_varlen_forward")
def _varlen_forward_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal=False, **_mask):
    _check_fake_varlen(q, k, v)
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=_logsumexp_dtype(q))


@torch.library.register_fake("lmscale::flash_attention_varlen_backward")
def _varlen_backward_fake(q, k, v, o, L, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          is_causal=False, **_mask):
    _check_fake_varlen(q, k, v)
    _check_backward_fake(q, o, L, dout)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _forward_op_for(args: tuple):
    """The forward op that takes ``args`` after q, k, v: ``(is_causal,)`` for the dense one, ``(cu_seqlens_q,
    cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal)`` for packed batches."""
    return _varlen_forward_op if len(args) > 1 else _forward_op


def _save(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, args: tuple, mask: dict,
          output: tuple) -> None:
    """What the forward ops' autograd formula keeps, registered or eager: q, k, v, O, L (and a packed batch's
    offsets) saved for backward, the other arguments and the mask on ctx."""
    o, L = output
    offsets = args[:2] if len(args) > 1 else ()
    ctx.save_for_backward(q, k, v, o, L, *offsets)
    ctx.scalars, ctx.n_args = args[len(offsets):], len(args)
    ctx.mask = {**_MASK_DEFAULTS, **mask}


def _grads(ctx: Any, dout: Optional[torch.Tensor]) -> tuple:
    """(dq, dk, dv) by the backward op of the forward that ran; Nones when only L was used downstream."""
    q, k, v, o, L, *offsets = ctx.saved_tensors
    if dout is None:
        return None, None, None
    backward_op = _varlen_backward_op if offsets else _backward_op
    return backward_op(q, k, v, o, L, dout, *offsets, *ctx.scalars, **ctx.mask)


def _setup_context(ctx: Any, inputs: tuple, keyword_only_inputs: dict, output: tuple) -> None:
    q, k, v, *args = inputs
    _save(ctx, q, k, v, tuple(args), keyword_only_inputs, output)
    # L is a by-product for backward: no gradient flows through it, and none is made up for it (materialised,
    # an unused L's gradient would be a zero-filled (..., Nq) tensor every backward).
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)


def _backward(ctx: Any, dout: Optional[torch.Tensor], _dL: Optional[torch.Tensor]):
    return (*_grads(ctx, dout), *(None,) * ctx.n_args)


for _name in ("lmscale::flash_attention_forward", "lmscale::flash_attention_varlen_forward"):
    torch.library.register_autograd(_name, _backward, setup_context=_setup_context)


def _refuse_double_backward(ctx: Any, *grads: Any):
    raise RuntimeError(
        "lmscale.flash_attention: double backward (a gradient of a gradient through attention, e.g. a "
        "gradient penalty or torch.autograd.grad(..., create_graph=True) followed by another backward) is "
        "not implemented, as in SDPA's flash backend. Use F.scaled_dot_product_attention with the math "
        "backend (torch.nn.attention.sdpa_kernel(SDPBackend.MATH)) for that part of the model."
    )


def _backward_setup_context(ctx: Any, inputs: tuple, keyword_only_inputs: dict, output: tuple) -> None:
    pass  # nothing to save: the backward of the backward only refuses


# The backward ops' own backward refuses, so a second differentiation raises instead of silently
# treating dQ, dK, dV as constants (what an op without autograd gives, with only a warning).
for _name in ("lmscale::flash_attention_backward", "lmscale::flash_attention_varlen_backward"):
    torch.library.register_autograd(_name, _refuse_double_backward, setup_context=_backward_setup_context)


def _check_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, enable_gqa: bool) -> None:
    """SDPA's rule for grouped-query attention: k, v (..., Hkv, Nk, D) with fewer heads than q only with
    enable_gqa=True, and then Hq a multiple of Hkv (each key/value head serves Hq/Hkv consecutive query
    heads). The op itself takes the grouped heads natively (nothing is repeated)."""
    if q.dim() < 3 or k.dim() != q.dim():
        return  # the op's own check names the mismatch
    if not enable_gqa:
        # Eager only: under torch.compile the comparison would guard on symbolic head counts, and the
        # op's check of the heads (fake kernel included) still refuses what does not divide.
        if not torch.compiler.is_compiling() and q.shape[-3] != k.shape[-3]:
            raise ValueError(f"lmscale.flash_attention: q has {q.shape[-3]} heads but k and v have {k.shape[-3]}; pass "
                             "enable_gqa=True for grouped-query attention (as with SDPA), or repeat k/v heads yourself.")
        return
    hq, hkv = q.shape[-3], k.shape[-3]
    if v.shape[-3] != hkv or hq % hkv != 0:
        raise ValueError(f"lmscale.flash_attention: enable_gqa needs q's heads ({hq}) to be a multiple of k's and "
                         f"v's (got k {hkv}, v {v.shape[-3]}), as SDPA requires.")


def _causal_bias(attn_mask: Any, q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> bool:
    """SDPA's causal biases as attn_mask: ``causal_upper_left(Nq, Nk)`` is is_causal=True,
    ``causal_lower_right(Nq, Nk)`` the bottom-right diagonal. Returns bottom_right."""
    from torch.nn.attention.bias import CausalBias, CausalVariant
    if not isinstance(attn_mask, CausalBias):
        raise ValueError("lmscale.flash_attention: attn_mask must be None or a causal bias "
                         "(torch.nn.attention.bias.causal_upper_left / causal_lower_right); the kernels apply no "
                         "other mask. Use is_causal=True, or F.scaled_dot_product_attention for other masks.")
    if is_causal:
        raise ValueError("lmscale.flash_attention: attn_mask is a causal bias and is_causal=True; pass one of them "
                         "(SDPA refuses both too).")
    if (attn_mask.seq_len_q, attn_mask.seq_len_kv) != (q.shape[-2], k.shape[-2]):
        raise ValueError(f"lmscale.flash_attention: attn_mask was made for Nq = {attn_mask.seq_len_q}, "
                         f"Nk = {attn_mask.seq_len_kv}, but q and k have Nq = {q.shape[-2]}, Nk = {k.shape[-2]}.")
    return attn_mask.variant == CausalVariant.LOWER_RIGHT


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, *,
                    scale: Optional[float] = None, enable_gqa: bool = False, attn_mask: Any = None,
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
        scale: the scores' factor; default 1/sqrt(D), as SDPA. Passed to the kernels as their factor.
        enable_gqa: grouped-query attention as SDPA's: Hq a multiple of Hkv, each k/v head serving
            Hq/Hkv consecutive query heads (the op reads each K/V head for its group, on CPU and in the
            CUDA kernels: nothing is repeated).
        attn_mask: None, or SDPA's causal biases: ``torch.nn.attention.bias.causal_upper_left(Nq, Nk)``
            (the same as is_causal=True) or ``causal_lower_right(Nq, Nk)`` (the diagonal through the last
            query and the last key, FlashAttention's causal; a query that sees no key, Nq > Nk, gets 0 where
            SDPA gives NaN). Any other mask is refused.
        dropout_p: SDPA's, accepted as None or 0.0 only: the kernels have no dropout.

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
                        "is_causal here (SDPA's is attn_mask, which lmscale takes by name): pass is_causal=... "
                        "by name.")
    bottom_right = False
    if attn_mask is not None:
        bottom_right = _causal_bias(attn_mask, q, k, is_causal)
        is_causal = True
    # None by default, not SDPA's 0.0: comparing a float default makes torch.compile restart its analysis.
    if dropout_p is not None and dropout_p != 0.0:
        raise ValueError("lmscale.flash_attention: dropout_p must be 0.0 (the kernels have no attention dropout); "
                         "use F.scaled_dot_product_attention where dropout on the attention weights is needed.")
    _check_gqa(q, k, v, enable_gqa)
    d, dv = q.shape[-1], v.shape[-1]
    if dv == d or k.shape[-1] != d:  # the kernels' own case (a D mismatch: the op's check names it)
        return _attend(q, k, v, is_causal, scale=scale, bottom_right=bottom_right)
    # Values of their own size: q, k, v padded with zeros to the larger (the zeros change no score), at the
    # scale of the real D.
    width = max(d, dv)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    pad = lambda t: torch.nn.functional.pad(t, (0, width - t.shape[-1]))
    return _attend(pad(q), pad(k), pad(v), is_causal, scale=scale, bottom_right=bottom_right)[..., :dv]


def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False,
                            **mask: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (O, L): O like q, L the logsumexp of the scaled scores, shape (..., Nq), fp32 (fp64
    for fp64 inputs). Differentiable in O. ``mask``: the op's keyword-only ``scale``, ``bottom_right``,
    ``window_left``, ``window_right``, ``deterministic``."""
    return _forward_op(q, k, v, is_causal, **mask)


def flash_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                             L: torch.Tensor, dout: torch.Tensor, is_causal: bool = False,
                             **mask: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward by recomputation from the forward's O and L: returns (dQ, dK, dV). Not differentiable."""
    return _backward_op(q, k, v, o, L, dout, is_causal, **mask)


class _EagerAttention(torch.autograd.Function):
    """The forward ops' autograd formula as a plain ``autograd.Function`` (q, k, v, O and L saved, so
    ``o.grad_fn.saved_tensors`` reads as with the op), for eager calls: ``register_autograd``'s wrapper around an
    op (its metadata, its dispatch below autograd, the context's keyword dict) costs several times the host time of
    a plain Function on every call, which decides small shapes (the xl step's 4 x 25 x 512 x 64, ~0.1 ms of
    kernels). ``args`` follow q, k, v as the ops take them: ``(is_causal,)``, or for packed batches
    ``(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal)``.

    forward(ctx, ...) with O its only output, not the forward + setup_context form: ``apply`` of that form binds
    its arguments through ``inspect.signature`` on every call, and an L output would get a zero-filled gradient
    each backward; the two cost more host time per call than the kernels of the small steps (H200,
    tools/probes/attention_host)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, args: tuple, mask: dict):
        o, L = _forward_op_for(args)(q, k, v, *args, **mask)
        _save(ctx, q, k, v, args, mask, (o, L))
        return o

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor):
        return (*_grads(ctx, dout), None, None)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, cpp_node: bool = False,
            **mask: Any) -> torch.Tensor:
    """O, differentiable, of the dense or (with the offsets in ``args``) packed forward op: the op with its
    ``register_autograd`` formula when torch.compile traces (what AOTAutograd reads) and under autocast (the ops'
    C++ autocast rule casts below that formula, so it saves the cast inputs), the same formula as
    ``_EagerAttention`` in other eager calls. ``cpp_node``: a dense eager call may take the O-only op's C++
    autograd Function instead (the same forward and backward ops, the least host time per call; its grad_fn is a C++
    node, whose saved tensors Python cannot read), for callers that promise no one inspects them."""
    device = q.device.type  # autocast exists for some device types only (not meta: shape inference on it runs too)
    if (torch.compiler.is_compiling() or
            not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)) or
            (torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device))):
        return _forward_op_for(args)(q, k, v, *args, **mask)[0]
    if cpp_node and len(args) == 1:
        return _attention_op(q, k, v, *args, **mask)
    return _EagerAttention.apply(q, k, v, args, mask)


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
