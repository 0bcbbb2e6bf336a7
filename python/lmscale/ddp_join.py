"""ddp.join(): lmscale.DistributedDataParallel on uneven inputs (PyTorch's DistributedDataParallel.join
semantics). A rank that runs out of batches waits at the end of the ``with`` block and, for each
forward and backward the others still run, issues the matching collectives (the backward's through
the reducer's shadow_gradient_synchronization, Note [DDP join] in src/distributed/ddp.cpp), so no rank
hangs; when every rank is done, the model of the last rank to finish is copied to all. The forward
side (one status all-reduce per forward of a rank still training) is called from ddp.py."""
from __future__ import annotations

import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Optional

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from .ddp import DistributedDataParallel

# Shadowed steps after which a joined rank warns that the inputs are very uneven (PyTorch warns too).
_SKEW_WARNING_STEPS = 1000


class Join:
    """The context manager ``ddp.join()`` returns; see DistributedDataParallel.join.

    Every forward of a rank still training inside it all-reduces one status vector of world_size + 2
    integers: slot r is 1 when rank r still trains, slot W counts the ranks whose forward will be
    followed by a synchronised backward, slot W + 1 the joined ranks asking everyone to stop
    (throw_on_early_termination). A joined rank contributes zeros there (and its stop flag), so one
    collective tells every rank who is left, whether to shadow a backward, what to divide by and whom
    to copy buffers from (the highest rank still training: rank 0 may have joined with stale ones)."""

    def __init__(self, ddp: "DistributedDataParallel", divide_by_initial_world_size: bool, enable: bool,
                 throw_on_early_termination: bool) -> None:
        self._ddp = ddp
        self._divide_by_initial = bool(divide_by_initial_world_size)
        self._enable = bool(enable)
        self._throw = bool(throw_on_early_termination)
        self._group = ddp.process_group
        self._rank = dist.get_rank(self._group)
        self._world = dist.get_world_size(self._group)
        self._pending: Optional[tuple[dist.Work, torch.Tensor]] = None  # a status all-reduce not waited for yet

    def __enter__(self) -> "Join":
        if self._enable:
            if self._ddp._join is not None:
                raise RuntimeError("lmscale.DistributedDataParallel.join: this model is inside a join already; "
                                   "one join context at a time (leave out the inner one).")
            self._ddp._join = self
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if not self._enable:
            return
        try:
            self._wait_pending()
            if exc_type is None:  # an exception in the block propagates as it is, as in PyTorch
                self._shadow_until_all_joined()
        finally:
            self._ddp._join = None
            self._ddp._reducer.divisor = self._world

    # ------------------------------------------------------------------ a rank still training

    def notify_not_joined(self, will_sync: bool) -> int:
        """Called by the forward of a rank still training: the status all-reduce, then whatever this forward
        needs from it. Returns the rank to copy buffers from (the highest one still training)."""
        self._wait_pending()
        status = self._status(active=True, syncing=will_sync, stop=False)
        work = dist.all_reduce(status, group=self._group, async_op=True)
        needs_result = self._throw or not self._divide_by_initial or self._ddp._broadcasts_buffers()
        if not needs_result:
            self._pending = (work, status)  # waited for at the next forward, or at the end of the join
            return self._rank
        work.wait()
        active, _, stop, source = self._read(status)
        if self._throw and stop:
            raise RuntimeError(
                f"lmscale.DistributedDataParallel.join: rank {self._rank}: another rank ran out of inputs and "
                "throw_on_early_termination=True stops every rank (catch this RuntimeError to end the epoch, or "
                "leave throw_on_early_termination False to train on with the ranks that have data)."
            )
        if not self._divide_by_initial and will_sync:
            self._ddp._reducer.divisor = active
        return source

    def _wait_pending(self) -> None:
        if self._pending is not None:
            work, _ = self._pending
            self._pending = None
            work.wait()

    # ------------------------------------------------------------------ a rank that has run out

    def _shadow_until_all_joined(self) -> None:
        is_last_joiner = True
        shadowed = 0
        while True:
            status = self._status(active=False, syncing=False, stop=self._throw)
            dist.all_reduce(status, group=self._group)
            active, syncing, _, source = self._read(status)
            if active == 0:
                break
            if self._throw:
                raise RuntimeError(
                    f"lmscale.DistributedDataParallel.join: rank {self._rank} ran out of inputs while {active} "
                    "rank(s) still train, and throw_on_early_termination=True stops every rank here."
                )
            is_last_joiner = False
            if self._ddp._broadcasts_buffers():
                self._ddp._broadcast_buffers_from(source)
            if syncing:
                if not self._divide_by_initial:
                    self._ddp._reducer.divisor = active
                self._ddp._reducer.shadow_gradient_synchronization()
            shadowed += 1
            if shadowed == _SKEW_WARNING_STEPS:
                warnings.warn(f"lmscale.DistributedDataParallel.join: rank {self._rank} has shadowed "
                              f"{_SKEW_WARNING_STEPS} steps of the other ranks; inputs this uneven leave this "
                              "rank idle (balance the shards).", stacklevel=3)
        self._copy_model_of_last_joiner(is_last_joiner)

    def _copy_model_of_last_joiner(self, is_last_joiner: bool) -> None:
        """Every rank ends with the model of a rank that trained to the end (a joined rank's stopped
        early): the highest rank among those that joined last."""
        candidate = torch.tensor([self._rank if is_last_joiner else -1], device=self._ddp._device)
        dist.all_reduce(candidate, op=dist.ReduceOp.MAX, group=self._group)
        source = int(candidate.item())
        tensors = [p.detach() for p in self._ddp.module.parameters()]
        if self._ddp.broadcast_buffers:
            tensors += [b.detach() for b in self._ddp._buffers_to_sync]
        if tensors:
            self._ddp._broadcast(tensors, source)

    # ------------------------------------------------------------------ the status vector

    def _status(self, active: bool, syncing: bool, stop: bool) -> torch.Tensor:
        status = torch.zeros(self._world + 2, dtype=torch.int64, device=self._ddp._device)
        if active:
            status[self._rank] = 1
            status[self._world] = int(syncing)
        status[self._world + 1] = int(stop)
        return status

    def _read(self, status: torch.Tensor) -> tuple[int, int, int, int]:
        """(ranks still training, of them syncing this backward, ranks asking to stop, highest training rank)."""
        values = status.tolist()
        ranks = values[:self._world]
        active = sum(ranks)
        source = max((r for r, on in enumerate(ranks) if on), default=-1)
        return active, values[self._world], values[self._world + 1], source
