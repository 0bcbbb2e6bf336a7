"""lmscale.DistributedDataParallel: an nn.Module wrapper whose gradient hooks, buckets and
collectives are the C++ DDP of src/distributed/ddp.h (lmscale._C.Reducer), handed the Python process group.
Python lists the module's parameters and buffers, takes PyTorch's DDP arguments, queues the end of
synchronisation at the end of backward, forwards calls and implements no_sync(); comm hooks'
GradBucket is in ddp_comm_hook.py, join()'s protocol in ddp_join.py, and the ShardedOptimizer that
often follows it in sharded_optimizer.py."""
from __future__ import annotations

import contextlib
import functools
import weakref
from typing import Any, Iterator, Optional, Sequence

import torch
import torch.distributed as dist

from ._library import require_distributed as _require_distributed
from .ddp_comm_hook import check_comm_hook as _check_comm_hook
from .ddp_comm_hook import run_comm_hook as _run_comm_hook
from .ddp_join import Join

# PyTorch's default bucket cap (torch.nn.parallel.DistributedDataParallel's bucket_cap_mb).
DEFAULT_BUCKET_CAP_MB = 25.0
_DEFAULT = object()  # "not given", so that an explicit None (one all-reduce per parameter) differs


class DistributedDataParallel(torch.nn.Module):
    """Data parallelism for any ``nn.Module``, on the default ``torch.distributed`` group or a given one
    (Gloo for CPU modules, NCCL for CUDA modules), written as with ``torch.nn.parallel.DistributedDataParallel``:

        ddp = lmscale.DistributedDataParallel(model, device_ids=[local_rank])
        loss_fn(ddp(x), y).backward()   # .grad holds the average over ranks when backward returns
        opt.step()

    - Synchronisation finishes inside ``backward()``: the first gradient hook of a backward queues
      ``finish_gradient_synchronization()`` on autograd's end-of-backward callback, so ``.grad`` is
      averaged when ``backward()`` returns. Calling ``finish_gradient_synchronization()`` yourself
      (the explicit loop of lmscale's C++ API and of CS336) is still right: after a backward it has
      already run, so the call returns at once; it never communicates twice for one backward.
    - Buckets: ``bucket_cap_mb`` (PyTorch's name) or ``bucket_size_mb`` (lmscale's), default 25 MB as in
      PyTorch: buckets of at most that many MB (2**20 bytes), each launched in order when its last
      gradient lands (``0`` = one parameter per bucket, ``float('inf')`` = one bucket). ``None``: one
      all-reduce per parameter, launched as soon as its gradient lands.
    - At construction (a collective: every rank must wrap the same model) every parameter and buffer,
      frozen ones too, is copied from rank 0; ranks disagreeing on shapes or dtypes fail with a message.
    - A tied weight is reduced once, after all its uses; parameters with ``requires_grad=False`` are
      never reduced; a parameter that gets no gradient in a backward counts as zero (what PyTorch's
      ``find_unused_parameters=True`` gives, and no error where PyTorch's ``False`` would raise one).
    - Gradients live in the reducer's bucket buffers (PyTorch's ``gradient_as_bucket_view=True``):
      ``optimizer.zero_grad(set_to_none=False)`` keeps them there, so backward accumulates in place with
      no copy (``set_to_none=True`` works too, at the price of one copy per parameter per step).
    - Gradient accumulation: forward and backward inside ``with ddp.no_sync():`` communicate nothing
      and accumulate into ``.grad``; the first backward outside it synchronises the sum, as with
      PyTorch's DDP.
    - ``ddp.module`` is the wrapped module (state_dict keys gain the ``module.`` prefix, as in PyTorch).
      The wrapped module may be ``torch.compile``-d (``DistributedDataParallel(torch.compile(model))``),
      and the wrapper itself compiles: the reducer's hooks run in the autograd engine, outside the graph.

    PyTorch's arguments, all accepted by the same names and positions:

    - ``device_ids``: ``None`` or the one device the module is on (``[rank]``, ``[torch.device]``);
      one device per process is the only layout (PyTorch's too); another device is refused.
    - ``output_device``: ``None`` or the module's device; outputs stay where the module puts them.
    - ``dim``: 0 only (it picks how PyTorch's single-process multi-device mode splits inputs, a mode
      PyTorch itself removed).
    - ``broadcast_buffers`` (default True): buffers are copied from rank 0 before every forward, as
      in PyTorch; False keeps each rank's own.
    - ``init_sync`` (default True): parameters and buffers are copied from rank 0 at construction;
      False is refused (the C++ DDP always verifies and copies them, a collective).
    - ``process_group``: the ranks that train this model; default: torch.distributed's default group.
    - ``find_unused_parameters``: True or False, both honoured by the behaviour above (unused
      parameters count as zero, with no extra pass over the graph).
    - ``check_reduction``: deprecated in PyTorch and ignored there; accepted and ignored.
    - ``gradient_as_bucket_view``: lmscale's default is True (``.grad`` is a view of its bucket: no
      copy, no second gradient-sized allocation); False (PyTorch's default) is honoured: after each
      synchronisation every ``.grad`` is replaced by a tensor of its own, at the price of that copy.
    - ``static_graph``: accepted (a hint in PyTorch; lmscale's buckets follow the first step's
      gradient order whatever the value).
    Any other keyword of PyTorch's DDP (``mixed_precision``, ``device_mesh``, ...) is refused by name.
    """

    def __init__(self, module: torch.nn.Module, device_ids: Optional[Sequence[Any]] = None,
                 output_device: Optional[Any] = None, dim: int = 0, broadcast_buffers: bool = True,
                 init_sync: bool = True, process_group: Optional[dist.ProcessGroup] = None,
                 bucket_cap_mb: Any = _DEFAULT, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = True,
                 static_graph: bool = False, *, bucket_size_mb: Any = _DEFAULT, **unsupported: Any) -> None:
        super().__init__()
        if unsupported:
            raise TypeError(
                f"lmscale.DistributedDataParallel: {', '.join(sorted(unsupported))} "
                f"{'is' if len(unsupported) == 1 else 'are'} not supported (lmscale's DDP takes PyTorch's "
                "device_ids, output_device, dim, broadcast_buffers, init_sync, process_group, bucket_cap_mb, "
                "find_unused_parameters, check_reduction, gradient_as_bucket_view and static_graph). For "
                "mixed precision, run the forward under torch.autocast instead."
            )
        bucket_mb = _bucket_cap(bucket_cap_mb, bucket_size_mb)
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
        _check_pytorch_options(module, device_ids, output_device, dim, init_sync)
        self.module = module
        self.process_group = process_group
        self.bucket_size_mb = bucket_mb
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.static_graph = bool(static_graph)
        self.require_backward_grad_sync = True  # False inside no_sync(), as PyTorch's DDP names it
        self._device = _module_device(module)  # where the join's status vector lives (Gloo: CPU, NCCL: CUDA)
        self._join: Optional[Join] = None  # the active join() context, if any
        # module.parameters() lists each parameter once (a tied weight too), in the module's own
        # order; the reducer's bucket_assignment indexes this list.
        params = list(module.parameters())
        self._buffers_to_sync = list(module.buffers())
        self._reducer = C.Reducer(params, self._buffers_to_sync, process_group, bucket_mb)
        # Whether a backward has handed the reducer gradients since the last finish; set by the first
        # gradient hook of a backward, which queues the finish for the end of that backward.
        self._sync_pending = False
        # The hook holds the wrapper weakly: a model wrapped again later does not call a dead reducer.
        hook = functools.partial(_on_gradient_accumulated, weakref.ref(self))
        self._trainable = [p for p in params if p.requires_grad]
        for p in self._trainable:
            p.register_post_accumulate_grad_hook(hook)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        source = 0
        if self._join is not None:
            # Inside join(): tell the ranks that ran out what this forward (and its backward) will issue.
            source = self._join.notify_not_joined(torch.is_grad_enabled() and self.require_backward_grad_sync)
        if self._broadcasts_buffers():
            # As PyTorch's DDP: every rank's forward sees rank 0's buffers (running statistics); inside a
            # join, those of the highest rank still training.
            self._broadcast_buffers_from(source)
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
        """Returns once every ``.grad`` holds the average over ranks: launches what backward did not
        (parameters unused this step count as zero) and waits. Runs by itself at the end of every
        backward that produced gradients; calling it again, or before any backward, does nothing."""
        if not self._sync_pending:
            return
        self._sync_pending = False
        self._reducer.finish_gradient_synchronization()
        if not self.gradient_as_bucket_view:
            with torch.no_grad():
                for p in self._trainable:
                    if p.grad is not None:
                        p.grad = p.grad.clone()

    def register_comm_hook(self, state: object, hook: Any) -> None:
        """Runs ``hook(state, bucket) -> torch.futures.Future[torch.Tensor]`` for every bucket once its
        gradients are ready, instead of the built-in averaging all-reduce (PyTorch's contract, so
        ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook``, ``fp16_compress_hook``,
        ``bf16_compress_hook`` and their wrappers run unchanged). ``bucket`` is an
        lmscale.ddp_comm_hook.GradBucket: ``buffer()`` (the flat gradients), ``gradients()``,
        ``parameters()``, ``index()``, ``is_last()``, ``set_buffer()``. The future's tensor, once the
        backward ends, is written into the bucket (cast to its dtype) and so into every ``.grad``.
        The gradients are not divided by the world size first: the hook averages (PyTorch's hooks do).
        Register once, before the first backward; the hook runs on the autograd thread, with the GIL
        taken for it. An exception in the hook fails that backward, and the model should not be
        trained on afterwards (the ranks' collectives no longer match)."""
        _check_comm_hook(hook)
        self._reducer.register_comm_hook(functools.partial(_run_comm_hook, hook, state))

    def join(self, divide_by_initial_world_size: bool = True, enable: bool = True,
             throw_on_early_termination: bool = False) -> Join:
        """A context manager for ranks with different numbers of batches (PyTorch's
        ``DistributedDataParallel.join``): a rank whose loop inside ``with ddp.join():`` ends first
        waits at the end of the block and issues the collectives of every forward and backward the
        others still run, contributing zero gradients, so no rank hangs. When all are done, every rank
        gets the parameters (and, with ``broadcast_buffers``, buffers) of the last rank to finish.

        - ``divide_by_initial_world_size`` (default True): gradients are summed over the ranks still
          training and divided by the world size at the start, so every sample weighs the same in every
          step; False divides by the ranks still training (a full-size step from fewer samples).
          A registered comm hook divides as it likes and ignores this, as in PyTorch.
        - ``enable=False``: the context does nothing (inputs known to be even).
        - ``throw_on_early_termination=True``: the first rank to run out raises instead of waiting, and
          every other rank raises a RuntimeError in its next forward, so all stop at the same step.

        Only this model's collectives are matched: any other collective in the loop (a loss all-reduce,
        lmscale.ShardedOptimizer's step) still needs every rank. A forward with gradients enabled must
        be followed by its backward, as the joined ranks shadow both."""
        return Join(self, divide_by_initial_world_size, enable, throw_on_early_termination)

    def _broadcasts_buffers(self) -> bool:
        return self.broadcast_buffers and bool(self._buffers_to_sync)

    def _broadcast_buffers_from(self, source: int) -> None:
        self._broadcast(self._buffers_to_sync, source)

    def _broadcast(self, tensors: list[torch.Tensor], source: int) -> None:
        """Copies `tensors` from group rank `source` to every rank (coalesced into few collectives)."""
        dist._broadcast_coalesced(self.process_group, tensors, _BROADCAST_BUCKET_BYTES, source)

    @property
    def bucket_assignment(self) -> list[list[int]]:
        """Indices into list(self.module.parameters()) per bucket, in launch order (trainable only)."""
        return self._reducer.bucket_assignment


