"""PyTorch's own data parallelism on the same Transformer LM as ``lmscale bench ddp``, timed the
same way, as the baselines of its table: DistributedDataParallel with fp32 gradients
(``torch-ddp``) and with PyTorch's bf16 compression hook (``torch-ddp-bf16``), and FSDP2
(``fully_shard``, ``torch-fsdp2``), after the single-device step (``torch-single``) on every rank.
Needs only torch. Runs over NCCL on GPUs and over Gloo on CPUs (a small check of the script).

    torchrun --nproc-per-node 2 -m lmscale.baseline.ddp --size xl --precision fp32,bf16 --out results

With ``--compile`` each design runs ``torch.compile`` over the wrapped model (DDP's graph is split at
its buckets by PyTorch's DDPOptimizer; FSDP2 compiles over the sharded blocks), what a PyTorch user
would pick; its impls are named ``torch-...-compile``.

Per design it records (bench "ddp", rank 0 appends to <out>/ddp.jsonl, docs/results/SCHEMA.md): step_ms, backward_ms
(the ``loss.backward()`` call: DDP's and FSDP's communication that the backward does not hide ends
inside it), backward_slowdown against the single-device backward, bytes_sent_per_step per rank
(ring algorithms: all-reduce 2(N-1)/N of the payload, reduce-scatter and all-gather (N-1)/N), and
peak_allocated on GPUs. Times are means over the timed steps on each rank, then the slowest rank.
"""
import argparse
import contextlib
import os
import secrets
import shlex
import sys
import time

import torch
import torch.distributed as dist

from lmscale import records as result_records

# d_model, d_ff, layers, heads (docs/spec.md §1)
SIZES = {"tiny": (64, 256, 2, 4), "small": (768, 3072, 12, 12), "medium": (1024, 4096, 24, 16),
         "large": (1280, 5120, 36, 20), "xl": (1600, 6400, 48, 25), "2.7B": (2560, 10240, 32, 32)}
VOCAB = 10000
IMPLS = ("torch-single", "torch-ddp", "torch-ddp-bf16", "torch-fsdp2")


def build_model(size, context):
    """The e2e baseline's LM (the same architecture as lmscale's TransformerLM), attention through
    SDPA: the strongest PyTorch path, as lmscale's side runs its fastest single-GPU step."""
    from lmscale.baseline.e2e import LM
    d, f, layers, heads = SIZES[size]
    return LM(VOCAB, d, f, layers, heads, context, "sdpa")


