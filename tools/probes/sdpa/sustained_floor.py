"""What the H100 sustains under its power cap, as `flash_hopper_probe bwd_sustain` and `lmscale bench attention`
time a phase (each call back to back for SECONDS after half a second of warm-up; mean per call):
  * cuBLAS bf16 GEMMs (torch.matmul, random normal operands): the tensor core's sustained rate with nothing but
    GEMM work, the ceiling an attention kernel's TFLOP/s can be read against;
  * SDPA's cuDNN and flash backends, fwd + o.sum() + bwd and fwd alone, causal bf16, on the attention shapes
    given (B H N D; default the leaderboard shape and 16k x 128), timed the same way as the probe's phases.
Usage: python3 tools/probes/sdpa/sustained_floor.py [SECONDS] [--attention "B H N D;..."]
Log clocks and power beside it (nvidia-smi -lms) to see the cap: docs/flash_history.md, "Where a tile's energy goes"."""
import argparse
import time

import torch
from torch.nn.attention import sdpa_kernel

from sdpa_cases import causal_fwd_flop, sdpa_cases


def sustained_ms(fn, seconds):
    """Mean ms per call over `seconds` of back-to-back calls (batches of 8 between CUDA events) after 0.5 s."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def run_for(s):
        total, calls = 0.0, 0
        while total < s * 1e3:
            start.record()
            for _ in range(8):
                fn()
            stop.record()
            stop.synchronize()
            total += start.elapsed_time(stop)
            calls += 8
        return total / calls

    run_for(0.5)
    return run_for(seconds)


def gemms(seconds):
    for m, n, k in ((8192, 8192, 8192), (16384, 16384, 8192), (4096, 4096, 4096)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ms = sustained_ms(lambda: torch.matmul(a, b, out=c), seconds)
        print(f"gemm bf16 {m}x{n}x{k} {time.strftime('%T')}  {ms:.3f} ms  {2 * m * n * k / ms / 1e9:.0f} TFLOP/s",
              flush=True)
        del a, b, c


def attention(shapes, seconds):
    for b, h, n, d, name, backend, fwd, fwd_bwd in sdpa_cases(shapes):
        flop = causal_fwd_flop(b, h, n, d)
        try:
            with sdpa_kernel(backend):
                t_fb = sustained_ms(fwd_bwd, seconds)
                with torch.no_grad():
                    t_f = sustained_ms(fwd, seconds)
            print(f"sdpa {name:5s} b={b} h={h} s={n} d={d} causal=1 {time.strftime('%T')}  fwd+bwd {t_fb:.3f} ms "
                  f"({3.5 * flop / t_fb / 1e9:.0f} TFLOP/s)  fwd {t_f:.3f} ms ({flop / t_f / 1e9:.0f})", flush=True)
        except RuntimeError as e:  # a backend that does not serve the shape says so and the rest go on
            print(f"sdpa {name} b={b} h={h} s={n} d={d}: {e}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seconds", nargs="?", type=float, default=1.5)
    ap.add_argument("--attention", default="1 16 16384 64;1 16 16384 128", help='"B H N D" entries separated by ;')
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("sustained_floor.py: needs a CUDA GPU (run it through the device tool)")
    print(torch.cuda.get_device_name(), flush=True)
    gemms(args.seconds)
    shapes = [tuple(int(x) for x in s.split()) for s in args.attention.split(";") if s.strip()]
    attention(shapes, args.seconds)


if __name__ == "__main__":
    main()
