"""ShardedOptimizer checkpoints at 2 Gloo ranks: each rank's shard (state_dict) and the consolidated
dict (consolidate_state_dict) each restore an optimizer that, rebuilt from scratch over the saved
parameters, takes the next steps bit-identically to the one that never stopped; a rank given another
rank's shard refuses it."""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn

import lmscale
from dist_util import spawn


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.Linear(32, 16), nn.GELU(), nn.Linear(16, 5))


def param_groups(model):
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights}, {"params": biases, "weight_decay": 0.0}]


def step(model, opt, i):
    g = torch.Generator().manual_seed(100 + i)
    x, y = torch.randn(8, 6, generator=g), torch.randn(8, 5, generator=g)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()  # same batch on every rank: same gradients
    opt.step()


def rebuilt(model, saved_params):
    """A new model and optimizer (fresh state, other hyperparameters) over copies of saved parameters."""
    fresh = copy.deepcopy(model)
    with torch.no_grad():
        for p, s in zip(fresh.parameters(), saved_params):
            p.copy_(s)
    return fresh, lmscale.ShardedOptimizer(param_groups(fresh), torch.optim.AdamW, lr=0.5, weight_decay=0.3)


def state_worker(rank, world_size):
    model = make_model()
    opt = lmscale.ShardedOptimizer(param_groups(model), torch.optim.AdamW, lr=1e-2, weight_decay=0.1)
    for i in range(3):
        step(model, opt, i)
    opt.param_groups[1]["lr"] = 2e-3  # a hyperparameter changed mid-run must be restored too
    shard = copy.deepcopy(opt.state_dict())
    full = opt.consolidate_state_dict(to=0)
    saved_params = [p.detach().clone() for p in model.parameters()]

    owned = set(shard["shard"]["owned"])
    assert set(shard["state"]) == owned and owned, (rank, shard["shard"])
    assert (full is not None) == (rank == 0)
    if rank == 0:
        n_params = sum(len(g["params"]) for g in full["param_groups"])
        assert sorted(full["state"]) == list(range(n_params))
    # Every rank gets the complete dict (a checkpoint file would carry it).
    box = [full]
    dist.broadcast_object_list(box, group_src=0)
    full = box[0]

    for i in range(3, 5):  # the run that never stopped
        step(model, opt, i)
    want = [p.detach().clone() for p in model.parameters()]

    for checkpoint in (shard, full):
        model2, opt2 = rebuilt(model, saved_params)
        opt2.load_state_dict(checkpoint)
        assert opt2.param_groups[1]["lr"] == 2e-3 and opt2.param_groups[0]["weight_decay"] == 0.1
        for i in range(3, 5):
            step(model2, opt2, i)
        for p, w in zip(model2.parameters(), want):
            assert torch.equal(p, w), (rank, "shard" if checkpoint is shard else "consolidated", (p - w).abs().max())

    # Another rank's shard is refused with a message naming the fix.
    others = [None] * world_size
    dist.all_gather_object(others, shard)
    _, opt3 = rebuilt(model, saved_params)
    try:
        opt3.load_state_dict(others[1 - rank])
    except ValueError as e:
        assert "Load each rank's own shard" in str(e), e
    else:
        raise AssertionError("loading another rank's shard did not fail")


def test_state_dict_round_trip_at_2_ranks():
    spawn(state_worker, 2)
