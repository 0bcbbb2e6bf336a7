"""Host time of one attention call per path at the training steps' shapes (docs/spec.md §1), on a GPU.

Question: where does lmscale's fwd+bwd at 4 x H x 512 spend the host time that makes it slower than SDPA's cuDNN
call, though its kernels are faster? Each path is timed two ways: the wall time per call of N calls queued with one
synchronisation at the end (host-bound calls: the host's time per call), and the CUDA-event time per call as
attention_layouts_bench.timed measures it; the kernels one call launches come from torch.profiler.
Retire: when the step shapes' fwd+bwd is no slower than cuDNN's (issue 40, item 6) and the bench shows it.

    python tools/probes/attention_host/host_time.py [--out FILE.json]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

from lmscale.attention import FlashAttentionFunction
from lmscale.flash_attn import flash_attn_func

SHAPES = {"small": (4, 12, 512, 64), "xl": (4, 25, 512, 64), "2.7B": (4, 32, 512, 80)}


def paths(causal=True):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    op = torch.ops.lmscale.flash_attention
    fwd_op = torch.ops.lmscale.flash_attention_forward.default

    def sdpa(backend):
        def call(q, k, v):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal).transpose(1, 2)
        return call
    return {
        "flash_attn_func": lambda q, k, v: flash_attn_func(q, k, v, causal=causal),
        "op flash_attention (C++ Function)": lambda q, k, v: op(q.transpose(1, 2), k.transpose(1, 2),
                                                                 v.transpose(1, 2), causal).transpose(1, 2),
        "FlashAttentionFunction": lambda q, k, v: FlashAttentionFunction.apply(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal).transpose(1, 2),
        "forward op alone": lambda q, k, v: fwd_op(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   causal)[0].transpose(1, 2),
        "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }


def wall_and_events(step, n):
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(n):
        step()
    t_host = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return t_host / n * 1e3, start.elapsed_time(end) / n


def kernels_of(step):
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return names, gpu_us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--n", type=int, default=300)
    args = ap.parse_args()
    rows = []
    for shape, (b, h, n, d) in SHAPES.items():
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn_like(q)
        for name, fn in paths().items():
            for mode in ("fwd", "fwdbwd"):
                if mode == "fwd":
                    def step():
                        with torch.no_grad():
                            fn(q, k, v)
                else:
                    if name == "forward op alone":
                        continue

                    def step():
                        torch.autograd.grad(fn(q, k, v), (q, k, v), dout)
                try:
                    host_ms, event_ms = wall_and_events(step, args.n)
                    kernels, gpu_us = kernels_of(step)
                except Exception as e:  # a backend that cannot serve the shape: a recorded cell
                    print(f"{shape:5s} {mode:6s} {name:34s} failed: {str(e).splitlines()[0][:120]}", flush=True)
                    continue
                row = {"shape": shape, "b": b, "h": h, "n": n, "d": d, "path": name, "mode": mode,
                       "host_ms": host_ms, "event_ms": event_ms, "kernels": len(kernels), "kernel_us": gpu_us,
                       "kernel_names": kernels}
                rows.append(row)
                print(f"{shape:5s} {mode:6s} {name:34s} host {host_ms:.3f} ms  events {event_ms:.3f} ms  "
                      f"{len(kernels)} kernels {gpu_us:.0f} us", flush=True)
    if args.out:  # one JSON list, not bench records (lmscale report reads *.jsonl as those)
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=0)


if __name__ == "__main__":
    main()
