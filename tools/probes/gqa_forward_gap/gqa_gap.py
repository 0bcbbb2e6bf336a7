"""Where the GQA forward's time goes between the kernel and the call, on a GPU.

Question: at 5249682 lmscale's GQA forward through ``flash_attn_func`` took 0.361 ms (2 x 32q/4kv x 4096 x 64) and
0.921 ms (1 x 32q/8kv x 8192 x 128) against SDPA cuDNN's 0.330 / 0.905, while the kernel alone in
tools/flash_hopper_probe.cu took 0.343 / 0.889: is the difference in the call (other kernels, gaps between them) or in
the kernel under the bench's conditions? Each impl is timed as attention_layouts_bench times it (calls queued, CUDA
events), in both orders, and its kernels are listed with their device time from torch.profiler.
Retire: when the GQA forwards are no slower than cuDNN's in attention_layouts_bench (issue 40's goals).

    python tools/probes/gqa_forward_gap/gqa_gap.py [--out FILE.json]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from lmscale.attention_layouts_bench import timed
from lmscale.flash_attn import flash_attn_func

SHAPES = {"gqa-4k": (2, 32, 4, 4096, 64), "gqa-8k": (1, 32, 8, 8192, 128)}


def impls():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn(q, k, v):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True, enable_gqa=True).transpose(1, 2)
    return {"lmscale": lambda q, k, v: flash_attn_func(q, k, v, causal=True), "sdpa-cudnn": cudnn}


def kernels(fn, calls=10):
    """{kernel name: device microseconds per call} over `calls` calls."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" and e.count:
            out[e.key[:90]] = round(e.self_device_time_total / calls, 2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    records = []
    for case, (b, hq, hkv, n, d) in SHAPES.items():
        q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16)
        fns = impls()
        samples = {name: [] for name in fns}
        with torch.no_grad():
            for order in (list(fns), list(fns)[::-1]):
                for name in order:
                    samples[name].append(statistics.median(timed(lambda: fns[name](q, k, v), 10, args.iters)))
            for name, fn in fns.items():
                ks = kernels(lambda: fn(q, k, v))
                rec = {"case": case, "impl": name, "fwd_ms": round(sum(samples[name]) / 2, 4),
                       "fwd_ms_by_order": [round(x, 4) for x in samples[name]], "kernels_us": ks,
                       "kernel_sum_ms": round(sum(ks.values()) / 1000, 4)}
                records.append(rec)
                print(f"{case} {name:10s} fwd {rec['fwd_ms']:.4f} ms (orders {rec['fwd_ms_by_order']})  "
                      f"kernels {rec['kernel_sum_ms']:.4f} ms: " + ", ".join(f"{k} {t}" for k, t in ks.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
