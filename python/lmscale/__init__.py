"""lmscale for PyTorch users: importing the package loads lmscale's C++ library, whose
TORCH_LIBRARY registrations create ``torch.ops.lmscale.*``; this module only adds thin wrappers.

    import torch, lmscale
    q, k, v = (torch.randn(2, 4, 128, 64, requires_grad=True) for _ in range(3))
    o = lmscale.flash_attention(q, k, v, is_causal=True)   # (..., N, D); CPU: reference, CUDA: kernel
    o.sum().backward()

The library is found at $LMSCALE_LIBRARY, else in the build folders of this checkout
(``$LMSCALE_BUILD_DIR``, ``build/``), as built by ``./lmscale build``.
"""
import os
import pathlib

import torch

__all__ = ["flash_attention", "flash_attention_forward", "flash_attention_backward", "library_path"]


def _find_library():
    if os.environ.get("LMSCALE_LIBRARY"):
        return pathlib.Path(os.environ["LMSCALE_LIBRARY"])
    root = pathlib.Path(__file__).resolve().parents[2]
    candidates = [pathlib.Path(os.environ["LMSCALE_BUILD_DIR"])] if os.environ.get("LMSCALE_BUILD_DIR") else []
    candidates += [root / "build", root / "build-gpu"]
    for folder in candidates:
        lib = folder / "liblmscale.so"
        if lib.exists():
            return lib
    raise ImportError(
        "lmscale: liblmscale.so not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "). Build it with `./lmscale build`, or point LMSCALE_LIBRARY at it."
    )


library_path = _find_library()
torch.ops.load_library(str(library_path))


def flash_attention(q, k, v, is_causal=False):
    """FlashAttention-2, autograd-aware. q (..., Nq, D), k/v (..., Nk, D); returns O like q.
    Saves q, k, v, O and the fp32 logsumexp L for backward, nothing else."""
    return torch.ops.lmscale.flash_attention(q, k, v, is_causal)


def flash_attention_forward(q, k, v, is_causal=False):
    """Low-level forward: returns (O, L) with L the fp32 logsumexp of shape (..., Nq)."""
    return torch.ops.lmscale.flash_attention_forward(q, k, v, is_causal)


def flash_attention_backward(q, k, v, o, L, dout, is_causal=False):
    """Low-level backward by recomputation: returns (dQ, dK, dV)."""
    return torch.ops.lmscale.flash_attention_backward(q, k, v, o, L, dout, is_causal)
