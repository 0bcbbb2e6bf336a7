#!/usr/bin/env python3
"""PyTorch baseline of lmscale's end-to-end benchmark: the same Transformer LM (docs/spec.md §1) and the
same step (forward, backward, fused AdamW), in eager mode or under torch.compile, timed the same way
(CUDA events per phase, one synchronize per step; forward mode runs under no_grad, as lmscale's does).

One config (its last stdout line is one JSON object):

    python3 scripts/torch_baseline.py --impl eager --d-model 768 --d-ff 3072 --layers 12 --heads 12 \
        --context 512 --batch 4 --precision bf16 --mode train-step --device cuda

Batch mode, what `lmscale bench --compare torch-eager,torch-compile` runs (one process per impl for a
whole sweep): one config per JSON line in FILE ('-': stdin), keys as the flags above with '_' for '-'
plus "id" and "model_context"; one JSON result line per config on stdout, flushed as each finishes,
carrying the config's "id". A config that runs out of memory gives status "oom" and the batch goes on.

    python3 scripts/torch_baseline.py --impl compile --configs configs.jsonl

The model (fp32 weights; bf16/fp16 are autocast, as in lmscale) is built once per architecture and
reused across contexts, precisions and modes; each config gets a fresh optimizer (so AdamW state exists
only in train-step configs) and its own peak-memory window. Under --impl compile the default scope is
"blocks": each transformer block and the LM head + loss are compiled (regional compilation: every
block reuses one compiled graph, so compile time does not grow with depth); "model" compiles the whole
forward + loss as one graph. The context dimension is marked dynamic, so contexts share graphs; a new
graph is compiled per precision and per grad mode (forward runs without autograd, so it has its own
graph). Compilation happens in warm-up: a step that compiled anything is followed by more warm-up
steps, and the time compiling steps took beyond a normal step is reported as compile_s.
"""
import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def trunc_normal(shape, std):
    return nn.init.trunc_normal_(torch.empty(shape), 0.0, std, -3 * std, 3 * std)


