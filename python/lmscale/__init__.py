"""lmscale for PyTorch users: importing the package loads lmscale's C++ library, whose
TORCH_LIBRARY registrations create ``torch.ops.lmscale.*``, and its pybind11 extension ``lmscale._C``
(the C++ DDP reducer); this package only adds thin wrappers.

    import torch, lmscale
    q, k, v = (torch.randn(2, 4, 128, 64, requires_grad=True) for _ in range(3))
    o = lmscale.flash_attention(q, k, v, is_causal=True)   # (..., N, D); CPU: reference, CUDA: kernel
    o.sum().backward()

    ddp = lmscale.DistributedDataParallel(model, bucket_size_mb=25)      # after dist.init_process_group
    opt = lmscale.ShardedOptimizer(ddp.parameters(), torch.optim.AdamW, lr=1e-3)
    loss.backward(); ddp.finish_gradient_synchronization(); opt.step()

The library and extension are found at $LMSCALE_LIBRARY (the path of liblmscale.so; _C sits beside
it), else in the build folders of this checkout (``$LMSCALE_BUILD_DIR``, ``build/``, ``build-gpu/``),
as built by ``./lmscale build``. See docs/python.md.
"""
import importlib.machinery
import importlib.util
import os
import pathlib
import sys

import torch
import torch.distributed as dist

__all__ = [
    "flash_attention",
    "flash_attention_forward",
    "flash_attention_backward",
    "DistributedDataParallel",
    "ShardedOptimizer",
    "library_path",
]


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


def _load_extension(folder):
    """Imports lmscale._C from the build folder (it is built there, not in this package, so that
    several build folders coexist). Returns None when the build skipped it (no Python headers)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / ("_C" + suffix)
        if path.exists():
            spec = importlib.util.spec_from_file_location(__name__ + "._C", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
    return None


library_path = _find_library()
# Load order matters: the op library first (its registrations), then _C, which links against it
# and so reuses the copy already loaded.
torch.ops.load_library(str(library_path))
_C = _load_extension(library_path.parent)


def _require_extension(what):
    if _C is None:
        raise ImportError(
            f"lmscale.{what} needs the extension lmscale._C, which is not in {library_path.parent}. "
            "It is skipped when CMake finds no Python headers for the interpreter: install them "
            "(apt-get install python3-dev) and run `./lmscale build` again (its log names the cause)."
        )
    return _C


def _require_distributed(what, how):
    """lmscale._C, once torch.distributed is initialised; `how` says how to initialise it."""
    C = _require_extension(what)
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"lmscale.{what}: torch.distributed is not initialised. Call {how}")
    return C


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


from .ddp import DistributedDataParallel  # noqa: E402  (needs _C, loaded above)
from .sharded_optimizer import ShardedOptimizer  # noqa: E402
