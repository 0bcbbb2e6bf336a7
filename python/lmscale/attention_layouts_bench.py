"""Attention for the models people train, timed as a flash-attn or SDPA user calls it: lmscale's kernels
(``lmscale.flash_attn``) beside SDPA's cuDNN and flash backends (and, for packed batches, SDPA over jagged
nested tensors) on grouped-query heads, packed documents, sliding windows and the models' training shapes. One
process; every case's impls are timed in ``--rounds`` rounds (2 by default), the order reversed every round, and
each phase's round medians averaged (a GPU's clocks drift over a run: the impl timed last would pay for the others'
heat; on a power-capped H200 four rounds of fewer iterations spread that heat more evenly than two).

Cases (``--cases``; all by default):

- ``gqa-8k``      1 x 32 query / 8 K/V heads x 8192 x 128, causal
- ``gqa-4k``      2 x 32 / 4 x 4096 x 64, causal
- ``packed-d64``, ``packed-d128``   16 documents of random lengths totalling 16,384 tokens, 16 heads, causal
  within each document; beside it one dense causal 16,384-token call of lmscale, and a dense batch of 16
  sequences of the mean length (1,024) through lmscale and SDPA cuDNN: what equal short documents reach, so the
  packed call's distance to the 16,384-token call splits into the documents' length and their packing. TFLOP/s
  count only the work inside documents.
- ``window``      1 x 16 x 32768 x 128, causal with a 4096-key sliding window (``window_size=(4095, 0)``),
  beside full causal at the same shape
- ``xl-step``     4 x 25 heads x 512 x 64, causal: the xl model's attention in its training step (batch 4,
  context 512, the default step); ``small-step``, ``medium-step``, ``large-step`` (12, 16, 20 heads x 64) and
  ``2.7B-step`` (32 heads x 80) are the other sizes of docs/spec.md §1 at the same step

Metrics per impl: ``fwd_ms`` (no autograd graph), ``fwdbwd_ms`` (forward, then ``autograd.grad`` of a fixed
dO), their TFLOP/s (FlashAttention's convention: 4 D per visible (query, key) pair and head forward, 2.5x
that backward), ``kv_bytes`` (the K and V inputs) and ``peak_extra_bytes`` (what one forward + backward
allocates beyond its inputs at its peak: repeated K/V heads show there).

    python -m lmscale.attention_layouts_bench --out results/attention_layouts.jsonl
    python -m lmscale.attention_layouts_bench --cases gqa-4k,gqa-8k --rounds 4 --iters 10

Records: docs/results/SCHEMA.md (bench ``attention``, ``mode`` the case), one line per metric.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

from . import records as result_records
from .flash_attn import flash_attn_func, flash_attn_varlen_func


def visible_pairs(nq: int, nk: int, causal: bool, window_left: int = -1) -> int:
    """(query, key) pairs the mask shows, bottom-right aligned as flash-attn's causal (Nq == Nk here)."""
    total = 0
    shift = nk - nq
    for i in range(nq):
        hi = min(nk - 1, i + shift) if causal else nk - 1
        lo = max(0, i + shift - window_left) if window_left >= 0 else 0
        total += max(0, hi - lo + 1)
    return total


def timed(fn, warmup: int, iters: int) -> list:
    """Per-call milliseconds of fn() by CUDA events, after warm-up: the calls queued back to back with one
    synchronisation at the end, as a training loop runs them (host time shows only where it outlasts the GPU's)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    for i in range(iters):
        fn()
        events[i + 1].record()
    torch.cuda.synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(iters)]


def sdpa_backend(name):
    from torch.nn.attention import SDPBackend
    return {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION,
            "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[name]


def dense_call(impl: str, causal: bool, window_left: int = -1):
    """(q, k, v) in flash-attn's (B, N, H, D) -> o, for one impl."""
    if impl == "lmscale":
        return lambda q, k, v: flash_attn_func(q, k, v, causal=causal, window_size=(window_left, 0 if causal else -1))
    if window_left >= 0:
        raise RuntimeError("SDPA has no sliding-window backend (an explicit mask would time the math path)")

    def call(q, k, v):
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel([sdpa_backend(impl)]):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=causal, enable_gqa=q.shape[2] != k.shape[2])
        return o.transpose(1, 2)
    return call


