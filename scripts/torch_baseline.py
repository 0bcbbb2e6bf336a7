#!/usr/bin/env python3
"""PyTorch baseline of lmscale's end-to-end benchmark: the same Transformer LM (REFERENCE §1) and the
same step (forward, backward, fused AdamW), in eager mode or under torch.compile, timed the same way
(CUDA events per phase, one synchronize per step). `lmscale bench --compare torch-eager,torch-compile`
runs this script once per config; its last stdout line is one JSON object.

    python3 scripts/torch_baseline.py --impl eager --d-model 768 --d-ff 3072 --layers 12 --heads 12 \
        --context 512 --batch 4 --precision bf16 --mode train-step --device cuda
"""
import argparse
import contextlib
import json
import math
import statistics
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
    def __init__(self, a):
        super().__init__()
        self.emb = nn.Parameter(trunc_normal((a.vocab, a.d_model), 1.0))
        self.blocks = nn.ModuleList(Block(a.d_model, a.d_ff, a.heads, a.context, a.attention) for _ in range(a.layers))
        self.ln = RMSNorm(a.d_model)
        self.head = Linear(a.d_model, a.vocab)

    def forward(self, ids):
        x = F.embedding(ids, self.emb)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def summary(xs):
    if not xs:
        return None
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "median": statistics.median(xs), "n": len(xs)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["eager", "compile"], default="eager")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--d-ff", type=int, default=3072)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16")
    p.add_argument("--mode", choices=["forward", "forward-backward", "train-step"], default="train-step")
    p.add_argument("--attention", choices=["naive", "sdpa", "flash"], default="naive")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    if a.attention == "flash":  # PyTorch's closest equivalent of lmscale's kernel
        a.attention = "sdpa"
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    result = {"status": "ok"}
    try:
        torch.manual_seed(0)
        model = LM(a).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=cuda)
        ids = torch.randint(a.vocab, (a.batch, a.context), device=dev)
        tgt = torch.randint(a.vocab, (a.batch, a.context), device=dev)
        fwd_model = torch.compile(model) if a.impl == "compile" else model
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]

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

        fwd, bwd, optim, total, every = [], [], [], [], []
        if cuda:
            torch.cuda.reset_peak_memory_stats(dev)
        for i in range(a.warmup + a.steps):
            m = [mark()]
            with torch.no_grad() if a.mode == "forward" else contextlib.nullcontext():
                with autocast():
                    loss = F.cross_entropy(fwd_model(ids).flatten(0, 1).float(), tgt.flatten())
            m.append(mark())
            if a.mode != "forward":
                loss.backward()
                m.append(mark())
            if a.mode == "train-step":
                opt.step()
                opt.zero_grad(set_to_none=True)
                m.append(mark())
            elif a.mode == "forward-backward":
                opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize(dev)
            every.append(ms(m[0], m[-1]))
            if i < a.warmup:
                continue
            total.append(ms(m[0], m[-1]))
            fwd.append(ms(m[0], m[1]))
            if len(m) > 2:
                bwd.append(ms(m[1], m[2]))
            if len(m) > 3:
                optim.append(ms(m[2], m[3]))
        result.update({"forward_ms": summary(fwd), "backward_ms": summary(bwd), "optimizer_ms": summary(optim),
                       "step_ms": summary(total), "all_step_ms": every,
                       "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if cuda else 0})
    except torch.OutOfMemoryError as e:
        result = {"status": "oom", "message": str(e).splitlines()[0]}
    except Exception as e:  # reported as a table cell, not a crash of the whole sweep
        result = {"status": "error", "message": f"{type(e).__name__}: {e}"[:500]}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
