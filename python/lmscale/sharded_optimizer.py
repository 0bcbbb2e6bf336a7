"""lmscale.ShardedOptimizer: ZeRO stage 1 around any torch.optim optimizer class. Each rank builds
the optimizer over the parameters it owns only (so it holds only their state); step() updates
them and broadcasts each parameter from its owner.

Why Python and not the C++ ShardedOptimizer of src/distributed/sharded_optimizer.h: that class wraps libtorch's C++
optimizers (built by an OptimizerFactory), and a Python optimizer class such as torch.optim.AdamW
has no C++ counterpart to hand it. What does carry over is the C++ ownership rule
(lmscale._C.owner_by_size, the one sharded_optimizer.h's mode 1 uses), so both languages shard alike.
Why whole parameters (sharded_optimizer.h's mode 1) and not even slices of a flat buffer (mode 2): a rank then
runs the unmodified optimizer on unmodified parameters, which keeps *any* optimizer bit-identical
to the unsharded one, including ones that are not elementwise (torch.optim.Adafactor's row/column
statistics would change if a parameter were cut in two).

Checkpoints follow torch.optim's format with global parameter indices: ``state_dict()`` is this rank's
shard (state of the parameters it owns), ``consolidate_state_dict(to=0)`` gathers every shard into
one complete dict on one rank (as ``torch.distributed.optim.ZeroRedundancyOptimizer`` does), and
``load_state_dict`` accepts either: each rank keeps the entries of the parameters it owns.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map_only

from ._library import require_distributed as _require_distributed


def _hyperparameters(group):
    """A param group without its tensors (and their names): what the local optimizer's group takes."""
    return {key: value for key, value in group.items() if key not in ("params", "param_names")}


def _optimizer_class(positional: Optional[type], keyword: Optional[type]) -> type:
    """The wrapped optimizer class, given by position or as ZeroRedundancyOptimizer's optimizer_class=."""
    if positional is not None and keyword is not None:
        raise TypeError("lmscale.ShardedOptimizer: the optimizer class was given twice (by position and as "
                        "optimizer_class=); give it once.")
    cls = positional if positional is not None else keyword
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise TypeError("lmscale.ShardedOptimizer needs a torch.optim.Optimizer class: "
                        "ShardedOptimizer(params, torch.optim.AdamW, lr=...) or optimizer_class=torch.optim.AdamW; "
                        f"got {cls!r}.")
    return cls