def measure(fn, inputs, dout, warmup, iters):
    """fwd_ms and fwdbwd_ms samples of fn over inputs that require grad, and the bytes one forward + backward
    allocates beyond its inputs at its peak (what the impl keeps for backward, repeated K/V heads included)."""
    with torch.no_grad():
        fwd = timed(lambda: fn(*inputs), warmup, iters)

    def step():
        torch.autograd.grad(fn(*inputs), inputs, dout)
    fwdbwd = timed(step, warmup, iters)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return fwd, fwdbwd, torch.cuda.max_memory_allocated() - before


def dense_case(b, hq, hkv, n, d, causal, window_left, impls, args):
    """Times every impl on one dense shape; returns {impl: (status, reason, metrics)}."""
    dev = torch.device("cuda")
    q = torch.randn(b, n, hq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, n, hkv, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, n, hkv, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn_like(q)
    flops = 4 * d * hq * b * visible_pairs(n, n, causal, window_left)
    return run_impls(impls, lambda impl: dense_call(impl, causal, window_left), (q, k, v), dout, flops,
                     kv_bytes=2 * k.numel() * k.element_size(), args=args)


def round_orders(items: list, rounds: int) -> list:
    """The order of each round: as given, then reversed, alternating."""
    return [items if r % 2 == 0 else items[::-1] for r in range(rounds)]


def run_impls(impls, make_fn, inputs, dout, flops, kv_bytes, args, names=None):
    """args.rounds rounds, the impl order reversed every round; round medians averaged. {name: (status, reason,
    metrics)}."""
    names = names or impls
    samples = {name: {"fwd": [], "fwdbwd": [], "medians": []} for name in names}
    failed = {}
    for order in round_orders(list(zip(impls, names)), args.rounds):
        for impl, name in order:
            if name in failed:
                continue
            try:
                fn = make_fn(impl)
                fwd, fwdbwd, peak = measure(fn, inputs, dout, args.warmup, args.iters)
                s = samples[name]
                s["peak"] = peak
                s["fwd"] += fwd
                s["fwdbwd"] += fwdbwd
                s["medians"].append((statistics.median(fwd), statistics.median(fwdbwd)))
            except Exception as e:  # a backend that cannot serve the shape is a recorded cell, not a crash
                failed[name] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
                torch.cuda.empty_cache()
    out = {}
    for name in names:
        if name in failed:
            out[name] = ("n/a", failed[name], {})
            continue
        s = samples[name]
        fwd_ms = statistics.mean(m[0] for m in s["medians"])
        fwdbwd_ms = statistics.mean(m[1] for m in s["medians"])
        out[name] = ("ok", "", {
            "fwd_ms": stats(fwd_ms, s["fwd"]), "fwdbwd_ms": stats(fwdbwd_ms, s["fwdbwd"]),
            "fwd_tflops": flops / (fwd_ms * 1e9), "fwdbwd_tflops": 3.5 * flops / (fwdbwd_ms * 1e9),
            "kv_bytes": kv_bytes, "peak_extra_bytes": s["peak"]})
    return out


def stats(value, samples):
    return {"value": value, "median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "std": statistics.pstdev(samples), "n": len(samples)}


def packed_lengths(total: int, docs: int, seed: int = 0) -> list:
    """docs random lengths summing to total (each at least 64), reproducible."""
    g = torch.Generator().manual_seed(seed)
    cuts = sorted(torch.randperm(total // 64 - 1, generator=g)[: docs - 1].add(1).mul(64).tolist())
    edges = [0, *cuts, total]
    return [edges[i + 1] - edges[i] for i in range(docs)]


def packed_case(d, impls, args):
    """16 documents in 16,384 tokens, 16 heads, causal inside each: lmscale varlen, SDPA over jagged nested
    tensors (per backend), lmscale's dense causal call over all 16,384 tokens (the TFLOP/s bar), and a dense batch
    of 16 sequences of the mean length (lmscale and SDPA cuDNN)."""
    dev = torch.device("cuda")
    h, total = 16, 16384
    lengths = packed_lengths(total, 16)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    q, k, v = (torch.randn(total, h, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn_like(q)
    flops = 4 * d * h * sum(visible_pairs(n, n, True) for n in lengths)
    longest = max(lengths)

    def make(impl):
        if impl == "lmscale":
            return lambda q, k, v: flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True)

        def call(q, k, v):
            from torch.nn.attention import sdpa_kernel
            offsets = cu.to(torch.int64)
            nt = [torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2) for t in (q, k, v)]
            with sdpa_kernel([sdpa_backend(impl)]):
                o = F.scaled_dot_product_attention(*nt, is_causal=True)
            return o.transpose(1, 2).values()
        return call
    names = [("lmscale-varlen" if i == "lmscale" else f"{i}-jagged") for i in impls]
    out = run_impls(impls, make, (q, k, v), dout, flops, kv_bytes=2 * k.numel() * k.element_size(), args=args,
                    names=names)
    out.update({f"{i}-dense-{total}": r for i, r in dense_case(1, h, h, total, d, True, -1, ["lmscale"], args).items()})
    docs, mean = len(lengths), total // len(lengths)
    batch_impls = [i for i in ("lmscale", "sdpa-cudnn") if i in impls]
    out.update({f"{i}-dense-{docs}x{mean}": r
                for i, r in dense_case(docs, h, h, mean, d, True, -1, batch_impls, args).items()})
    return out, lengths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="gqa-8k,gqa-4k,packed-d64,packed-d128,window,small-step,medium-step,"
                                       "large-step,xl-step,2.7B-step")
    ap.add_argument("--impls", default="lmscale,sdpa-cudnn,sdpa-flash")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="rounds per case, the impl order reversed every round")
    ap.add_argument("--out", default="results/attention_layouts.jsonl")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.iters < 1 or args.warmup < 0:
        ap.error(f"--rounds and --iters must be >= 1 and --warmup >= 0; got {args.rounds}, {args.iters}, {args.warmup}")
    if not torch.cuda.is_available():
        print("attention_layouts_bench: needs a CUDA GPU (the cases are the kernels' layouts)", file=sys.stderr)
        return 2
    impls = args.impls.split(",")
    command = "python -m lmscale.attention_layouts_bench " + " ".join(argv if argv is not None else sys.argv[1:])
    common = dict(gpu=result_records.gpu_name("cuda"), commit=result_records.commit(ask_git=True),
                  date=result_records.utc_now(), command=command)
    units = {"fwd_ms": "ms", "fwdbwd_ms": "ms", "fwd_tflops": "TFLOP/s", "fwdbwd_tflops": "TFLOP/s",
             "kv_bytes": "bytes", "peak_extra_bytes": "bytes"}
    shapes = {"gqa-8k": (1, 32, 8, 8192, 128, True, -1), "gqa-4k": (2, 32, 4, 4096, 64, True, -1)}
    # Each size's attention in the default step (batch 4, context 512): its heads and head dim (spec.md §1).
    for size, heads, d in (("small", 12, 64), ("medium", 16, 64), ("large", 20, 64), ("xl", 25, 64), ("2.7B", 32, 80)):
        shapes[f"{size}-step"] = (4, heads, heads, 512, d, True, -1)
    for case in args.cases.split(","):
        fields = {"mode": case, "precision": "bf16", "causal": True}
        if case in shapes:
            b, hq, hkv, n, d, causal, wl = shapes[case]
            fields.update(batch=b, heads=hq, kv_heads=hkv, context=n, head_dim=d)
            results = dense_case(b, hq, hkv, n, d, causal, wl, impls, args)
        elif case.startswith("packed-d"):
            d = int(case[len("packed-d"):])
            results, lengths = packed_case(d, impls, args)
            fields.update(batch=16, heads=16, kv_heads=16, context=16384, head_dim=d, lengths=lengths)
        elif case == "window":
            fields.update(batch=1, heads=16, kv_heads=16, context=32768, head_dim=128, window_left=4095)
            results = {f"{k}-window-4096": r for k, r in dense_case(1, 16, 16, 32768, 128, True, 4095, ["lmscale"],
                                                                     args).items()}
            results.update({f"{k}-full-causal": r for k, r in dense_case(1, 16, 16, 32768, 128, True, -1,
                                                                         ["lmscale", "sdpa-cudnn"], args).items()})
        else:
            print(f"attention_layouts_bench: unknown case {case!r}", file=sys.stderr)
            return 2
        for name, (status, reason, metrics) in results.items():
            base = result_records.record_base("attention", name, status, fields, **common)
            result_records.append(args.out, result_records.metric_records(base, metrics, units, reason))
            f, fb = metrics.get("fwd_ms", {}).get("value"), metrics.get("fwdbwd_ms", {}).get("value")
            print(f"{case:12s} {name:28s} {status:4s} fwd {f if f is None else round(f, 3)} ms  fwd+bwd "
                  f"{fb if fb is None else round(fb, 3)} ms  {reason}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
