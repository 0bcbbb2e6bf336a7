"""PyTorch SDPA timings (flash and cuDNN backends) on issue 17's attention shapes, to print beside
tools/flash_hopper_probe in the same device call: forward, and forward + o.sum() + backward, by
triton.testing.do_bench (bf16, causal). Usage: python3 tools/probes/sdpa/sdpa_attention_time.py"""
import triton
from torch.nn.attention import sdpa_kernel

from sdpa_cases import causal_fwd_flop, sdpa_cases

SHAPES = [(1, 16, 16384, 64), (1, 16, 16384, 128), (4, 32, 2048, 80), (1, 16, 8192, 128), (4, 16, 4096, 64),
          (4, 25, 512, 64)]  # (B, H, N, D); the last: the xl model's attention at context 512


def main():
    for b, h, n, d, name, backend, fwd, fwd_bwd in sdpa_cases(SHAPES):
        flop = causal_fwd_flop(b, h, n, d)
        try:
            with sdpa_kernel(backend):
                t_f = triton.testing.do_bench(fwd, warmup=25, rep=100)
                t_fb = triton.testing.do_bench(fwd_bwd, warmup=25, rep=100)
            print(f"sdpa {name:5s} b={b} h={h} s={n} d={d} causal=1  fwd {t_f:.3f} ms ({flop / t_f / 1e9:.0f})  "
                  f"fwd+bwd {t_fb:.3f} ms ({3.5 * flop / t_fb / 1e9:.0f} TFLOP/s)  bwd~ {t_fb - t_f:.3f}", flush=True)
        except RuntimeError as e:  # a backend that does not serve the shape says so and the rest go on
            print(f"sdpa {name} b={b} h={h} s={n} d={d}: {e}", flush=True)


if __name__ == "__main__":
    main()
