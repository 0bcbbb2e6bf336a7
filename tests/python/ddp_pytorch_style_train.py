"""Run by test_ddp_pytorch_style.py under torchrun (gloo): the training loop of a PyTorch DDP user,
`loss.backward(); opt.step()` with no explicit synchronisation call, once with lmscale's DDP (+ its
ShardedOptimizer spelled as ZeroRedundancyOptimizer) and once with PyTorch's DDP (+ ZeRO), from the
same initial weights on the same per-rank batches. Rank 0 writes both final weights, and every rank
checks its weights equal rank 0's."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer

import lmscale

STEPS = 4


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(13, 16), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 13))


def train(wrap, make_opt):
    rank = dist.get_rank()
    torch.manual_seed(1 + rank)  # each rank its own batches
    net = model()
    ddp = wrap(net)
    opt = make_opt(ddp.parameters())
    for _ in range(STEPS):
        tokens = torch.randint(13, (4, 9))
        loss = nn.functional.cross_entropy(ddp(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()  # no finish_gradient_synchronization(): backward finishes it, as PyTorch's DDP
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


def main(out_path):
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    ours = train(lambda m: lmscale.DistributedDataParallel(m, bucket_cap_mb=25, find_unused_parameters=False),
                 lambda ps: lmscale.ShardedOptimizer(ps, optimizer_class=torch.optim.AdamW, lr=1e-2))
    theirs = train(lambda m: nn.parallel.DistributedDataParallel(m, bucket_cap_mb=25),
                   lambda ps: ZeroRedundancyOptimizer(ps, optimizer_class=torch.optim.AdamW, lr=1e-2))
    for name, weights in (("lmscale", ours), ("torch", theirs)):
        for p in weights:  # every rank holds rank 0's weights
            ref = p.clone()
            dist.broadcast(ref, 0)
            assert torch.equal(p, ref), f"{name}: rank {dist.get_rank()} differs from rank 0 by {(p - ref).abs().max()}"
    if dist.get_rank() == 0:
        torch.save({"lmscale": ours, "torch": theirs}, out_path)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # skip the interpreter teardown (see dist_util._entry)


if __name__ == "__main__":
    main(sys.argv[1])
