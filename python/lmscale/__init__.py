"""lmscale for PyTorch users: FlashAttention-2 as ``torch.library`` ops, DistributedDataParallel and
ZeRO-1 (ShardedOptimizer) on lmscale's C++ core.

    import torch, lmscale
    q, k, v = (torch.randn(2, 4, 128, 64, requires_grad=True) for _ in range(3))
    o = lmscale.flash_attention(q, k, v, is_causal=True)   # (..., N, D); CPU: reference, CUDA: kernel
    o.sum().backward()
    model = torch.compile(model, fullgraph=True)            # a model calling it: no graph break

    ddp = lmscale.DistributedDataParallel(model, bucket_size_mb=25)      # after dist.init_process_group
    opt = lmscale.ShardedOptimizer(ddp.parameters(), torch.optim.AdamW, lr=1e-3)
    loss.backward(); ddp.finish_gradient_synchronization(); opt.step()

``import lmscale`` loads nothing compiled: liblmscale.so (the ops) and the extension lmscale._C (the
C++ DDP reducer) are loaded on first use of a name below (or by ``lmscale.load()``, for code calling
``torch.ops.lmscale.*`` directly), so the pure-Python subpackages (``lmscale.baseline``,
``lmscale.plots``) work without a build. Where the library is looked for:
``lmscale._library`` (``$LMSCALE_LIBRARY``, the package folder, ``$LMSCALE_BUILD_DIR``, ``build/``).
``python -m lmscale`` prints what the loaded build holds. See docs/python.md.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the submodule defining it. Importing lmscale.attention loads liblmscale;
# lmscale.ddp and lmscale.sharded_optimizer load it when an object is built.
_LAZY = {
    "flash_attention": "attention",
    "flash_attention_forward": "attention",
    "flash_attention_backward": "attention",
    "FlashAttentionFunction": "attention",
    "DistributedDataParallel": "ddp",
    "ShardedOptimizer": "sharded_optimizer",
}

__all__ = [*_LAZY, "load", "library_path", "build_info"]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports on demand
    from .attention import (FlashAttentionFunction, flash_attention, flash_attention_backward,
                            flash_attention_forward)
    from .ddp import DistributedDataParallel
    from .sharded_optimizer import ShardedOptimizer


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module("." + _LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    if name == "library_path":  # the loaded liblmscale.so (a pathlib.Path); loads it
        from . import _library
        return _library.library_path()
    if name == "_C":
        from . import _library
        return _library.load()
    raise AttributeError(f"module 'lmscale' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load() -> None:
    """Loads liblmscale.so and lmscale._C now (once), registering ``torch.ops.lmscale.*``: for code
    that calls those ops directly. Using any name above loads them too. ImportError if not built."""
    from . import attention  # noqa: F401  (loads the library, then registers fake kernels and autograd)


def build_info() -> dict[str, Any]:
    """What the loaded build holds: library path, whether lmscale._C and CUDA kernels were built, the
    kernels' CUDA architecture, head dims and dtypes. Loads liblmscale."""
    from .info import build_info as _build_info
    return _build_info()
