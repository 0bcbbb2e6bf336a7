"""Where the drop-in benchmark's train step spends its GPU time, per impl (python -m lmscale.drop_in_bench
builds the models; this profiles them): after warm-up (compilation included), PyTorch's profiler over a few
steps, then the kernels with the most CUDA time per step, the operators with the most CPU time of their own,
and the step time without the profiler.

    python3 tools/probes/drop_in/drop_in_profile.py --size xl --impls torch-compile lmscale-nn-compile [--top 25]

Needs lmscale importable (the wheel, or PYTHONPATH=python with LMSCALE_BUILD_DIR naming a build folder).
"""
import argparse
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

from lmscale import drop_in_bench as dib


def timed(step, n):
    times = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="xl", choices=list(dib.SIZES))
    parser.add_argument("--impls", nargs="+", default=["torch-compile", "lmscale-nn-compile"], choices=dib.IMPLS)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--cpu-top", type=int, default=15)
    args = parser.parse_args()
    c = {"vocab": 10000, "context": 512, "batch": 4}
    device = torch.device("cuda")
    for impl in args.impls:
        model, step = dib.make_step(impl, args.size, c, device)  # the step the benchmark times
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        plain = timed(step, 5)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.key_averages() if e.device_time_total > 0 and e.device_type.name == "CUDA"]
        kernels.sort(key=lambda e: e.device_time_total, reverse=True)
        total = sum(e.device_time_total for e in kernels) / args.steps / 1e3
        print(f"\n== {args.size} {impl}: step {plain:.2f} ms (median of 5, no profiler); "
              f"{total:.2f} ms of kernels per step; top {args.top}")
        print(f"{'ms/step':>8} {'calls/step':>10}  kernel")
        for e in kernels[:args.top]:
            print(f"{e.device_time_total / args.steps / 1e3:8.3f} {e.count / args.steps:10.1f}  {e.key[:150]}")
        # Host side: the operators with the most CPU time of their own (where a host-bound step goes).
        cpu = sorted((e for e in prof.key_averages() if e.self_cpu_time_total > 0), key=lambda e: e.self_cpu_time_total,
                     reverse=True)
        print(f"{'cpu ms/step':>11} {'calls/step':>10}  operator (self CPU time)")
        for e in cpu[:args.cpu_top]:
            print(f"{e.self_cpu_time_total / args.steps / 1e3:11.3f} {e.count / args.steps:10.1f}  {e.key[:120]}")
        del model, step
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
