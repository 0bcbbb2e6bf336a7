"""Kernel time of SDPA's cuDNN and FlashAttention-2 backward (and forward) for one attention shape, from
the PyTorch profiler (CUPTI kernel durations, no launch or host time): the baseline for issue 26's
training-step goal, where lmscale's kernels are timed by `lmscale profile` the same way.
Usage: python3 tools/probes/sdpa/sdpa_kernel_time.py [B H N D]   (default: the xl model at context 512)"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile


def kernel_us(fn, reps):
    """Sum of CUDA kernel durations per call of fn, in microseconds, over `reps` calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages())
    kernels = sorted(((e.device_time_total / reps, e.key) for e in prof.key_averages() if e.device_time_total > 0),
                     reverse=True)
    return total / reps, kernels


def main():
    b, h, n, d = (int(x) for x in sys.argv[1:5]) if len(sys.argv) >= 5 else (4, 25, 512, 64)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            do = torch.randn_like(o)
            fwd_us, _ = kernel_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 20)
            bwd_us, kernels = kernel_us(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), 20)
        print(f"sdpa {name:5s} b={b} h={h} s={n} d={d} causal=1  kernel time per call: fwd {fwd_us:.1f} us  "
              f"bwd {bwd_us:.1f} us", flush=True)
        for us, key in kernels:
            print(f"    {us:8.1f} us  {key[:100]}")


if __name__ == "__main__":
    main()
