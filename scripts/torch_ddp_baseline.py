#!/usr/bin/env python3
"""PyTorch's own DistributedDataParallel on the same Transformer LM as `lmscale bench ddp` (the
model class is imported from scripts/torch_baseline.py, the e2e baseline), timed the same way: CUDA
events around forward+backward+fused AdamW, one synchronize per step, mean over the timed steps,
slowest rank. Also times the single-GPU step on every rank first (no communication). Rank 0 appends
records (bench "ddp", impl torch-single / torch-ddp) to <out>/ddp.jsonl.

    python3 -m torch.distributed.run --nproc_per_node 2 scripts/torch_ddp_baseline.py \
        --size xl --precision fp32,bf16 --batch 4 --context 512 --out results
"""
import argparse
import contextlib
import datetime
import json
import os
import shlex
import subprocess
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_baseline import LM  # noqa: E402  (same architecture as lmscale's TransformerLM)

# d_model, d_ff, layers, heads (docs/spec.md §1)
SIZES = {"tiny": (64, 256, 2, 4), "small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16),
         "large": (1280, 5120, 36, 20), "xl": (1600, 6400, 48, 25), "2.7B": (2560, 10240, 32, 32)}


def time_steps(model, opt, ids, targets, dtype, warmup, steps):
    dev = ids.device
    ctx = (lambda: torch.autocast(dev.type, dtype=dtype)) if dtype else contextlib.nullcontext
    total = 0.0
    for i in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with ctx():
            logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            total += start.elapsed_time(end)
    t = torch.tensor([total / steps], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="xl", choices=sorted(SIZES))
    p.add_argument("--precision", default="fp32,bf16")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (PyTorch default 25)")
    p.add_argument("--out", default="results")
    p.add_argument("--command", default=None, help="record this command instead of our own (shared run)")
    p.add_argument("--date", default=None, help="record this date instead of now (shared run)")
    a = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    d, f, layers, heads = SIZES[a.size]
    cfg = argparse.Namespace(vocab=10000, d_model=d, d_ff=f, layers=layers, heads=heads, context=a.context,
                             attention="naive")
    commit = os.environ.get("LMSCALE_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    date = a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = a.command or " ".join(shlex.quote(x) for x in ["python3", "-m", "torch.distributed.run",
                                                             f"--nproc_per_node={world}"] + sys.argv)
    records = []
    for prec in a.precision.split(","):
        dtype = {"fp32": None, "bf16": torch.bfloat16}[prec]
        torch.manual_seed(0)
        model = LM(cfg).to(dev)
        ids = torch.randint(10000, (a.batch, a.context), device=dev)
        targets = torch.randint(10000, (a.batch, a.context), device=dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
        single = time_steps(model, opt, ids, targets, dtype, a.warmup, a.steps)
        ddp = DDP(model, device_ids=[local], bucket_cap_mb=a.bucket_mb)
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
        with_ddp = time_steps(ddp, opt, ids, targets, dtype, a.warmup, a.steps)
        del ddp, model, opt
        torch.cuda.empty_cache()
        if rank == 0:
            print(f"[torch-ddp] {a.size} {prec}: single {single:.2f} ms, DDP {with_ddp:.2f} ms "
                  f"(+{(with_ddp / single - 1) * 100:.1f}%)", flush=True)
        for impl, metric, value, unit in [("torch-single", "step_time", single, "ms"),
                                          ("torch-ddp", "step_time", with_ddp, "ms"),
                                          ("torch-ddp", "overhead_vs_single", (with_ddp / single - 1) * 100, "%")]:
            r = {"bench": "ddp", "impl": impl, "size": a.size, "precision": prec, "batch": a.batch,
                 "context": a.context, "world": world, "backend": "nccl", "metric": metric, "value": value,
                 "unit": unit, "gpu": torch.cuda.get_device_name(dev), "commit": commit, "date": date,
                 "command": command, "torch": torch.__version__}
            if impl == "torch-ddp":
                r["bucket_mb"] = a.bucket_mb
            records.append(r)
    if rank == 0:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "ddp.jsonl"), "a") as fh:
            for r in records:
                fh.write(json.dumps(r) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
