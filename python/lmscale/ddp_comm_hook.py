"""Communication hooks for lmscale.DistributedDataParallel (``register_comm_hook``): the GradBucket a
hook receives, with the methods of ``torch.distributed.GradBucket`` that PyTorch's hooks call, and the
call the C++ reducer makes per ready bucket. The reducer's side (when it calls, and how the future's
tensor gets back into the bucket) is Note [Python comm hook] in bindings.cpp."""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch


class GradBucket:
    """One bucket of gradients, as a comm hook sees it: a flat 1-D ``buffer()`` holding the gradients
    of ``parameters()`` back to back (``gradients()`` are views of it, shaped like the parameters).
    Buckets are numbered in the order they launch, the same on every rank; ``is_last()`` is true for
    the last of a step. Like PyTorch's, the buckets are rebuilt once, after the first step, in the
    order the gradients became ready, so a hook keeping per-bucket state by ``index()`` sees the final
    layout from the second step on. ``set_buffer`` replaces what ``buffer()`` returns for this call
    only (PyTorch's compression wrappers hand the hook they wrap a low-precision copy that way)."""

    def __init__(self, index: int, count: int, buffer: torch.Tensor, params: list[torch.Tensor],
                 offsets: list[int], lengths: list[int]) -> None:
        self._index = index
        self._count = count
        self._flat = buffer
        self._buffer = buffer
        self._params = params
        self._offsets = offsets
        self._lengths = lengths

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def set_buffer(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer

    def is_last(self) -> bool:
        return self._index == self._count - 1

    def parameters(self) -> list[torch.Tensor]:
        return list(self._params)

    def gradients(self) -> list[torch.Tensor]:
        return [self._flat.narrow(0, o, n).view(p.shape) for p, o, n in zip(self._params, self._offsets, self._lengths)]

    # torch.distributed.GradBucket's older name for gradients().
    get_per_parameter_tensors = gradients


def check_comm_hook(hook: Any) -> None:
    """Refuses, at registration, a hook that is not a callable of (state, bucket)."""
    if not callable(hook):
        raise TypeError(f"register_comm_hook: hook must be callable as hook(state, bucket), got {type(hook).__name__}.")
    try:
        inspect.signature(hook).bind(None, None)
    except TypeError:
        raise TypeError(f"register_comm_hook: {_name(hook)} cannot be called as hook(state, bucket); a comm hook takes "
                        "two arguments, the state given to register_comm_hook and a GradBucket.") from None
    except ValueError:
        pass  # no signature to inspect (a builtin): the first call will tell


def run_comm_hook(hook: Callable[[Any, GradBucket], Any], state: Any, index: int, count: int, buffer: torch.Tensor,
                  params: list[torch.Tensor], offsets: list[int], lengths: list[int]) -> torch.futures.Future:
    """What the reducer calls for each ready bucket (under the GIL, on the autograd thread): the hook on a
    GradBucket over the bucket's buffer. Its future's tensor becomes the bucket's gradients, as given:
    the reducer divides nothing once a hook is registered."""
    fut = hook(state, GradBucket(index, count, buffer, params, offsets, lengths))
    # torch._C.Future: Work.get_future() and Future.then() return the C++ type, of which
    # torch.futures.Future (what Python code constructs) is a subclass.
    if not isinstance(fut, torch._C.Future):
        raise TypeError(
            f"comm hook {_name(hook)} returned {type(fut).__name__} for bucket {index}; it must return a "
            "torch.futures.Future holding the bucket's new gradients (dist.all_reduce(t, async_op=True)"
            ".get_future().then(lambda f: f.value()[0]), or a Future with set_result(bucket.buffer()) when "
            "nothing is communicated)."
        )
    return fut


def _name(hook: Any) -> str:
    return getattr(hook, "__qualname__", None) or getattr(hook, "__name__", None) or repr(hook)
