"""lmscale.DistributedDataParallel.register_comm_hook at 2 spawned ranks (Gloo on CPU) against
torch.nn.parallel.DistributedDataParallel with the same hook: PyTorch's allreduce, fp16 and bf16
compression hooks and a compression wrapper give bit-identical parameters after every step (each
hook works element by element: x/2 rounded, summed over two ranks, whose sum is exact in any order,
so the two reducers' different bucket layouts cannot change a bit); a recording hook sees every
bucket once per step, in order, with views that tile the buffer; misuse fails with its message."""
import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import lmscale
from dist_util import spawn

VOCAB, DIM, HIDDEN = 13, 8, 16
STEPS = 3
TIMEOUT_S = 120


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.block = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, DIM))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):  # tokens (B, T) -> logits (B, T, V)
        x = self.embed(tokens)
        return self.head(x + self.block(x))


def loss_fn(model, tokens):
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def local_batch(step, rank):
    g = torch.Generator().manual_seed(4321 + 10 * step + rank)
    return torch.randint(0, VOCAB, (3, 7), generator=g)


def bf16_hook(state, bucket):
    # torch's DDP refuses bf16_compress_hook by name where NCCL is older than 2.10; the same hook
    # under another name runs everywhere.
    return default_hooks.bf16_compress_hook(state, bucket)


HOOKS = {
    "allreduce": default_hooks.allreduce_hook,
    "fp16": default_hooks.fp16_compress_hook,
    "bf16": bf16_hook,
    "bf16-wrapper": default_hooks.bf16_compress_wrapper(default_hooks.allreduce_hook),  # set_buffer
}


def same_hook_worker(rank, world_size, hook_name, bucket_mb):
    hook = HOOKS[hook_name]
    torch.manual_seed(0)
    ours, theirs = TinyLM(), TinyLM()
    theirs.load_state_dict(ours.state_dict())
    ddp = lmscale.DistributedDataParallel(ours, bucket_cap_mb=bucket_mb)
    ref = nn.parallel.DistributedDataParallel(theirs, bucket_cap_mb=bucket_mb)
    ddp.register_comm_hook(None, hook)
    ref.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ours.parameters(), lr=0.3, momentum=0.9)
    ref_opt = torch.optim.SGD(theirs.parameters(), lr=0.3, momentum=0.9)
    for step in range(STEPS):
        tokens = local_batch(step, rank)
        loss_fn(ddp, tokens).backward()
        loss_fn(ref, tokens).backward()
        for (name, p), r in zip(ours.named_parameters(), theirs.parameters()):
            assert torch.equal(p.grad, r.grad), f"rank {rank} step {step} {hook_name}: {name}.grad differs " \
                f"by {(p.grad - r.grad).abs().max().item()}"
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        for (name, p), r in zip(ours.named_parameters(), theirs.parameters()):
            assert torch.equal(p, r), f"rank {rank} step {step} {hook_name}: {name} differs"
    # The hook replaced the averaging: a compression hook's rounding shows in the gradients.
    assert ddp._reducer.steps == STEPS


@pytest.mark.parametrize("hook_name,bucket_mb", [
    ("allreduce", 25.0), ("allreduce", 1e-6), ("fp16", 1e-6), ("bf16", 25.0), ("bf16-wrapper", 1e-6),
])
def test_hook_matches_torch_ddp(hook_name, bucket_mb):
    spawn(same_hook_worker, 2, hook_name, bucket_mb, timeout_s=TIMEOUT_S)


def recording_worker(rank, world_size):
    torch.manual_seed(0)
    model = TinyLM()
    ddp = lmscale.DistributedDataParallel(model, bucket_cap_mb=300 / 2**20)  # several buckets
    seen = []

    def hook(state, bucket):
        state.append((bucket.index(), bucket.is_last(), bucket.buffer().numel()))
        grads, params = bucket.gradients(), bucket.parameters()
        assert [g.shape for g in grads] == [p.shape for p in params]
        assert sum(g.numel() for g in grads) == bucket.buffer().numel()
        for g in grads:  # views of the flat buffer
            assert g.untyped_storage().data_ptr() == bucket.buffer().untyped_storage().data_ptr()
        fut = torch.futures.Future()  # no communication: each rank keeps its own gradient, undivided
        fut.set_result(bucket.buffer())
        return fut

    ddp.register_comm_hook(seen, hook)
    n = len(ddp.bucket_assignment)  # before the rebuild that follows the first step
    tokens = local_batch(0, rank)
    loss_fn(ddp, tokens).backward()
    assert n > 1, ddp.bucket_assignment
    assert [(i, last) for i, last, _ in seen] == [(i, i == n - 1) for i in range(n)], seen
    assert sum(numel for *_, numel in seen) == sum(p.numel() for p in model.parameters())
    # Undivided and unreduced: exactly this rank's own gradient.
    plain = TinyLM()
    plain.load_state_dict(model.state_dict())
    loss_fn(plain, tokens).backward()
    for p, r in zip(model.parameters(), plain.parameters()):
        assert torch.equal(p.grad, r.grad)


def test_hook_sees_every_bucket_once_in_order():
    spawn(recording_worker, 2, timeout_s=TIMEOUT_S)


def registration_errors_worker(rank, world_size):
    ddp = lmscale.DistributedDataParallel(TinyLM())
    with pytest.raises(TypeError, match="must be callable"):
        ddp.register_comm_hook(None, 42)
    with pytest.raises(TypeError, match=r"cannot be called as hook\(state, bucket\)"):
        ddp.register_comm_hook(None, lambda bucket: None)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    with pytest.raises(RuntimeError, match="registered only once"):
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)

    late = lmscale.DistributedDataParallel(TinyLM())
    loss_fn(late, local_batch(0, rank)).backward()
    with pytest.raises(RuntimeError, match="before the first backward"):
        late.register_comm_hook(None, default_hooks.allreduce_hook)


def test_registration_errors():
    spawn(registration_errors_worker, 2, timeout_s=TIMEOUT_S)


def not_a_future(state, bucket):
    return bucket.buffer()


def wrong_size(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(torch.zeros(1))
    return fut


def bad_hook_worker(rank, world_size, hook, message):
    ddp = lmscale.DistributedDataParallel(TinyLM())
    ddp.register_comm_hook(None, hook)
    with pytest.raises(RuntimeError, match=message):
        loss_fn(ddp, local_batch(0, rank)).backward()


@pytest.mark.parametrize("hook,message", [
    (not_a_future, "returned Tensor for bucket 0; it must return a torch.futures.Future"),
    (wrong_size, "has 1 elements, the bucket"),
])
def test_bad_hook_fails_the_backward(hook, message):
    spawn(bad_hook_worker, 2, hook, message, timeout_s=TIMEOUT_S)
