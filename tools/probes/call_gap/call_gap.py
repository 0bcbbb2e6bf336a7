"""Where an attention call's time goes between its kernels and the call, on a GPU: GQA and packed documents.

Question: at 5249682 lmscale's GQA forward through ``flash_attn_func`` took 0.361 ms (2 x 32q/4kv x 4096 x 64) and
0.921 ms (1 x 32q/8kv x 8192 x 128) against SDPA cuDNN's 0.330 / 0.905, while the kernel alone in
tools/flash_hopper_probe.cu took 0.343 / 0.889; and 16 packed documents reach ~65 % of a dense call's TFLOP/s. Is the
difference in the call (host time, other kernels, gaps between them) or in the kernels? Each call is timed as
attention_layouts_bench times it (calls queued, CUDA events; the impls in both orders), beside the host's wall time per
queued call (a call whose host time exceeds its event time is host-bound), and its kernels are listed with their
device time from torch.profiler. Packed documents: the bench's lengths (``packed_lengths``), forward and fwd+bwd.
Retire: when the GQA forwards are no slower than cuDNN's and the packed documents' TFLOP/s is the kernels' in
attention_layouts_bench (issue 40's goals), or when that bench reports host time and kernels per impl itself.

    python tools/probes/call_gap/call_gap.py [--cases gqa-4k,gqa-8k,packed-d64,packed-d128] [--out FILE.json]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from lmscale.attention_layouts_bench import packed_lengths, timed
from lmscale.flash_attn import flash_attn_func, flash_attn_varlen_func

GQA = {"gqa-4k": (2, 32, 4, 4096, 64), "gqa-8k": (1, 32, 8, 8192, 128)}
PACKED = {"packed-d64": 64, "packed-d128": 128}


def cudnn(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True, enable_gqa=True).transpose(1, 2)


def kernels(fn, calls=10):
    """{kernel name: device microseconds per call} over `calls` calls."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return {e.key[:90]: round(e.self_device_time_total / calls, 2)
            for e in prof.key_averages() if e.device_type.name == "CUDA" and e.count}


def host_ms(fn, n):
    """Wall milliseconds per call of n calls queued with no synchronisation between them."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return 1e3 * t / n


def case_calls(case):
    """{impl: {phase: fn()}} for one case."""
    dev = torch.device("cuda")
    if case in GQA:
        b, hq, hkv, n, d = GQA[case]
        q = torch.randn(b, n, hq, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, n, hkv, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, n, hkv, d, device=dev, dtype=torch.bfloat16)
        return {"lmscale": {"fwd": lambda: flash_attn_func(q, k, v, causal=True)},
                "sdpa-cudnn": {"fwd": lambda: cudnn(q, k, v)}}
    d, h, total = PACKED[case], 16, 16384
    lengths = packed_lengths(total, 16)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    longest = max(lengths)
    q, k, v = (torch.randn(total, h, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn_like(q)

    def fwd():
        with torch.no_grad():
            return flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True)

    def fwdbwd():
        torch.autograd.grad(flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True), (q, k, v), dout)
    return {"lmscale-varlen": {"fwd": fwd, "fwdbwd": fwdbwd}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="gqa-4k,gqa-8k,packed-d64,packed-d128")
    ap.add_argument("--out")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    records = []
    for case in args.cases.split(","):
        calls = case_calls(case)
        samples = {(impl, phase): [] for impl, phases in calls.items() for phase in phases}
        with torch.no_grad() if case in GQA else torch.enable_grad():
            for order in (list(samples), list(samples)[::-1]):
                for key in order:
                    fn = calls[key[0]][key[1]]
                    samples[key].append(statistics.median(timed(fn, 10, args.iters)))
            for (impl, phase), s in samples.items():
                fn = calls[impl][phase]
                ks = kernels(fn)
                rec = {"case": case, "impl": impl, "phase": phase, "event_ms": round(sum(s) / 2, 4),
                       "event_ms_by_order": [round(x, 4) for x in s], "host_ms": round(host_ms(fn, args.iters), 4),
                       "kernels_us": ks, "kernel_sum_ms": round(sum(ks.values()) / 1000, 4)}
                records.append(rec)
                print(f"{case} {impl} {phase}: events {rec['event_ms']:.4f} ms (orders {rec['event_ms_by_order']}), "
                      f"host {rec['host_ms']:.4f} ms/call, kernels {rec['kernel_sum_ms']:.4f} ms: "
                      + ", ".join(f"{k} {t}" for k, t in ks.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