class ShardedOptimizer(torch.optim.Optimizer):
    """``ShardedOptimizer(params, optimizer_cls, **kwargs)``: a ``torch.optim.Optimizer`` whose rank
    builds ``optimizer_cls(<its shard>, **kwargs)``. ZeroRedundancyOptimizer's spelling works too:
    ``ShardedOptimizer(params, optimizer_class=torch.optim.AdamW, process_group=None, lr=...)``, with
    its ``optim``, ``consolidate_state_dict(to)`` then ``state_dict()`` on rank ``to``,
    ``load_state_dict``, ``add_param_group``, ``zero_grad`` and ``step``; its
    ``parameters_as_bucket_view`` and ``overlap_with_ddp`` are accepted as False only (refused with why).

    - ``params``: tensors or param-group dicts, as for any optimizer; ``add_param_group`` works after
      construction (every rank must make the same calls, in the same order; no communication).
    - Ownership: each parameter belongs to one rank, largest first to the least-loaded rank.
    - ``step()`` expects every rank to hold the same (averaged) ``.grad``, as after
      ``DistributedDataParallel.finish_gradient_synchronization()``; it updates the owned parameters,
      then every rank receives every updated parameter. Collective: every rank calls it.
    - Hyperparameters live in ``self.param_groups`` (complete, with the optimizer's defaults), so LR
      schedulers work; they are copied into the rank's local optimizer at each step.
    - ``process_group`` (default: torch.distributed's default group) picks the ranks.
    - Checkpoints: ``state_dict()`` returns this rank's shard (no communication): torch.optim's format
      with parameters numbered across all groups, ``state`` holding only the owned ones.
      ``consolidate_state_dict(to=0)`` (collective) returns the complete dict on rank ``to`` and None
      elsewhere. ``load_state_dict`` takes this rank's own shard or a complete dict (then it may come
      from another world size); it restores the hyperparameters too.
    - Not supported: optimizers that re-evaluate a closure several times per step (LBFGS); a closure
      passed to step() is called once, before the update.
    """

    def __init__(self, params: Iterable[Any], optimizer_cls: Optional[type[torch.optim.Optimizer]] = None,
                 process_group: Optional[dist.ProcessGroup] = None, parameters_as_bucket_view: bool = False,
                 overlap_with_ddp: bool = False, *, optimizer_class: Optional[type[torch.optim.Optimizer]] = None,
                 **kwargs: Any) -> None:
        optimizer_cls = _optimizer_class(optimizer_cls, optimizer_class)
        if parameters_as_bucket_view:
            raise ValueError(
                "lmscale.ShardedOptimizer: parameters_as_bucket_view=True is not supported: parameters stay "
                "the module's own tensors (each rank updates whole parameters, see the class doc). Leave it False."
            )
        if overlap_with_ddp:
            raise ValueError(
                "lmscale.ShardedOptimizer: overlap_with_ddp=True is not supported (it needs PyTorch DDP's "
                "communication hooks). Leave it False: step() after backward gives the same parameters."
            )
        self._C = _require_distributed(
            "ShardedOptimizer", "torch.distributed.init_process_group(...) on every rank before building it."
        )
        self._group = process_group if process_group is not None else dist.group.WORLD
        self._rank = dist.get_rank(self._group)
        self._load = [0] * dist.get_world_size(self._group)  # bytes owned per rank, across add_param_group
        self._owned_by = []  # (parameter, owner rank in the group) for every parameter, in the order given
        # optimizer_cls over this rank's parameters, with one group per group of self.param_groups
        # (empty where this rank owns nothing), so the two lists match index for index. Built once
        # all initial groups are known: some optimizers (Adagrad) set up state in __init__ only.
        self._local = None
        self._initial_groups = []
        params = list(params)
        if not params:
            raise ValueError("lmscale.ShardedOptimizer: got an empty parameter list.")
        # The optimizer's complete defaults (lr, betas, foreach, ...), so that self.param_groups reads
        # like the unsharded optimizer's even on a rank that owns nothing: ask a probe instance, built
        # on a one-element tensor like the parameters (options such as fused=True check the device).
        first = params[0]["params"] if isinstance(params[0], dict) else params
        while not isinstance(first, torch.Tensor):  # a list of tensors, or of (name, tensor) pairs
            first = list(first)[-1 if isinstance(first, tuple) else 0]
        probe = torch.zeros(1, dtype=first.dtype, device=first.device, requires_grad=True)
        defaults = dict(optimizer_cls([probe], **kwargs).defaults)
        super().__init__(params, defaults)  # calls self.add_param_group once per group
        self._local = optimizer_cls(self._initial_groups, **kwargs)
        del self._initial_groups
        self._consolidated = None  # consolidate_state_dict's result on rank `to`, until the next step()

    @property
    def optim(self) -> torch.optim.Optimizer:
        """ZeroRedundancyOptimizer's name for local_optimizer."""
        return self._local

    @property
    def local_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer_cls instance over this rank's parameters (its groups match param_groups)."""
        return self._local

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)  # validates and fills the defaults
        group = self.param_groups[-1]
        params = group["params"]
        owners, self._load = self._C.owner_by_size([p.numel() * p.element_size() for p in params], self._load)
        self._owned_by += zip(params, owners)
        local = _hyperparameters(group)
        local["params"] = [p for p, owner in zip(params, owners) if owner == self._rank]
        if "param_names" in group:  # named parameters: keep the names of the owned ones
            local["param_names"] = [n for n, owner in zip(group["param_names"], owners) if owner == self._rank]
        if self._local is None:
            self._initial_groups.append(local)
        else:
            self._local.add_param_group(local)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Hyperparameters changed on self.param_groups (a scheduler, a user) reach the update.
        for group, local in zip(self.param_groups, self._local.param_groups):
            local.update(_hyperparameters(group))
        self._local.step()
        self._consolidated = None  # a consolidated checkpoint describes the state before this step
        # Every broadcast is queued before any wait, so NCCL runs them back to back.
        works = [
            dist.broadcast(p.detach(), group=self._group, group_src=owner, async_op=True)
            for p, owner in self._owned_by
        ]
        for work in works:
            work.wait()
        return loss

    # ------------------------------------------------------------------ checkpoints

    def _local_to_global(self) -> list[int]:
        """For each parameter of the local optimizer, in its own numbering order (groups in order),
        its index in this optimizer's numbering (all parameters of all groups, in order)."""
        index = {}
        for group in self.param_groups:
            for p in group["params"]:
                index[id(p)] = len(index)
        return [index[id(p)] for group in self._local.param_groups for p in group["params"]]

    def _owned_indices(self) -> list[int]:
        return sorted(self._local_to_global())

    def _groups_for_checkpoint(self) -> list[dict[str, Any]]:
        groups, start = [], 0
        for group in self.param_groups:
            saved = _hyperparameters(group)
            saved["params"] = list(range(start, start + len(group["params"])))
            start += len(group["params"])
            groups.append(saved)
        return groups

    def state_dict(self) -> dict[str, Any]:
        """After ``consolidate_state_dict(to)``, on rank ``to`` (until the next ``step()``): the complete
        dict, as ZeroRedundancyOptimizer's state_dict() returns it. Otherwise this rank's shard: ``{"state": {index: state of an owned parameter}, "param_groups": [...],
        "shard": {"rank", "world_size", "owned"}}``, indices numbering every parameter of every group.
        No communication; save one file per rank, or use consolidate_state_dict for one file."""
        if self._consolidated is not None:
            return self._consolidated
        local = self._local.state_dict()
        to_global = self._local_to_global()
        return {
            "state": {to_global[i]: s for i, s in local["state"].items()},
            "param_groups": self._groups_for_checkpoint(),
            "shard": {"rank": self._rank, "world_size": len(self._load), "owned": self._owned_indices()},
        }

    def consolidate_state_dict(self, to: int = 0) -> Optional[dict[str, Any]]:
        """Collective (every rank calls it): gathers every rank's shard to rank ``to`` (a rank of the
        optimizer's group) and returns there one complete state dict, tensors on the CPU, that
        ``load_state_dict`` accepts on any number of ranks (or a plain ``optimizer_cls`` accepts as
        is, once the ``"shard"`` key is dropped). Returns None on the other ranks. As with
        ZeroRedundancyOptimizer, ``state_dict()`` on rank ``to`` then returns that dict too, until the
        next ``step()`` (``opt.consolidate_state_dict(0); if rank == 0: torch.save(opt.state_dict(), f)``)."""
        self._consolidated = None
        shard = tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), self.state_dict())
        gathered = [None] * len(self._load) if self._rank == to else None
        dist.gather_object(shard, gathered, group=self._group, group_dst=to)
        if self._rank != to:
            return None
        state = {}
        for piece in gathered:
            state.update(piece["state"])
        self._consolidated = {"state": dict(sorted(state.items())), "param_groups": shard["param_groups"],
                              "shard": None}
        return self._consolidated

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a checkpoint: this rank's own shard (from state_dict()) or a complete dict (from
        consolidate_state_dict). Hyperparameters go to every group; optimizer state to the owned
        parameters. No communication."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
            len(saved["params"]) != len(group["params"]) for saved, group in zip(groups, self.param_groups)
        ):
            raise ValueError(
                "lmscale.ShardedOptimizer.load_state_dict: the checkpoint has groups of sizes "
                f"{[len(g['params']) for g in groups]}, this optimizer "
                f"{[len(g['params']) for g in self.param_groups]}. Build the optimizer over the same "
                "parameters, in the same order and groups, as the one that saved it."
            )
        shard = state_dict.get("shard")
        if shard is not None and (shard["world_size"] != len(self._load) or shard["owned"] != self._owned_indices()):
            raise ValueError(
                f"lmscale.ShardedOptimizer.load_state_dict: this is the shard of rank {shard['rank']} of "
                f"{shard['world_size']}, but rank {self._rank} of {len(self._load)} owns other parameters. "
                "Load each rank's own shard, or a complete dict from consolidate_state_dict()."
            )
        for group, saved in zip(self.param_groups, groups):
            group.update(_hyperparameters(saved))
        local = self._local.state_dict()  # its own numbering, to fill in
        state = state_dict["state"]
        local["state"] = {i: state[g] for i, g in enumerate(self._local_to_global()) if g in state}
        for group, local_group in zip(self.param_groups, local["param_groups"]):
            local_group.update(_hyperparameters(group))
        self._local.load_state_dict(local)
