"""lmscale.DistributedDataParallel as PyTorch users know it, at 2 Gloo ranks: gradient accumulation
with no_sync() equals one big batch, the `module` attribute, and a torch.compile-d wrapped model
training like the eager one."""
import torch
import torch.nn as nn

import lmscale
from dist_util import spawn

MICRO = 3  # micro-batches per rank per step
STEPS = 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.frozen = nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        return self.out(torch.tanh(self.frozen(torch.tanh(self.embed(x)))))


def global_batch(step, world_size):
    g = torch.Generator().manual_seed(500 + step)
    n = world_size * MICRO
    return torch.randn(n, 5, 6, generator=g), torch.randn(n, 5, 4, generator=g)


def sse(model, x, y, denominator):
    return ((model(x) - y) ** 2).sum() / denominator


def check_close(model, reference, rank, what):
    for (name, p), r in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6, msg=lambda m: f"rank {rank} {what} {name}: {m}")


def no_sync_worker(rank, world_size, set_to_none):
    torch.manual_seed(0)
    reference = Net()
    model = Net()
    model.load_state_dict(reference.state_dict())
    ddp = lmscale.DistributedDataParallel(model, bucket_size_mb=1e-4)  # one bucket per parameter
    assert ddp.module is model
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = global_batch(step, world_size)
        total = x.shape[0]
        # Reference: one process, the whole global batch in one backward.
        ref_opt.zero_grad()
        sse(reference, x, y, total).backward()
        ref_opt.step()
        # DDP: this rank's MICRO samples, one per backward, all but the last inside no_sync. Each
        # rank's losses are scaled by world_size: DDP averages over ranks, the reference sums.
        # If a no_sync backward marked a parameter ready, the last backward would fail ("received
        # its gradient twice in one step"): passing shows no_sync kept the reducer out.
        opt.zero_grad(set_to_none=set_to_none)
        for j in range(MICRO):
            i = rank * MICRO + j
            if j < MICRO - 1:
                with ddp.no_sync():
                    sse(ddp, x[i:i + 1], y[i:i + 1], total / world_size).backward()
            else:
                sse(ddp, x[i:i + 1], y[i:i + 1], total / world_size).backward()
        ddp.finish_gradient_synchronization()
        opt.step()
        check_close(model, reference, rank, f"step {step}")
    assert model.frozen.weight.grad is None


def compiled_worker(rank, world_size):
    torch.manual_seed(0)
    reference = Net()
    model = Net()
    model.load_state_dict(reference.state_dict())
    ddp = lmscale.DistributedDataParallel(torch.compile(model, backend="aot_eager", fullgraph=True))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = global_batch(step, world_size)
        ref_opt.zero_grad()
        sse(reference, x, y, x.shape[0]).backward()
        ref_opt.step()
        mine = slice(rank * MICRO, (rank + 1) * MICRO)
        opt.zero_grad(set_to_none=False)
        sse(ddp, x[mine], y[mine], x.shape[0] / world_size).backward()
        ddp.finish_gradient_synchronization()
        opt.step()
        check_close(model, reference, rank, f"compiled, step {step}")


def test_no_sync_accumulation_equals_one_big_batch():
    spawn(no_sync_worker, 2, False)


def test_no_sync_with_grads_set_to_none():
    spawn(no_sync_worker, 2, True)


def test_compiled_wrapped_model_trains_like_eager():
    spawn(compiled_worker, 2)
