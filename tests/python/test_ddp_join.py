"""lmscale.DistributedDataParallel.join at 2 spawned ranks (Gloo on CPU) with uneven batch counts,
against torch.nn.parallel.DistributedDataParallel.join on the same batches: bit-identical parameters
and buffers on every rank (the sum of a gradient and a joined rank's zeros, divided by the same
number, is exact either way), with the initial or the remaining world size as divisor, with a comm
hook, with a rank that has no batch at all; throw_on_early_termination stops both ranks at the same
step; every run under a timeout, so a hang fails instead of stalling."""
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import lmscale
from dist_util import spawn

DIM, HIDDEN = 6, 10
TIMEOUT_S = 120


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(DIM, HIDDEN)
        self.norm = nn.BatchNorm1d(HIDDEN)  # buffers that change every forward: running mean and var, count
        self.out = nn.Linear(HIDDEN, 1)

    def forward(self, x):  # x (B, DIM) -> (B, 1)
        return self.out(torch.tanh(self.norm(self.inp(x))))


def batches(rank, count):
    g = torch.Generator().manual_seed(77 + rank)
    return [(torch.randn(4, DIM, generator=g), torch.randn(4, 1, generator=g)) for _ in range(count)]


def train(ddp, model, data, join_kwargs):
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
    with ddp.join(**join_kwargs):
        for x, y in data:
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
            opt.zero_grad()


def join_worker(rank, world_size, counts, join_kwargs, hook):
    torch.manual_seed(0)
    ours, theirs = Net(), Net()
    theirs.load_state_dict(ours.state_dict())
    ddp = lmscale.DistributedDataParallel(ours, bucket_cap_mb=1e-6)  # a bucket per parameter
    ref = nn.parallel.DistributedDataParallel(theirs, bucket_cap_mb=1e-6)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
        ref.register_comm_hook(None, hook)
    data = batches(rank, counts[rank])
    train(ddp, ours, data, join_kwargs)
    train(ref, theirs, data, join_kwargs)
    for (name, got), want in zip(ours.state_dict().items(), theirs.state_dict().values()):
        assert torch.equal(got, want), f"rank {rank}: {name} differs from torch DDP's join by " \
            f"{(got.double() - want.double()).abs().max().item()}"
    if not join_kwargs.get("enable", True):
        return  # no join, no final copy: the last forward's buffer updates stay each rank's own, as in torch
    # Every rank holds the same model at the end (the last rank to finish copied its own to all).
    for name, t in ours.state_dict().items():
        gathered = [torch.empty_like(t) for _ in range(world_size)]
        dist.all_gather(gathered, t)
        assert all(torch.equal(gathered[0], g) for g in gathered), f"rank {rank}: {name} differs across ranks"
    if counts[0] != counts[1]:  # the uneven steps trained: not just the common ones
        assert ours.norm.num_batches_tracked.item() == max(counts)


@pytest.mark.parametrize("counts,join_kwargs,hook", [
    ((2, 5), {}, None),
    ((5, 2), {"divide_by_initial_world_size": False}, None),
    ((3, 1), {}, default_hooks.allreduce_hook),
    ((0, 3), {}, None),                      # rank 0 joins before the first step (and its bucket rebuild)
    ((3, 3), {"enable": False}, None),       # even inputs, join switched off
])
def test_join_matches_torch_ddp(counts, join_kwargs, hook):
    spawn(join_worker, 2, counts, join_kwargs, hook, timeout_s=TIMEOUT_S)


def throw_worker(rank, world_size, counts):
    model = Net()
    ddp = lmscale.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    with pytest.raises(RuntimeError) as raised:
        with ddp.join(throw_on_early_termination=True):
            for x, y in batches(rank, counts[rank]):
                nn.functional.mse_loss(ddp(x), y).backward()
                opt.step()
                opt.zero_grad()
                steps += 1
    shorter = counts[rank] == min(counts)
    assert ("ran out of inputs while" if shorter else "another rank ran out of inputs") in str(raised.value)
    assert steps == min(counts), f"rank {rank} took {steps} steps"


def test_throw_on_early_termination_stops_every_rank():
    spawn(throw_worker, 2, (2, 4), timeout_s=TIMEOUT_S)


def nested_worker(rank, world_size):
    ddp = lmscale.DistributedDataParallel(Net())
    with ddp.join():
        with pytest.raises(RuntimeError, match="inside a join already"):
            with ddp.join():
                pass
        ddp(torch.randn(4, DIM)).sum().backward()


def test_nested_join_is_refused():
    spawn(nested_worker, 2, timeout_s=TIMEOUT_S)
