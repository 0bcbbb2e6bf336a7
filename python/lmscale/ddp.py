"""lmscale.DistributedDataParallel: an nn.Module wrapper whose gradient hooks, buckets and
collectives are the C++ DDP of src/distributed/ddp.h (lmscale._C.Reducer), handed the Python process group.
Python only lists the module's parameters and buffers and forwards calls; the ShardedOptimizer that
often follows it is in sharded_optimizer.py."""
import torch
import torch.distributed as dist

from . import _require_distributed


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
    """

    def __init__(self, module, bucket_size_mb=None, process_group=None):
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
        # module.parameters() lists each parameter once (a tied weight too), in the module's own
        # order; the reducer's bucket_assignment indexes this list.
        self._reducer = C.Reducer(
            list(module.parameters()), list(module.buffers()), process_group,
            None if bucket_size_mb is None else float(bucket_size_mb),
        )

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def finish_gradient_synchronization(self):
        """Call after every backward, before the optimizer: launches what backward did not (e.g.
        for parameters unused this step, which count as zero), waits, and returns with averaged .grad."""
        self._reducer.finish_gradient_synchronization()

    @property
    def bucket_assignment(self):
        """Indices into list(self.module.parameters()) per bucket, in launch order (trainable only)."""
        return self._reducer.bucket_assignment
