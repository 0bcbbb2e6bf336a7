"""lmscale.DistributedDataParallel at 2 spawned ranks (Gloo on CPU; NCCL on 2 GPUs when present)
against single-process training on the global batch: both modes (per-parameter, bucketed) and
bucket caps below any tensor / a few tensors / everything, on a model with a frozen parameter, a
frozen bias inside a submodule, a tied weight and a buffer, built with different weights per rank."""
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import lmscale
from dist_util import spawn

VOCAB, DIM, HIDDEN = 11, 8, 16
STEPS = 3


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.block = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, DIM))
        self.block[2].bias.requires_grad_(False)                        # frozen bias in a submodule
        self.shift = nn.Parameter(torch.randn(DIM), requires_grad=False)  # frozen parameter
        self.register_buffer("scale", torch.rand(DIM) + 0.5)            # buffer
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight                             # tied weight

    def forward(self, tokens):  # tokens (B, T) -> logits (B, T, V)
        x = self.embed(tokens) * self.scale + self.shift
        return self.head(x + self.block(x))


# Trainable tensors, in backward (bucketing) order: block.2.weight 512 B, block.0.bias 64 B,
# block.0.weight 512 B, embed.weight (= head.weight) 352 B.
N_TRAINABLE = 4
CAPS = {  # name -> (bucket_size_mb, expected number of buckets)
    "per-parameter": (None, N_TRAINABLE),
    "below-any-tensor": (1e-6, N_TRAINABLE),
    "a-few-tensors": (600 / 2**20, 3),  # [block.2.weight + block.0.bias], [block.0.weight], [embed]
    "everything": (1000.0, 1),
}


def global_batch(step, world_size, device):
    g = torch.Generator().manual_seed(1234 + step)
    return torch.randint(0, VOCAB, (2 * world_size, 6), generator=g).to(device)


def loss_fn(model, tokens):  # next-token cross-entropy, mean over the batch
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def ddp_worker(rank, world_size, cap_name, set_to_none, own_group, device_kind):
    device = torch.device(device_kind, rank) if device_kind == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    reference = TinyLM().to(device)  # rank 0's initial weights, trained on the global batch
    torch.manual_seed(100 + rank)   # every other rank starts elsewhere: the broadcast must fix it
    model = TinyLM().to(device)
    if rank == 0:
        model.load_state_dict(reference.state_dict())
    group = dist.new_group([0, 1]) if own_group else None
    bucket_mb, n_buckets = CAPS[cap_name]
    ddp = lmscale.DistributedDataParallel(model, bucket_size_mb=bucket_mb, process_group=group)
    assert ddp.module is model
    assert [n for n, _ in ddp.named_parameters()] == ["module." + n for n, _ in model.named_parameters()]
    for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(got, want), f"rank {rank}: {name} not broadcast from rank 0"
    assert len(ddp.bucket_assignment) == n_buckets, ddp.bucket_assignment
    assert sorted(i for b in ddp.bucket_assignment for i in b) == [1, 2, 3, 4], ddp.bucket_assignment  # not shift (0), block.2.bias (5)

    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5, momentum=0.9)
    per_rank = 2
    for step in range(STEPS):
        tokens = global_batch(step, world_size, device)
        loss_fn(ddp, tokens[rank * per_rank:(rank + 1) * per_rank]).backward()
        ddp.finish_gradient_synchronization()
        # The hooks launched every bucket during backward, before finish was called.
        assert ddp._reducer.last_launched_during_backward == n_buckets
        loss_fn(reference, tokens).backward()
        for (name, p), r in zip(model.named_parameters(), reference.parameters()):
            if not p.requires_grad:
                assert p.grad is None, f"{name} is frozen but got a gradient"
                continue
            torch.testing.assert_close(p.grad, r.grad, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name} grad: {m}")
        opt.step()
        ref_opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        ref_opt.zero_grad()
        for (name, p), r in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6, msg=lambda m: f"step {step} {name}: {m}")
    assert model.head.weight is model.embed.weight
    assert torch.equal(model.scale, reference.scale)


@pytest.mark.parametrize(
    "cap_name,set_to_none,own_group",
    [
        ("per-parameter", True, False),
        ("below-any-tensor", False, False),
        ("a-few-tensors", True, True),
        ("everything", False, False),
    ],
)
def test_ddp_matches_single_process_gloo(cap_name, set_to_none, own_group):
    spawn(ddp_worker, 2, cap_name, set_to_none, own_group, "cpu")


@pytest.mark.gpu(n=2)
@pytest.mark.parametrize("cap_name", ["per-parameter", "a-few-tensors"])
def test_ddp_matches_single_process_nccl(cap_name):
    spawn(ddp_worker, 2, cap_name, False, False, "cuda", backend="nccl")


def mismatch_worker(rank, world_size):
    model = nn.Linear(4, 4 + rank)  # rank 1 builds a different model
    with pytest.raises(RuntimeError, match="disagrees with rank 0"):
        lmscale.DistributedDataParallel(model)


def test_ddp_reports_ranks_with_different_models():
    spawn(mismatch_worker, 2)


def bad_options_worker(rank, world_size):
    # Both fail in the C++ DDP before its first collective, so a lone rank cannot hang on them.
    with pytest.raises(RuntimeError, match="negative"):
        lmscale.DistributedDataParallel(nn.Linear(2, 2), bucket_size_mb=-1)
    model = nn.Linear(2, 2)
    model.register_buffer("stray", torch.zeros(2, device="meta"))  # a buffer left on another device
    with pytest.raises(RuntimeError, match="buffer 0 is on meta"):
        lmscale.DistributedDataParallel(model)


def test_ddp_rejects_bad_options_and_split_devices():
    spawn(bad_options_worker, 1)


def test_ddp_without_torch_distributed_names_the_fix():
    assert not torch.distributed.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        lmscale.DistributedDataParallel(nn.Linear(2, 2))
