"""FlashAttention's Python API (the ``flash_attn`` package's ``flash_attn_interface``) on lmscale's ops: the
same functions, argument names, defaults, (B, N, H, D) and packed (total, H, D) layouts, so a flash-attn
user changes one import::

    from lmscale.flash_attn import flash_attn_func, flash_attn_varlen_func   # was: from flash_attn import ...
    out = flash_attn_func(q, k, v, causal=True)                  # q (B, Nq, Hq, D), k/v (B, Nk, Hkv, D)
    out = flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=True)

As in flash-attn: ``causal`` aligns the diagonal bottom-right (the last query sees the last key, what
chunked prefill needs; SDPA's ``is_causal`` is top-left), ``window_size=(left, right)`` keeps query i to
keys [i + Nk - Nq - left, i + Nk - Nq + right] (-1: unbounded; causal makes right 0), K/V with fewer heads
than q is grouped-query attention (query head h reads K/V head h // (Hq // Hkv)), a query that sees no key
gets 0, ``softmax_scale`` defaults to 1/sqrt(D), and ``return_attn_probs=True`` returns
``(out, softmax_lse, None)`` with softmax_lse (B, Hq, Nq) fp32, or (Hq, total_q) for the varlen functions.
The functions are thin: each calls one ``torch.ops.lmscale`` op (``lmscale.attention`` registers their fake
kernels and autograd), so they run under autograd and ``torch.compile`` like any op.

Not supported, refused with an error naming the argument: ``dropout_p > 0``, ``softcap``, ``alibi_slopes``,
a paged KV cache (``block_table``) and ``flash_attn_with_kvcache``. On CUDA the kernels take grouped K/V
heads by index (nothing repeated), both causal alignments, sliding windows and packed batches themselves. See
docs/python.md, "flash-attn's API".
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch

from .attention import _attend, _forward_op, _varlen_forward_op

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]

Output = Union[torch.Tensor, tuple]


def _refuse_unsupported(fn: str, dropout_p: float, softcap: float, alibi_slopes: Optional[torch.Tensor]) -> None:
    if dropout_p != 0.0:
        raise ValueError(f"lmscale.flash_attn.{fn}: dropout_p={dropout_p} is not supported (lmscale's kernels have no "
                         "attention dropout). Pass dropout_p=0.0, e.g. set the model's attention dropout to 0.")
    if softcap != 0.0:
        raise ValueError(f"lmscale.flash_attn.{fn}: softcap={softcap} is not supported (no logit soft-capping in "
                         "lmscale's kernels). Pass softcap=0.0.")
    if alibi_slopes is not None:
        raise ValueError(f"lmscale.flash_attn.{fn}: alibi_slopes is not supported (no ALiBi bias in lmscale's "
                         "kernels). Pass alibi_slopes=None.")


def _window(fn: str, window_size: Sequence[int]) -> dict[str, int]:
    if len(window_size) != 2:
        raise ValueError(f"lmscale.flash_attn.{fn}: window_size must be (left, right); got {window_size!r}")
    left, right = (int(w) for w in window_size)
    return {"window_left": left, "window_right": right}


def _result(out: torch.Tensor, lse: torch.Tensor, return_attn_probs: bool) -> Output:
    # flash-attn returns S_dmask only with dropout (which lmscale has not): None, as flash-attn's without.
    return (out, lse, None) if return_attn_probs else out


def _dense(fn: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
           softmax_scale: Optional[float], causal: bool, window_size: Sequence[int], softcap: float,
           alibi_slopes: Optional[torch.Tensor], deterministic: bool, return_attn_probs: bool) -> Output:
    _refuse_unsupported(fn, dropout_p, softcap, alibi_slopes)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"lmscale.flash_attn.{fn}: q must be (B, Nq, Hq, D) and k, v (B, Nk, Hkv, D); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    # The op's layout is (B, H, N, D): a transposed view, no copy (the kernels take any row stride).
    args = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal)
    mask = dict(scale=softmax_scale, bottom_right=True, deterministic=deterministic, **_window(fn, window_size))
    # flash-attn returns O contiguous in (B, N, H, D). The op lays O out in q's order of dimensions, so for a
    # contiguous q this is a view (.contiguous() copies only for other q layouts).
    # flash-attn's autograd node is nobody's contract: the C++ one (cpp_node) costs the least host time per call.
    out, lse = _forward_op(*args, **mask) if return_attn_probs else (_attend(*args, cpp_node=True, **mask), None)
    return _result(out.transpose(1, 2).contiguous(), lse, return_attn_probs)


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: Optional[float] = None, causal: bool = False,
                    window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                    return_attn_probs: bool = False) -> Output:
    """Attention on (B, N, H, D) tensors, flash-attn's ``flash_attn_func``.

    Args:
        q: (B, Nq, Hq, D). k, v: (B, Nk, Hkv, D), Hq a multiple of Hkv (grouped-query attention).
        dropout_p: must be 0.0. softmax_scale: default 1/sqrt(D).
        causal: bottom-right aligned (query i sees keys j <= i + Nk - Nq).
        window_size: (left, right), query i sees keys [i + Nk - Nq - left, i + Nk - Nq + right]; -1 unbounded.
        softcap, alibi_slopes: must be 0.0 and None.
        deterministic: a bitwise-reproducible backward (CPU and the Hopper and fp32 kernels; an error on
            the mma.sync kernels).
        return_attn_probs: also return softmax_lse (B, Hq, Nq) fp32 and None.

    Returns:
        out (B, Nq, Hq, D) in q's dtype, or (out, softmax_lse, None).
    """
    return _dense("flash_attn_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                              return_attn_probs: bool = False) -> Output:
    """``flash_attn_func`` on qkv (B, N, 3, H, D). (flash-attn's packed variants save the concatenation of
    the gradients; here autograd stacks dq, dk, dv into dqkv.)"""
    q, k, v = qkv.unbind(2)
    return _dense("flash_attn_qkvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = 0.0,
                             softmax_scale: Optional[float] = None, causal: bool = False,
                             window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                             return_attn_probs: bool = False) -> Output:
    """``flash_attn_func`` on q (B, Nq, Hq, D) and kv (B, Nk, 2, Hkv, D)."""
    k, v = kv.unbind(2)
    return _dense("flash_attn_kvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                           return_attn_probs: bool = False, block_table: Optional[torch.Tensor] = None) -> Output:
    """Attention on packed variable-length batches, flash-attn's ``flash_attn_varlen_func``.

    Args:
        q: (total_q, Hq, D). k, v: (total_k, Hkv, D).
        cu_seqlens_q, cu_seqlens_k: int32 (B + 1,): sequence b is rows [cu[b], cu[b+1]); attention stays
            inside each sequence, and causal / window_size apply with each sequence's own lengths. Empty
            sequences are allowed; rows past the last offset get 0.
        max_seqlen_q, max_seqlen_k: the longest sequence's length (checked).
        The rest: as ``flash_attn_func``; block_table (a paged KV cache) must be None.

    Returns:
        out (total_q, Hq, D), or (out, softmax_lse (Hq, total_q) fp32, None).
    """
    if block_table is not None:
        raise ValueError("lmscale.flash_attn.flash_attn_varlen_func: block_table (a paged KV cache) is not "
                         "supported. Pass block_table=None with K/V packed by cu_seqlens_k.")
    _refuse_unsupported("flash_attn_varlen_func", dropout_p, softcap, alibi_slopes)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal)
    mask = dict(scale=softmax_scale, bottom_right=True, deterministic=deterministic,
                **_window("flash_attn_varlen_func", window_size))
    out, lse = _varlen_forward_op(*args, **mask) if return_attn_probs else (_attend(*args, **mask), None)
    return _result(out, lse, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                                     dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                     causal: bool = False, window_size: Sequence[int] = (-1, -1),
                                     softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                                     deterministic: bool = False, return_attn_probs: bool = False) -> Output:
    """``flash_attn_varlen_func`` on qkv (total, 3, H, D), one set of offsets for queries and keys."""
    q, k, v = qkv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale,
                                  causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                    causal: bool = False, window_size: Sequence[int] = (-1, -1),
                                    softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                                    deterministic: bool = False, return_attn_probs: bool = False) -> Output:
    """``flash_attn_varlen_func`` on q (total_q, Hq, D) and kv (total_k, 2, Hkv, D)."""
    k, v = kv.unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_with_kvcache(*args: Any, **kwargs: Any) -> torch.Tensor:
    """Not supported: lmscale has no KV-cache attention (in-place cache update, rotary, paged blocks)."""
    raise NotImplementedError(
        "lmscale.flash_attn.flash_attn_with_kvcache: a KV cache (k_cache, v_cache, cache_seqlens, block_table) is "
        "not supported. For decoding, call flash_attn_func(q, k_cache[:, :n], v_cache[:, :n], causal=True) on the "
        "filled part of the cache (causal aligns bottom-right, as with the cache).")
