"""PyTorch baseline of ``lmscale bench``: the same Transformer LM (docs/spec.md §1) and the same step
(forward + loss, backward, AdamW), written as a PyTorch user writes it, timed the way lmscale times
its own step (CUDA events per phase, one synchronize per step; forward mode under no_grad).

Impls (``--impl``), with the default ``--baseline-scope model`` (the strongest PyTorch path):

- ``torch-eager``       the model op by op, attention by ``F.scaled_dot_product_attention``
- ``torch-compile``     ``torch.compile`` of the whole model + loss, default mode, static shapes
- ``torch-compile-ro``  the same with ``mode="reduce-overhead"`` (the step replayed as CUDA graphs)
- ``torch-float8``      torchao float8 training (``float8.py``) + ``torch.compile``, default mode;
                        precision ``fp8`` only (bf16 autocast around the FP8 GEMMs, as lmscale's fp8)
- ``torch-float8-ro``   the same with ``mode="reduce-overhead"``

``--baseline-scope naive`` is the older baseline: attention as lmscale's backend of the config (naive:
softmax(QKᵀ)V written out; sdpa and flash: SDPA), and torch.compile of each block and of the head +
loss on their own, the context dimension marked dynamic.

Every impl: fp32 weights, bf16/fp16 as autocast, ``torch.optim.AdamW(fused=True)`` on CUDA. Compile
time is reported (``compile_s``), never timed: a step that compiled is warm-up, and warm-up goes on
until the graphs have settled (reduce-overhead records its CUDA graphs in the steps after compiling).

One config, records (docs/results/SCHEMA.md) on stdout:

    python -m lmscale.baseline.e2e --impl torch-compile --d-model 768 --d-ff 3072 --layers 12 \\
        --heads 12 --context 512 --precision bf16 --mode train-step

Batch mode, what ``lmscale bench --compare`` runs (one process per impl and size): one config per
JSON line in FILE ('-': stdin), keys as the flags above with '_' for '-' plus "id" and
"model_context"; for each config one line ``{"id": ..., "records": [...]}``, flushed as it finishes.
A config that runs out of memory gives status "oom", another failure "error"; the batch goes on.

    python -m lmscale.baseline.e2e --impl torch-eager --configs configs.jsonl

Only torch is imported: this module runs without lmscale's C++ library.
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


def _records_module():
    """lmscale/records.py (the records' schema and writer), loaded from its file: importing the lmscale
    package would load liblmscale into this process, which times PyTorch alone."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "records.py")
    spec = importlib.util.spec_from_file_location("_baseline_records", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


result_records = _records_module()

IMPLS = ("torch-eager", "torch-compile", "torch-compile-ro", "torch-float8", "torch-float8-ro")
SCOPES = ("model", "naive")


# ------------------------------------------------------------------------------ the model (spec §1)

def trunc_normal(shape, std):
    return nn.init.trunc_normal_(torch.empty(shape), 0.0, std, -3 * std, 3 * std)


class Linear(nn.Module):
    """No bias; weight (out, in), truncated normal with std sqrt(2 / (in + out))."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = nn.Parameter(trunc_normal((d_out, d_in), math.sqrt(2.0 / (d_in + d_out))))

    def forward(self, x):
        return F.linear(x, self.weight)


class RMSNorm(nn.Module):
    """x · rsqrt(mean(x²) + eps) · g in fp32, cast back to the input's dtype."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight, self.eps).to(x.dtype)


class Rope(nn.Module):
    """Rotates adjacent pairs (2k, 2k+1) by pos · θ^(-2k/d_head), in fp32."""

    def __init__(self, theta, d_head, max_len):
        super().__init__()
        k = torch.arange(d_head // 2, dtype=torch.float64)
        angle = torch.outer(torch.arange(max_len, dtype=torch.float64), theta ** (-2 * k / d_head))
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def forward(self, x):  # (B, H, T, D)
        T = x.shape[-2]
        c, s = self.cos[:T], self.sin[:T]
        xe, xo = x[..., 0::2], x[..., 1::2]
        return torch.stack((xe * c - xo * s, xe * s + xo * c), -1).flatten(-2).to(x.dtype)


class Attention(nn.Module):
    """Separate Q, K, V, output projections; RoPE on Q and K; causal; scores scaled by 1/sqrt(d_head).
    attention: "sdpa" (PyTorch picks flash / cuDNN / memory-efficient) or "naive" (written out)."""

    def __init__(self, d, heads, max_len, attention):
        super().__init__()
        self.q, self.k, self.v, self.o = (Linear(d, d) for _ in range(4))
        self.heads, self.attention = heads, attention
        self.rope = Rope(10000.0, d // heads, max_len)

    def forward(self, x, segments=None):
        """segments: None (causal over the whole row), or (B, T) ids of the packed documents each
        token belongs to (``lmscale train --pack``): then causal within each segment only."""
        B, T, C = x.shape
        split = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q, k, v = self.rope(split(self.q(x))), self.rope(split(self.k(x))), split(self.v(x))
        sees = None if segments is None else segment_causal_mask(segments)
        if self.attention == "sdpa":
            if sees is None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=sees)
        else:
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if sees is None:
                sees = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            o = torch.softmax(s.masked_fill(~sees, float("-inf")), -1).to(v.dtype) @ v
        return self.o(o.transpose(1, 2).reshape(B, T, C))


def segment_causal_mask(segments):
    """(B, 1, T, T) bool from (B, T) segment ids: query i sees key j when j <= i and both lie in the
    same segment (block-diagonal causal). Each row starts a segment, so no query sees another row."""
    T = segments.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool, device=segments.device).tril()
    return ((segments[:, :, None] == segments[:, None, :]) & causal)[:, None]


class Block(nn.Module):
    """Pre-norm: h = x + Attn(RMSNorm(x)); out = h + W2(silu(W1 y) ⊙ W3 y), y = RMSNorm(h)."""

    def __init__(self, d, d_ff, heads, max_len, attention):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, heads, max_len, attention)
        self.w1, self.w2, self.w3 = Linear(d, d_ff), Linear(d_ff, d), Linear(d, d_ff)

    def forward(self, x, segments=None):
        h = x + self.attn(self.ln1(x), segments)
        y = self.ln2(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class LM(nn.Module):
    """Embedding (std 1), blocks, final RMSNorm, untied LM head."""

    def __init__(self, vocab, d_model, d_ff, layers, heads, max_len, attention):
        super().__init__()
        self.emb = nn.Parameter(trunc_normal((vocab, d_model), 1.0))
        self.blocks = nn.ModuleList(Block(d_model, d_ff, heads, max_len, attention) for _ in range(layers))
        self.ln = RMSNorm(d_model)
        self.head = Linear(d_model, vocab)

    def forward(self, ids, segments=None):
        x = F.embedding(ids, self.emb)
        for block in self.blocks:
            # Without segments the call stays block(x), the form the drop-in swaps (lmscale.nn) replace.
            x = block(x) if segments is None else block(x, segments)
        return self.head(self.ln(x))


def loss_of(logits, targets):
    """Mean cross-entropy over every position, in fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def param_count(c):
    """docs/spec.md §1: 2·V·d + L·(4d² + 3·d·d_ff + 2d) + d."""
    d = c["d_model"]
    return 2 * c["vocab"] * d + c["layers"] * (4 * d * d + 3 * d * c["d_ff"] + 2 * d) + d


# ------------------------------------------------------------------ the step each impl measures

def compile_mode(impl):
    """torch.compile's mode for a compiling impl: the ``-ro`` impls replay CUDA graphs."""
    return "reduce-overhead" if impl.endswith("-ro") else None


def is_float8(impl):
    return impl.startswith("torch-float8")


def build_loss_fn(model, impl, scope):
    """loss_fn(ids, targets) as the impl runs it: eager, or compiled (whole model, or block by block)."""
    eager = lambda ids, tgt: loss_of(model(ids), tgt)
    if impl == "torch-eager":
        return eager
    mode = compile_mode(impl)
    if scope == "model":  # the whole forward + loss as one graph per shape
        return torch.compile(eager, mode=mode, dynamic=False)
    # naive scope: every block compiled in place (they share one graph), the head + loss on its own.
    for block in model.blocks:
        block.compile(mode=mode)
    head = torch.compile(lambda x, tgt: loss_of(model.head(model.ln(x)), tgt), mode=mode)

    def blockwise(ids, tgt):
        x = F.embedding(ids, model.emb)
        for block in model.blocks:
            torch._dynamo.maybe_mark_dynamic(x, 1)  # one graph for every context
            x = block(x)
        torch._dynamo.maybe_mark_dynamic(x, 1)
        torch._dynamo.maybe_mark_dynamic(tgt, 1)
        return head(x, tgt)

    return blockwise


def graphs_compiled():
    """Graphs Dynamo has compiled in this process (a lazily compiled backward comes with its forward)."""
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def summary(xs):
    return {"value": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


class Runner:
    """Holds one model (rebuilt when the architecture changes) and measures configs on it."""

    MAX_EXTRA_WARMUP = 8  # warm-up steps beyond the requested ones while graphs still compile or record

    def __init__(self, impl, scope):
        self.impl, self.scope = impl, scope
        self.compiles = impl != "torch-eager"  # every other impl, torch-float8 included, compiles
        # After a step that compiled, this many more steps are warm-up: reduce-overhead runs a new
        # graph once plainly and records its CUDA graph on the next call, so replays start later.
        self.settle = 3 if compile_mode(impl) else 1
        self.key = self.model = self.loss_fn = None
        if self.compiles:
            # One code object gets a graph per context × precision × grad mode; a new architecture
            # resets Dynamo, so the limit only guards against a silent fall back to eager.
            torch._dynamo.config.recompile_limit = 64
            torch._dynamo.config.accumulated_recompile_limit = 4096

    def torch_attention(self, c):
        if self.scope == "model":
            return "sdpa"
        return "naive" if c["attention"] == "naive" else "sdpa"  # flash: PyTorch's closest, SDPA

    def model_for(self, c):
        key = tuple(c[k] for k in ("vocab", "d_model", "d_ff", "layers", "heads", "model_context", "device"))
        key += (self.torch_attention(c),)
        if key == self.key:
            return
        self.model = self.loss_fn = self.key = None
        if self.compiles:
            torch._dynamo.reset()
        free_memory()
        torch.manual_seed(0)
        with torch.device(c["device"]):  # initialised where it runs (fast for 2.7B on a GPU)
            model = LM(c["vocab"], c["d_model"], c["d_ff"], c["layers"], c["heads"], c["model_context"],
                       self.torch_attention(c))
        if is_float8(self.impl):
            from lmscale.baseline import float8
            model = float8.convert(model, Linear)
        self.model, self.loss_fn, self.key = model, build_loss_fn(model, self.impl, self.scope), key

    def measure(self, c):
        """Times one config; returns (metrics, fields): metric name → value or summary, extra fields."""
        dev = torch.device(c["device"])
        cuda = dev.type == "cuda"
        self.model_for(c)
        maybe_inject_oom(c, dev)
        model, loss_fn, mode = self.model, self.loss_fn, c["mode"]
        # A fresh optimizer per config: its state exists only once a train-step config steps.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=cuda)
        ids = torch.randint(c["vocab"], (c["batch"], c["context"]), device=dev)
        tgt = torch.randint(c["vocab"], (c["batch"], c["context"]), device=dev)
        if is_float8(self.impl) != (c["precision"] == "fp8"):
            raise ValueError(f"precision {c['precision']} with --impl {self.impl}: torchao float8 runs as "
                             "precision fp8 (--impl torch-float8 or torch-float8-ro), every other impl as "
                             "fp32, bf16 or fp16")
        # fp8: bf16 autocast around the FP8 GEMMs, as lmscale's --precision fp8
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}[c["precision"]]
        autocast = (lambda: torch.autocast(dev.type, dtype=dtype)) if dtype else contextlib.nullcontext

        def mark():
            if not cuda:
                return time.perf_counter()
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e

        def ms(a, b):
            return a.elapsed_time(b) if cuda else (b - a) * 1e3

        def step():
            if compile_mode(self.impl):
                torch.compiler.cudagraph_mark_step_begin()  # a new step: earlier graph outputs are done
            marks = [mark()]
            with torch.no_grad() if mode == "forward" else contextlib.nullcontext(), autocast():
                loss = loss_fn(ids, tgt)
            marks.append(mark())
            if mode != "forward":
                loss.backward()  # outside autocast, as in lmscale
                marks.append(mark())
            if mode == "train-step":
                opt.step()
                opt.zero_grad(set_to_none=True)
                marks.append(mark())
            elif mode == "forward-backward":
                opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize(dev)
            return [ms(marks[0], m) for m in marks[1:]]  # cumulative ms at the end of each phase

        phases = {"forward_ms": [], "backward_ms": [], "optimizer_ms": [], "step_ms": []}
        every, compiling_walls = [], []
        warm = since_compile = compiled_in_timed = 0
        graphs0 = graphs_compiled() if self.compiles else 0
        if cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        while len(phases["step_ms"]) < c["steps"]:
            before = graphs_compiled() if self.compiles else 0
            t0 = time.perf_counter()
            ends = step()
            wall = time.perf_counter() - t0
            compiled = self.compiles and graphs_compiled() != before
            since_compile = 0 if compiled else since_compile + 1
            every.append(ends[-1])
            if compiled:
                compiling_walls.append(wall)
            settling = self.compiles and since_compile < self.settle
            if warm < c["warmup"] or (settling and warm < c["warmup"] + self.MAX_EXTRA_WARMUP):
                warm += 1
                continue
            compiled_in_timed += compiled  # only when the extra warm-up ran out: flagged in the table
            for name, start, end in zip(("forward_ms", "backward_ms", "optimizer_ms"), [0.0] + ends, ends):
                phases[name].append(end - start)
            phases["step_ms"].append(ends[-1])
        step_ms = statistics.fmean(phases["step_ms"])
        metrics = {name: summary(xs) for name, xs in phases.items() if xs}
        metrics["tokens_per_s"] = c["batch"] * c["context"] / (step_ms / 1e3)
        if cuda:
            metrics["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev)
        fields = {"torch_attention": self.torch_attention(c), "warmup_steps_run": warm}
        if self.compiles:
            # Compile time: how much longer the compiling steps took than a timed step.
            metrics["compile_s"] = sum(max(0.0, w - step_ms / 1e3) for w in compiling_walls)
            fields.update({"compile_s": metrics["compile_s"], "graphs_compiled": graphs_compiled() - graphs0,
                           "compiled_in_timed_steps": compiled_in_timed,
                           "compile_mode": compile_mode(self.impl) or "default",
                           "compile_scope": "model" if self.scope == "model" else "blocks",
                           "dynamic_shapes": "none" if self.scope == "model" else "context"})
        metrics["all_step_ms"] = every
        return metrics, fields


# -------------------------------------------------------------------------- failures, records

def maybe_inject_oom(c, dev):
    """LMSCALE_INJECT_OOM=<size>[:<context>], as in lmscale (src/bench/e2e_bench.h): a matching config
    asks its device for more memory than any has, so the allocator raises its own error (tests)."""
    spec = os.environ.get("LMSCALE_INJECT_OOM", "")
    size, _, ctx = spec.partition(":")
    if spec and size == c["size"] and (not ctx or int(ctx) == c["context"]):
        torch.empty(1 << 60, dtype=torch.uint8, device=dev)


def is_out_of_memory(e):
    """The CUDA caching allocator's OutOfMemoryError (or a CUDA "out of memory" error), or the CPU
    allocator's RuntimeError "can't allocate memory"."""
    text = str(e)
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in text or \
        "out of memory" in text


def free_memory():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


UNITS = {"forward_ms": "ms", "backward_ms": "ms", "optimizer_ms": "ms", "step_ms": "ms", "all_step_ms": "ms",
         "tokens_per_s": "tokens/s", "peak_memory_bytes": "bytes", "compile_s": "s"}
CONFIG_FIELDS = ("size", "d_model", "d_ff", "layers", "heads", "vocab", "context", "batch", "precision", "mode",
                 "attention", "device", "warmup", "steps")


def records(c, impl, status, reason, metrics, fields):
    """The config's e2e records in the results schema: one per metric, or one "status" record."""
    config = {**{k: c[k] for k in CONFIG_FIELDS}, "params": param_count(c), "cuda_graph": False, **fields}
    base = result_records.record_base("e2e", impl, status, config, gpu=result_records.gpu_name(c["device"]),
                                      commit=result_records.commit(), date=STARTED, command=COMMAND)
    return result_records.metric_records(base, metrics, UNITS, reason)


def run_one(runner, c):
    """One config → its records; out of memory and other errors become a status, never a crash."""
    try:
        metrics, fields = runner.measure(c)
        result = records(c, runner.impl, "ok", "", metrics, fields)
    except Exception as e:  # reported as a table cell, not a crash of the whole batch
        status = "oom" if is_out_of_memory(e) else "error"
        first_line = (str(e).strip().splitlines() or [""])[0]  # a reason is one line
        reason = first_line or "out of memory" if status == "oom" else f"{type(e).__name__}: {first_line}"
        result = records(c, runner.impl, status, reason[:500], {}, {})
        if runner.model is not None:  # gradients may be half-written; the model itself is kept
            for p in runner.model.parameters():
                p.grad = None
    free_memory()
    return result


STARTED = result_records.utc_now()
COMMAND = " ".join(["python -m lmscale.baseline.e2e"] + sys.argv[1:])
DEFAULTS = {"size": "custom", "vocab": 10000, "d_model": 768, "d_ff": 3072, "layers": 12, "heads": 12,
            "context": 512, "model_context": 0, "batch": 4, "precision": "bf16", "mode": "train-step",
            "attention": "naive", "warmup": 5, "steps": 10, "device": "cuda"}


def normalise(c):
    c = {**DEFAULTS, **{k.replace("-", "_"): v for k, v in c.items()}}
    c["model_context"] = c["model_context"] or c["context"]
    return c


CHOICES = {"precision": ("fp32", "bf16", "fp16", "fp8"), "mode": ("forward", "forward-backward", "train-step"),
           "attention": ("naive", "sdpa", "flash")}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lmscale.baseline.e2e", description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=IMPLS, default="torch-eager")
    p.add_argument("--baseline-scope", choices=SCOPES, default="model",
                   help="model: SDPA, whole model compiled (default); naive: the older per-block baseline")
    p.add_argument("--configs", metavar="FILE", help="batch mode: JSON-lines configs ('-': stdin)")
    for key, value in DEFAULTS.items():
        p.add_argument("--" + key.replace("_", "-"), type=type(value), default=value, choices=CHOICES.get(key))
    a = p.parse_args(argv)
    runner = Runner(a.impl, a.baseline_scope)
    if a.configs is None:
        for record in run_one(runner, normalise({k: getattr(a, k) for k in DEFAULTS})):
            print(json.dumps(record), flush=True)
        return
    with sys.stdin if a.configs == "-" else open(a.configs) as src:
        for line in src:
            if not line.strip():
                continue
            raw = json.loads(line)
            t0 = time.perf_counter()
            result = run_one(runner, normalise({k: v for k, v in raw.items() if k != "id"}))
            for record in result:
                record["wall_s"] = time.perf_counter() - t0
            print(json.dumps({"id": raw.get("id"), "records": result}), flush=True)


if __name__ == "__main__":
    main()