def _on_gradient_accumulated(ddp_ref: "weakref.ref[DistributedDataParallel]", _param: torch.Tensor) -> None:
    """A parameter's gradient landed: the first one of a backward queues the finish for the end of
    that backward (autograd's end-of-backward callback, where PyTorch's Reducer finalises too)."""
    ddp = ddp_ref()
    if ddp is None or ddp._sync_pending:
        return
    ddp._sync_pending = True
    torch.autograd.Variable._execution_engine.queue_callback(ddp.finish_gradient_synchronization)


def _bucket_cap(bucket_cap_mb: Any, bucket_size_mb: Any) -> Optional[float]:
    """The bucket cap in MB (None: one all-reduce per parameter) from PyTorch's or lmscale's name."""
    if bucket_cap_mb is not _DEFAULT and bucket_size_mb is not _DEFAULT:
        raise TypeError("lmscale.DistributedDataParallel: give bucket_cap_mb (PyTorch's name) or bucket_size_mb "
                        "(lmscale's), not both; they mean the same.")
    cap = bucket_size_mb if bucket_cap_mb is _DEFAULT else bucket_cap_mb
    if cap is _DEFAULT:
        return DEFAULT_BUCKET_CAP_MB
    return None if cap is None else float(cap)


def _module_device(module: torch.nn.Module) -> torch.device:
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


