"""lmscale for PyTorch users: FlashAttention-2 with SDPA's contract, the fused layers of lmscale's own
model as ``lmscale.nn`` (RMSNorm + residual, SwiGLU, QKV + RoPE, cross-entropy), DistributedDataParallel
and ZeRO-1 (ShardedOptimizer) on lmscale's C++ core, all taking PyTorch's arguments.

    import torch, lmscale
    q, k, v = (torch.randn(2, 4, 128, 64, requires_grad=True) for _ in range(3))
    o = lmscale.flash_attention(q, k, v, is_causal=True)   # F.scaled_dot_product_attention's contract
    o.sum().backward()
    model = torch.compile(model, fullgraph=True)            # a model calling it: no graph break

    ddp = lmscale.DistributedDataParallel(model, device_ids=[rank])   # after dist.init_process_group
    opt = lmscale.ShardedOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
    loss.backward(); opt.step()                             # gradients are averaged inside backward

``import lmscale`` loads liblmscale.so when it is found (registering ``torch.ops.lmscale.*`` with
their fake kernels and autograd, so those ops work right away) and checks that the installed torch is
the one it was built against. Without a build it still imports: the pure-Python subpackages
(``lmscale.baseline``, ``lmscale.plots``) work, and the names below raise an ImportError that says how
to build. Where the library is looked for: ``lmscale._library`` (``$LMSCALE_LIBRARY``, the package
folder, ``$LMSCALE_BUILD_DIR``, ``build/``). ``python -m lmscale`` prints what the loaded build holds.
See docs/python.md.
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
    if name == "nn":  # not built: importing it raises the ImportError that names the fix
        return importlib.import_module(".nn", __name__)
    if name == "flash_attn":  # flash-attn's API (lmscale.flash_attn.flash_attn_func, ...); loads liblmscale
        return importlib.import_module(".flash_attn", __name__)
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
    """Loads liblmscale.so and lmscale._C now (once), registering ``torch.ops.lmscale.*`` with their
    fake kernels and autograd. ``import lmscale`` already did if the library was found; this raises
    the ImportError that says why not."""
    from . import attention, nn  # noqa: F401  (load the library, then register fake kernels and autograd)


def _load_if_built() -> None:
    """The ops at import, as every PyTorch extension registers them; silent when there is no build
    (pure-Python use), an ImportError when the build does not fit this torch (the wheel's check), a
    warning when a found build cannot be used (say, one older than these Python files): the
    pure-Python parts still import, and the first use of an op name raises the error itself."""
    from . import _library
    try:
        path = _library.find_library()
    except ImportError:
        return
    try:
        load()
    except _library.TorchMismatchError:
        raise
    except Exception as e:  # noqa: BLE001 (reported, and raised again on first use)
        import warnings
        warnings.warn(f"lmscale: the library {path} was found but could not be used ({type(e).__name__}: {e}); "
                      "rebuild it (./lmscale build, or pip install ./python). Until then only the pure-Python "
                      "parts (lmscale.baseline, lmscale.plots) work.", stacklevel=2)


_load_if_built()


def build_info() -> dict[str, Any]:
    """What the loaded build holds: library path, whether lmscale._C and CUDA kernels were built, the
    kernels' CUDA architecture, head dims and dtypes. Loads liblmscale."""
    from .info import build_info as _build_info
    return _build_info()
