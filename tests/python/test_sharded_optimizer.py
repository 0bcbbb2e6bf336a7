"""lmscale.ShardedOptimizer at 2 spawned ranks against the unsharded torch.optim optimizer, bit for
bit in fp32 over 10 steps: torch.optim.AdamW with two param groups (as tensors and as dicts), a
group added after construction, and an LR scheduler; other torch.optim classes; and under
lmscale.DistributedDataParallel. On 2 GPUs the AdamW check runs again over NCCL."""
import copy

import pytest
import torch
import torch.nn as nn

import lmscale
from dist_util import spawn

STEPS = 10


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 5))


def batch(step, rank_slice=None, device="cpu"):
    g = torch.Generator().manual_seed(77 + step)
    x, y = torch.randn(8, 6, generator=g), torch.randn(8, 5, generator=g)
    if rank_slice is not None:
        x, y = x[rank_slice], y[rank_slice]
    return x.to(device), y.to(device)


def groups(model, extra):
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() == 2)]
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0, "lr": 3e-3}], {"params": [extra], "lr": 0.05}


def train_pair(optimizer_cls, kwargs, device, with_groups, rank, world_size, late_group=True):
    """Trains one model with optimizer_cls and a copy with ShardedOptimizer(optimizer_cls) on the same
    batches; asserts every parameter is bit-identical after every step."""
    model = make_model().to(device)
    extra = nn.Parameter(torch.randn(5, device=device))  # joins the optimizers at step 4
    model_s, extra_s = copy.deepcopy(model), copy.deepcopy(extra)
    if with_groups:
        (g, late), (g_s, late_s) = groups(model, extra), groups(model_s, extra_s)
    else:
        g, late, g_s, late_s = list(model.parameters()), {"params": [extra]}, list(model_s.parameters()), {"params": [extra_s]}
    opt = optimizer_cls(g, **kwargs)
    sharded = lmscale.ShardedOptimizer(g_s, optimizer_cls, **kwargs)
    assert isinstance(sharded, torch.optim.Optimizer)
    assert [len(a["params"]) for a in opt.param_groups] == [len(b["params"]) for b in sharded.param_groups]
    for a, b in zip(opt.param_groups, sharded.param_groups):  # the same hyperparameters, complete
        assert {k: v for k, v in a.items() if k != "params"} == {k: v for k, v in b.items() if k != "params"}
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    sched_s = torch.optim.lr_scheduler.StepLR(sharded, step_size=3, gamma=0.5)
    for step in range(STEPS):
        if step == 4 and late_group:
            opt.add_param_group(late)
            sharded.add_param_group(late_s)
        x, y = batch(step, device=device)
        for m, e in ((model, extra), (model_s, extra_s)):
            nn.functional.mse_loss(m(x) + e, y).backward()
        opt.step()
        sharded.step()
        sched.step()
        sched_s.step()
        opt.zero_grad()
        sharded.zero_grad()
        for (name, a), b in zip(model.named_parameters(), model_s.parameters()):
            assert torch.equal(a, b), f"rank {rank} {optimizer_cls.__name__} step {step}: {name} differs"
        assert torch.equal(extra, extra_s), f"rank {rank} {optimizer_cls.__name__} step {step}: extra differs"
    # Sharded state: this rank holds state for its own parameters only, and the ranks split them all.
    n_params = len(list(model.parameters())) + int(late_group)
    held = len(sharded.local_optimizer.state) if sharded.local_optimizer else 0
    assert 0 < held < n_params or world_size == 1, (rank, held, n_params)
    counts = [None] * world_size
    torch.distributed.all_gather_object(counts, held)
    assert sum(counts) == n_params, counts


OPTIMIZERS = [
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.Adam, dict(lr=1e-2, amsgrad=True)),
    (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    (torch.optim.RMSprop, dict(lr=1e-3, centered=True)),
    (torch.optim.Adagrad, dict(lr=0.1)),
    (torch.optim.NAdam, dict(lr=1e-2)),
    (torch.optim.Adafactor, dict(lr=1e-2)),  # not elementwise: row/column statistics
]


def adamw_worker(rank, world_size, device_kind):
    device = f"cuda:{rank}" if device_kind == "cuda" else "cpu"
    train_pair(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), device, True, rank, world_size)
    # Plain tensors (not dicts), default hyperparameters.
    train_pair(torch.optim.AdamW, {}, device, False, rank, world_size)


def other_optimizers_worker(rank, world_size):
    for cls, kwargs in OPTIMIZERS[1:]:
        # torch's Adagrad sets up its state in __init__ only: add_param_group after construction
        # fails for it unsharded too.
        train_pair(cls, kwargs, "cpu", True, rank, world_size, late_group=cls is not torch.optim.Adagrad)


def with_ddp_worker(rank, world_size):
    """DDP + AdamW vs DDP + ShardedOptimizer(AdamW): the same averaged gradients, so bit-identical."""
    model = make_model()
    model_s = copy.deepcopy(model)
    ddp, ddp_s = lmscale.DistributedDataParallel(model), lmscale.DistributedDataParallel(model_s, bucket_size_mb=1)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    sharded = lmscale.ShardedOptimizer(ddp_s.parameters(), torch.optim.AdamW, lr=1e-2)
    mine = slice(4 * rank, 4 * rank + 4)
    for step in range(STEPS):
        x, y = batch(step, mine)
        for d, o in ((ddp, opt), (ddp_s, sharded)):
            nn.functional.mse_loss(d(x), y).backward()
            d.finish_gradient_synchronization()
            o.step()
            o.zero_grad(set_to_none=False)
        for (name, a), b in zip(model.named_parameters(), model_s.parameters()):
            assert torch.equal(a, b), f"rank {rank} step {step}: {name} differs"


def test_adamw_bit_identical_over_10_steps_at_2_ranks():
    spawn(adamw_worker, 2, "cpu")


def test_any_torch_optim_class_bit_identical():
    spawn(other_optimizers_worker, 2)


def test_with_ddp_bit_identical():
    spawn(with_ddp_worker, 2)


@pytest.mark.gpu(n=2)
def test_adamw_bit_identical_nccl():
    spawn(adamw_worker, 2, "cuda", backend="nccl")