def _check_pytorch_options(module: torch.nn.Module, device_ids: Optional[Sequence[Any]], output_device: Any,
                           dim: int, init_sync: bool) -> None:
    """PyTorch's placement arguments: honoured where they describe what lmscale does (one device per
    process, outputs where the module leaves them), refused with the reason otherwise."""
    device = _module_device(module)
    if device_ids is not None:
        ids = list(device_ids)
        if device.type == "cpu":
            raise ValueError(f"lmscale.DistributedDataParallel: device_ids={ids} given for a module on the CPU; "
                             "leave device_ids out (None) for CPU modules, as PyTorch requires.")
        wanted = [torch.device(device.type, i) if isinstance(i, int) else torch.device(i) for i in ids]
        if wanted != [device]:
            raise ValueError(
                f"lmscale.DistributedDataParallel: device_ids={ids}, but the module is on {device}. lmscale runs "
                "one device per process (as PyTorch recommends): move the module with .to(device_ids[0]) "
                "first, or pass device_ids=[its device]."
            )
    if output_device is not None:
        out = torch.device(device.type, output_device) if isinstance(output_device, int) else torch.device(output_device)
        if out != device:
            raise ValueError(f"lmscale.DistributedDataParallel: output_device={output_device}, but the module is on "
                             f"{device}; outputs stay on the module's device. Leave output_device out or move "
                             "the outputs yourself.")
    if dim != 0:
        raise ValueError(f"lmscale.DistributedDataParallel: dim={dim}: only 0 is supported (dim picks how PyTorch's "
                         "removed single-process multi-device mode splits inputs; one device per process "
                         "never splits them).")
    if not init_sync:
        raise ValueError("lmscale.DistributedDataParallel: init_sync=False is not supported: construction always "
                         "checks that every rank holds the same model and copies rank 0's weights. Leave it True.")


# Bytes per coalesced buffer broadcast before a forward (PyTorch's DDP uses 250 MB too).
_BROADCAST_BUCKET_BYTES = 250 * 2**20


@torch.no_grad()
def _add_grad_into(param: torch.Tensor, stand_in: torch.Tensor) -> None:
    """A no_sync stand-in's gradient, added into its parameter's .grad (in place when .grad exists,
    which keeps a bucket view a bucket view) and dropped from the stand-in."""
    if param.grad is None:
        param.grad = stand_in.grad
    else:
        param.grad.add_(stand_in.grad)
    stand_in.grad = None
