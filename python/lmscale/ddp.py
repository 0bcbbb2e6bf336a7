"""lmscale.DistributedDataParallel: an nn.Module wrapper whose gradient hooks, buckets and
collectives are the C++ DDP of src/distributed/ddp.h (lmscale._C.Reducer), handed the Python process group.
Python only lists the module's parameters and buffers, forwards calls and implements no_sync(); the
ShardedOptimizer that often follows it is in sharded_optimizer.py."""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist

from ._library import require_distributed as _require_distributed


class DistributedDataParallel(torch.nn.Module):
    """Data parallelism for any ``nn.Module``, on the default ``torch.distributed`` group or a given one
    (Gloo for CPU modules, NCCL for CUDA modules).

    - ``bucket_size_mb=None``: one all-reduce per parameter, launched as soon as its gradient lands
      in backward; a number: buckets of at most that many MB (2**20 bytes), each launched in order
      when its last gradient lands (``0`` = one parameter per bucket, ``float('inf')`` = one bucket).
    - At construction (a collective: every rank must wrap the same model) every parameter and buffer,
      frozen ones too, is copied from rank 0; ranks disagreeing on shapes or dtypes fail with a message.
    - After ``loss.backward()``, ``finish_gradient_synchronization()`` returns once every ``.grad``
      holds the average over ranks; then step the optimizer. A tied weight is reduced once, after all
      its uses; parameters with ``requires_grad=False`` are never reduced.
    - Gradients live in the reducer's bucket buffers: ``optimizer.zero_grad(set_to_none=False)``
      keeps them there, so backward accumulates in place with no copy (``set_to_none=True`` works
      too, at the price of one copy per parameter per step).
    - Gradient accumulation: forward and backward inside ``with ddp.no_sync():`` communicate nothing
      and accumulate into ``.grad``; the first backward outside it synchronises the sum (then call
      ``finish_gradient_synchronization()`` as usual), as with ``torch.nn.parallel.DistributedDataParallel``.
    - ``ddp.module`` is the wrapped module (state_dict keys gain the ``module.`` prefix, as in PyTorch).
      The wrapped module may be ``torch.compile``-d (``DistributedDataParallel(torch.compile(model))``),
      and the wrapper itself compiles: the reducer's hooks run in the autograd engine, outside the graph.
    """

    def __init__(self, module: torch.nn.Module, bucket_size_mb: Optional[float] = None,
                 process_group: Optional[dist.ProcessGroup] = None) -> None:
        super().__init__()
        C = _require_distributed(
            "DistributedDataParallel",
            "torch.distributed.init_process_group('gloo' for CPU, 'nccl' for CUDA) on every rank first "
            "(torchrun sets the RANK/WORLD_SIZE/MASTER_* variables it reads).",
        )
        if process_group is None:
            process_group = dist.group.WORLD
        elif process_group is dist.GroupMember.NON_GROUP_MEMBER:
            raise ValueError(
                "lmscale.DistributedDataParallel: this rank is not a member of process_group; only the "
                "group's ranks wrap the model (check the ranks passed to dist.new_group)."
            )
        self.module = module
        self.process_group = process_group
        self.bucket_size_mb = bucket_size_mb
        self.require_backward_grad_sync = True  # False inside no_sync(), as PyTorch's DDP names it
        # module.parameters() lists each parameter once (a tied weight too), in the module's own
        # order; the reducer's bucket_assignment indexes this list.
        self._reducer = C.Reducer(
            list(module.parameters()), list(module.buffers()), process_group,
            None if bucket_size_mb is None else float(bucket_size_mb),
        )

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.require_backward_grad_sync or not torch.is_grad_enabled():
            return self.module(*inputs, **kwargs)
        return self._forward_without_sync(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Gradient accumulation without communication: backward of a forward run inside this
        context adds each gradient into ``.grad`` on this rank only. Sum several micro-batches this way,
        then run the last one outside the context and call ``finish_gradient_synchronization()``:
        ``.grad`` is then the average over ranks of every micro-batch's gradient, as one big batch gives."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def _forward_without_sync(self, *inputs: Any, **kwargs: Any) -> Any:
        # The reducer marks a parameter ready from a hook on that parameter's gradient accumulator,
        # and that launches its all-reduce. To keep it silent, run the module on stand-ins: detached
        # leaves sharing the parameters' storage, whose gradients are added into the real .grad by
        # their own hook. (A tied weight is one entry of named_parameters, so it gets one stand-in,
        # which functional_call ties to every use.)
        stand_ins = {}
        for name, param in self.module.named_parameters():
            if param.requires_grad:
                stand_in = param.detach().requires_grad_()
                stand_in.register_post_accumulate_grad_hook(functools.partial(_add_grad_into, param))
                stand_ins[name] = stand_in
        return torch.func.functional_call(self.module, stand_ins, inputs, kwargs)

    def finish_gradient_synchronization(self) -> None:
        """Call after every backward, before the optimizer: launches what backward did not (e.g.
        for parameters unused this step, which count as zero), waits, and returns with averaged .grad."""
        self._reducer.finish_gradient_synchronization()

    @property
    def bucket_assignment(self) -> list[list[int]]:
        """Indices into list(self.module.parameters()) per bucket, in launch order (trainable only)."""
        return self._reducer.bucket_assignment


@torch.no_grad()
def _add_grad_into(param: torch.Tensor, stand_in: torch.Tensor) -> None:
    """A no_sync stand-in's gradient, added into its parameter's .grad (in place when .grad exists,
    which keeps a bucket view a bucket view) and dropped from the stand-in."""
    if param.grad is None:
        param.grad = stand_in.grad
    else:
        param.grad.add_(stand_in.grad)
    stand_in.grad = None