class Clock:
    """CUDA events on GPUs, the host clock on CPUs."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"
        self.marks = []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def ms(self, a, b):
        if self.cuda:
            torch.cuda.synchronize()
            return self.marks[a].elapsed_time(self.marks[b])
        return (self.marks[b] - self.marks[a]) * 1e3


def time_steps(model, opt, ids, targets, dtype, warmup, steps):
    """Mean step and backward milliseconds over the timed steps, slowest rank."""
    dev = ids.device
    ctx = (lambda: torch.autocast(dev.type, dtype=dtype)) if dtype else contextlib.nullcontext
    step_ms = bwd_ms = 0.0
    for i in range(warmup + steps):
        clock = Clock(dev)
        clock.mark()
        with ctx():
            logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        clock.mark()
        loss.backward()
        clock.mark()
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.mark()
        if i >= warmup:
            step_ms += clock.ms(0, 3)
            bwd_ms += clock.ms(1, 2)
    t = torch.tensor([step_ms / steps, bwd_ms / steps], device=dev if dev.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t[0].item(), t[1].item()


def bytes_sent(impl, grad_bytes, world):
    ring = (world - 1) / world
    if impl == "torch-ddp":
        return 2 * ring * grad_bytes
    if impl == "torch-ddp-bf16":
        return 2 * ring * grad_bytes / 2
    if impl == "torch-fsdp2":
        # Parameters all-gathered for the forward and again for the backward (reshard after
        # forward, FSDP2's default), gradients reduce-scattered once; all in fp32 here.
        return 3 * ring * grad_bytes
    return 0.0


def wrap(impl, model, local, dev):
    if impl == "torch-single":
        return model
    if impl in ("torch-ddp", "torch-ddp-bf16"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(model, device_ids=[local] if dev.type == "cuda" else None, bucket_cap_mb=ARGS.bucket_mb)
        if impl == "torch-ddp-bf16":
            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
        return ddp
    from torch.distributed.fsdp import fully_shard
    for block in getattr(model, "blocks", getattr(model, "layers", [])):
        fully_shard(block)
    fully_shard(model)
    return model


def main(argv=None):
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="xl", choices=sorted(SIZES))
    p.add_argument("--precision", default="fp32,bf16")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma list of " + ", ".join(IMPLS))
    p.add_argument("--batch", type=int, default=4, help="per rank")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (PyTorch's default 25)")
    p.add_argument("--compile", action="store_true", help="torch.compile the wrapped model (impls named torch-...-compile)")
    p.add_argument("--out", default="results")
    p.add_argument("--command", default=None, help="record this command instead of our own (shared run)")
    p.add_argument("--date", default=None, help="record this date instead of now (shared run)")
    ARGS = a = p.parse_args(argv)
    impls = a.impls.split(",")
    for impl in impls:
        if impl not in IMPLS:
            p.error(f"--impls: '{impl}' is unknown; choose from {', '.join(IMPLS)}")
    if "WORLD_SIZE" not in os.environ:
        p.error("start it with several processes: torchrun --nproc-per-node 2 -m lmscale.baseline.ddp ...")

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    commit = result_records.commit(ask_git=True)
    date = a.date or result_records.utc_now()
    run = secrets.token_hex(8)  # this invocation's id (results/SCHEMA.md): unique where a date is not
    command = a.command or " ".join(shlex.quote(x) for x in
                                    ["torchrun", f"--nproc-per-node={world}", "-m", "lmscale.baseline.ddp"] + sys.argv[1:])
    records = []
    for prec in a.precision.split(","):
        dtype = {"fp32": None, "bf16": torch.bfloat16}[prec]
        single_bwd = None
        for impl in impls:
            torch.manual_seed(0)
            model = build_model(a.size, a.context).to(dev)
            grad_bytes = sum(q.numel() * q.element_size() for q in model.parameters())
            ids = torch.randint(VOCAB, (a.batch, a.context), device=dev)
            targets = torch.randint(VOCAB, (a.batch, a.context), device=dev)
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(dev)
            model = wrap(impl, model, local, dev)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=cuda)
            if a.compile:
                model = torch.compile(model)
            step, bwd = time_steps(model, opt, ids, targets, dtype, a.warmup, a.steps)
            peak = torch.cuda.max_memory_allocated(dev) if cuda else None
            del model, opt
            if impl == "torch-single":
                single_bwd = bwd
            metrics = [("step_ms", step, "ms"), ("backward_ms", bwd, "ms")]
            if impl != "torch-single":
                metrics.append(("bytes_sent_per_step", bytes_sent(impl, grad_bytes, world), "bytes"))
                if single_bwd:
                    metrics.append(("backward_slowdown", (bwd / single_bwd - 1) * 100, "%"))
            if peak is not None:
                metrics.append(("peak_allocated", peak, "bytes"))
            name = impl + ("-compile" if a.compile else "")
            if rank == 0:
                print(f"[{name}] {a.size} {prec}: step {step:.2f} ms, backward {bwd:.2f} ms", flush=True)
            for metric, value, unit in metrics:
                config = {"size": a.size, "precision": prec, "batch": a.batch, "context": a.context, "world": world,
                          "backend": "nccl" if cuda else "gloo", "metric": metric, "value": value, "unit": unit}
                r = {**result_records.record_base("ddp", name, "ok", config, gpu=result_records.gpu_name(dev),
                                                  commit=commit, date=date, command=command),
                     "run": run, "torch": torch.__version__}
                if impl in ("torch-ddp", "torch-ddp-bf16"):
                    r["bucket_mb"] = a.bucket_mb
                    r["comm_dtype"] = "bf16" if impl.endswith("bf16") else "fp32"
                records.append(r)
    if rank == 0:
        result_records.append(os.path.join(a.out, "ddp.jsonl"), records)
    dist.destroy_process_group()


ARGS = None

if __name__ == "__main__":
    main()
    # torch 2.11 CPU processes that ran autograd over Gloo abort in interpreter teardown now and then
    # ("terminate called without an active exception", seen ~1 run in 15; tests/python/dist_util.py):
    # every record is written and the group destroyed by now, so leave without the teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