class Linear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = nn.Parameter(trunc_normal((d_out, d_in), math.sqrt(2.0 / (d_in + d_out))))

    def forward(self, x):
        return F.linear(x, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


class Rope(nn.Module):
    def __init__(self, theta, d_head, max_len):
        super().__init__()
        k = torch.arange(d_head // 2, dtype=torch.float64)
        angle = torch.outer(torch.arange(max_len, dtype=torch.float64), theta ** (-2 * k / d_head))
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def forward(self, x):  # (B, H, T, D), adjacent pairs rotated
        T = x.shape[-2]
        c, s = self.cos[:T], self.sin[:T]
        xe, xo = x[..., 0::2], x[..., 1::2]
        return torch.stack((xe * c - xo * s, xe * s + xo * c), -1).flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d, heads, max_len, backend):
        super().__init__()
        self.q, self.k, self.v, self.o = (Linear(d, d) for _ in range(4))
        self.h, self.backend = heads, backend
        self.rope = Rope(10000.0, d // heads, max_len)

    def forward(self, x):
        B, T, C = x.shape
        split = lambda t: t.view(B, T, self.h, C // self.h).transpose(1, 2)
        q, k, v = self.rope(split(self.q(x))), self.rope(split(self.k(x))), split(self.v(x))
        if self.backend == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            o = torch.softmax(s.masked_fill(mask, float("-inf")), -1).to(v.dtype) @ v
        return self.o(o.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d, d_ff, heads, max_len, backend):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, heads, max_len, backend)
        self.w1, self.w2, self.w3 = Linear(d, d_ff), Linear(d_ff, d), Linear(d, d_ff)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        y = self.ln2(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class LM(nn.Module):
    """cfg: vocab, d_model, d_ff, layers, heads, context (the model's max length), attention."""

    def __init__(self, a):
        super().__init__()
        self.emb = nn.Parameter(trunc_normal((a.vocab, a.d_model), 1.0))
        self.blocks = nn.ModuleList(Block(a.d_model, a.d_ff, a.heads, a.context, a.attention) for _ in range(a.layers))
        self.ln = RMSNorm(a.d_model)
        self.head = Linear(a.d_model, a.vocab)
        self.dynamic_context = False  # mark dim 1 of every block input dynamic (for compiled blocks)

    def trunk(self, ids):
        x = F.embedding(ids, self.emb)
        for b in self.blocks:
            if self.dynamic_context:
                torch._dynamo.maybe_mark_dynamic(x, 1)
            x = b(x)
        return x

    def forward(self, ids):
        return self.head(self.ln(self.trunk(ids)))


# ------------------------------------------------------------------------------------------ harness

MODEL_KEYS = ("vocab", "d_model", "d_ff", "layers", "heads", "model_context", "attention", "device")
DEFAULTS = {"vocab": 10000, "d_model": 768, "d_ff": 3072, "layers": 12, "heads": 12, "context": 512,
            "model_context": 0, "batch": 4, "precision": "bf16", "mode": "train-step", "attention": "naive",
            "warmup": 5, "steps": 10, "device": "cuda"}
MAX_EXTRA_WARMUP = 5  # extra warm-up steps after a step that compiled, at most


def summary(xs):
    if not xs:
        return None
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def graphs_compiled():
    """Graphs Dynamo has compiled in this process (a lazily compiled backward comes with its forward)."""
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


class Runner:
    """Holds one model (rebuilt when the architecture changes) and runs configs on it."""

    def __init__(self, impl, compile_scope):
        self.impl, self.scope = impl, compile_scope
        self.key = None
        self.model = self.loss_fn = None
        if impl == "compile":
            # One code object (Block.forward, the head) gets a graph per precision × grad mode; a
            # new architecture resets Dynamo, so the limit only guards against silent eager fallback.
            torch._dynamo.config.recompile_limit = 64
            torch._dynamo.config.accumulated_recompile_limit = 4096

    def drop_model(self):
        self.model = self.loss_fn = None
        self.key = None
        if self.impl == "compile":
            torch._dynamo.reset()
        free_memory()

    def model_for(self, c):
        key = tuple(c[k] for k in MODEL_KEYS)
        if key == self.key:
            return
        self.drop_model()
        dev = torch.device(c["device"])
        cfg = argparse.Namespace(vocab=c["vocab"], d_model=c["d_model"], d_ff=c["d_ff"], layers=c["layers"],
                                 heads=c["heads"], context=c["model_context"], attention=c["attention"])
        torch.manual_seed(0)
        with torch.device(dev):  # initialised where it runs (fast for 2.7B on a GPU)
            model = LM(cfg)

        def loss_of(logits, tgt):
            return F.cross_entropy(logits.flatten(0, 1).float(), tgt.flatten())

        if self.impl == "eager":
            loss_fn = lambda ids, tgt: loss_of(model(ids), tgt)
        elif self.scope == "model":
            whole = torch.compile(lambda ids, tgt: loss_of(model(ids), tgt))

            def loss_fn(ids, tgt):
                torch._dynamo.maybe_mark_dynamic(ids, 1)
                torch._dynamo.maybe_mark_dynamic(tgt, 1)
                return whole(ids, tgt)
        else:  # blocks: each block compiled in place (one graph reused by all), plus head + loss
            for b in model.blocks:
                b.compile()
            model.dynamic_context = True
            head = torch.compile(lambda x, tgt: loss_of(model.head(model.ln(x)), tgt))

            def loss_fn(ids, tgt):
                x = model.trunk(ids)
                torch._dynamo.maybe_mark_dynamic(x, 1)
                torch._dynamo.maybe_mark_dynamic(tgt, 1)
                return head(x, tgt)
        self.model, self.loss_fn, self.key = model, loss_fn, key

    def run(self, c):
        """Measures one config (a dict with every DEFAULTS key); returns the result dict."""
        dev = torch.device(c["device"])
        cuda = dev.type == "cuda"
        self.model_for(c)
        maybe_inject_oom(c)
        model, loss_fn = self.model, self.loss_fn
        # A fresh optimizer per config: its state exists only once a train-step config steps.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=cuda)
        ids = torch.randint(c["vocab"], (c["batch"], c["context"]), device=dev)
        tgt = torch.randint(c["vocab"], (c["batch"], c["context"]), device=dev)
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[c["precision"]]
        mode = c["mode"]

        def autocast():
            return torch.autocast(dev.type, dtype=dtype) if dtype else contextlib.nullcontext()

        def mark():
            if cuda:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                return e
            return time.perf_counter()

        def ms(x, y):
            return x.elapsed_time(y) if cuda else (y - x) * 1e3

        def step():
            m = [mark()]
            with torch.no_grad() if mode == "forward" else contextlib.nullcontext():
                with autocast():
                    loss = loss_fn(ids, tgt)
            m.append(mark())
            if mode != "forward":
                loss.backward()  # outside autocast, as in lmscale
                m.append(mark())
            if mode == "train-step":
                opt.step()
                opt.zero_grad(set_to_none=True)
                m.append(mark())
            elif mode == "forward-backward":
                opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize(dev)
            return m

        fwd, bwd, optim, total, every = [], [], [], [], []
        compiling_walls, warm, extra, compiled_in_timed = [], 0, 0, 0
        graphs0 = graphs_compiled() if self.impl == "compile" else 0
        if cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        while len(total) < c["steps"]:
            before = graphs_compiled() if self.impl == "compile" else 0
            t0 = time.perf_counter()
            m = step()
            wall = time.perf_counter() - t0
            compiled = self.impl == "compile" and graphs_compiled() != before
            every.append(ms(m[0], m[-1]))
            # Warm-up: the requested steps; a step that compiled (and so also ran first-launch
            # autotuning) is never timed but counts as one more warm-up step.
            if warm < c["warmup"] or (compiled and extra < MAX_EXTRA_WARMUP):
                if compiled:
                    compiling_walls.append(wall)
                if warm >= c["warmup"]:
                    extra += 1
                warm += 1
                continue
            compiled_in_timed += compiled
            total.append(ms(m[0], m[-1]))
            fwd.append(ms(m[0], m[1]))
            if len(m) > 2:
                bwd.append(ms(m[1], m[2]))
            if len(m) > 3:
                optim.append(ms(m[2], m[3]))
        step_s = statistics.fmean(total) / 1e3
        r = {"status": "ok", "torch_attention": c["attention"], "forward_ms": summary(fwd),
             "backward_ms": summary(bwd), "optimizer_ms": summary(optim), "step_ms": summary(total),
             "all_step_ms": every, "warmup_steps_run": warm,
             "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if cuda else 0}
        if self.impl == "compile":
            r.update({"compile_s": sum(max(0.0, w - step_s) for w in compiling_walls),
                      "graphs_compiled": graphs_compiled() - graphs0, "compiled_in_timed_steps": compiled_in_timed,
                      "compile_scope": self.scope, "dynamic_shapes": "context"})
        return r


def maybe_inject_oom(c):
    """LMSCALE_INJECT_OOM=<size>[:<context>], as in lmscale (src/bench/e2e_bench.cpp): matching configs
    fail as if out of memory, after the model is built (tests of the OOM path)."""
    spec = os.environ.get("LMSCALE_INJECT_OOM", "")
    if not spec:
        return
    size, _, ctx = spec.partition(":")
    if size == c.get("size") and (not ctx or int(ctx) == c["context"]):
        raise torch.OutOfMemoryError(f"injected out of memory (LMSCALE_INJECT_OOM={spec})")


def free_memory():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_one(runner, c):
    """One config → result dict; out-of-memory and other errors become the result, never a crash."""
    result = None
    try:
        result = runner.run(c)
    except torch.OutOfMemoryError as e:
        result = {"status": "oom", "message": str(e).splitlines()[0] if str(e) else "out of memory"}
    except Exception as e:  # reported as a table cell, not a crash of the whole sweep
        result = {"status": "error", "message": f"{type(e).__name__}: {e}"[:500]}
    if result["status"] != "ok":
        # The exception's frames held the step's tensors; with them gone, give the memory back. The
        # model's gradients may be half-written: clear them (the model itself is kept).
        if runner.model is not None:
            for p in runner.model.parameters():
                p.grad = None
    free_memory()
    return result


def normalise(c):
    c = {**DEFAULTS, **{k.replace("-", "_"): v for k, v in c.items()}}
    if c["attention"] == "flash":  # PyTorch's closest equivalent of lmscale's kernel
        c["attention"] = "sdpa"
    if not c["model_context"]:
        c["model_context"] = c["context"]
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=["eager", "compile"], default="eager")
    p.add_argument("--compile-scope", choices=["blocks", "model"], default="blocks",
                   help="compile each block + head/loss (default) or the whole model + loss as one graph")
    p.add_argument("--batch-file", "--configs", dest="configs", metavar="FILE",
                   help="batch mode: JSON-lines configs ('-': stdin); one JSON result line per config")
    p.add_argument("--vocab", type=int, default=DEFAULTS["vocab"])
    p.add_argument("--d-model", type=int, default=DEFAULTS["d_model"])
    p.add_argument("--d-ff", type=int, default=DEFAULTS["d_ff"])
    p.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    p.add_argument("--heads", type=int, default=DEFAULTS["heads"])
    p.add_argument("--context", type=int, default=DEFAULTS["context"])
    p.add_argument("--model-context", type=int, default=0, help="the model's max context (default: --context)")
    p.add_argument("--batch", type=int, default=DEFAULTS["batch"])
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default=DEFAULTS["precision"])
    p.add_argument("--mode", choices=["forward", "forward-backward", "train-step"], default=DEFAULTS["mode"])
    p.add_argument("--attention", choices=["naive", "sdpa", "flash"], default=DEFAULTS["attention"])
    p.add_argument("--warmup", type=int, default=DEFAULTS["warmup"])
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    p.add_argument("--device", default=DEFAULTS["device"])
    a = p.parse_args()
    runner = Runner(a.impl, a.compile_scope)
    if a.configs is None:
        c = normalise({k: getattr(a, k) for k in DEFAULTS})
        print(json.dumps(run_one(runner, c)), flush=True)
        return
    src = sys.stdin if a.configs == "-" else open(a.configs)
    with src:
        for line in src:
            if not line.strip():
                continue
            raw = json.loads(line)
            t0 = time.perf_counter()
            result = run_one(runner, normalise(raw))
            result["id"] = raw.get("id")
            result["wall_s"] = time.perf_counter() - t0
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
