"""Host time of the drop-in benchmark's compiled step (issue 28), without the profiler: how long the Python
thread takes to issue one training step, and how long each lmscale op call takes on the host.

    python3 tools/probes/drop_in/drop_in_host.py --size xl [--impls torch-compile lmscale-nn-compile lmscale-nn-compile-python]

Each impl runs in a fresh process (as python -m lmscale.drop_in_bench does). ``lmscale-nn-compile-python`` is
``lmscale-nn-compile`` with the ops' autograd dispatch as it was before issue 28's change: a Python kernel on
AutogradCUDA, which every call of the compiled graph went through (installed after compilation, so the graph
is the same; only the per-call dispatch differs). Per impl it prints:

- step: the median over --steps of the wall time of one step (CUDA events) and of the host time to issue it
  (perf_counter from a synchronized start until step() returns; the step has no sync of its own, so a step
  whose host time is close to its wall time is host-bound);
- for the lmscale impls, the host time of one call of each op at the size's shapes (bf16, batch x context,
  grad off as in a compiled graph; the mean over --calls back-to-back calls with no sync): as the graph calls
  it, and below autograd (the C++ op alone: what no autograd layer at all would cost).

Needs lmscale importable (the wheel, or PYTHONPATH=python with LMSCALE_BUILD_DIR naming a build folder).
``--device cpu --size tiny`` runs the same code on the CPU (the ATen references), as a smoke test.
"""
import argparse
import statistics
import subprocess
import sys
import time
import warnings

import torch

from lmscale import drop_in_bench as dib

IMPLS = ("torch-compile", "lmscale-nn-compile", "lmscale-nn-compile-python")


def python_autograd_dispatch():
    """Registers, for every lmscale op whose autograd formula is Python, a Python kernel on AutogradCUDA and
    AutogradCPU that passes grad-free calls below autograd the way torch.library.register_autograd's kernel
    does (torch/_library/autograd.py, forward_no_grad): the dispatch before issue 28's C++ kernel. Only for
    calls that record no graph (a compiled graph's); returns the Library, whose registrations live as long
    as it does."""
    lib = torch.library.Library("lmscale", "IMPL")
    names = ("rms_norm_forward", "rms_norm_backward", "swiglu_forward", "swiglu_backward", "rope_qkv_forward",
             "rope_qkv_backward", "cross_entropy_forward", "cross_entropy_backward", "flash_attention_forward",
             "flash_attention_backward")
    for name in names:
        op = getattr(torch.ops.lmscale, name).default

        def kernel(keyset, *args, op=op, **kwargs):
            if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
                raise RuntimeError("drop_in_host.py: the emulated dispatch serves grad-free calls only")
            with torch._C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)

        with warnings.catch_warnings():  # "Overriding a previously registered kernel": the point here
            warnings.simplefilter("ignore")
            for key in ("AutogradCPU", "AutogradCUDA"):
                lib.impl(name, kernel, key, with_keyset=True)
    return lib


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_times(step, device, n):
    """(wall ms, host ms) medians over n steps."""
    walls, hosts = [], []
    for _ in range(n):
        sync(device)
        t0 = time.perf_counter()
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        step()
        t1 = time.perf_counter()
        if device.type == "cuda":
            end.record()
            sync(device)
            walls.append(start.elapsed_time(end))
        else:
            walls.append((t1 - t0) * 1e3)
        hosts.append((t1 - t0) * 1e3)
    return statistics.median(walls), statistics.median(hosts)


def op_calls(size, c, device):
    """(name, fn) of each lmscale op as the compiled step calls it, on inputs of that size's shapes."""
    d, d_ff, _layers, heads = dib.SIZES[size]
    B, T, D = c["batch"], c["context"], d // heads
    ops = torch.ops.lmscale
    g = lambda *s, dt=torch.bfloat16: torch.randn(*s, dtype=dt, device=device)  # noqa: E731
    x, attn, w = g(B, T, d, dt=torch.float32), g(B, T, d), torch.ones(d, device=device)
    h, y, rstd = ops.rms_norm_forward(x, attn, w, 1e-5, torch.bfloat16)
    _, y1, rstd1 = ops.rms_norm_forward(x, None, w, 1e-5, torch.bfloat16)
    a, b = g(B, T, d_ff), g(B, T, d_ff)
    qkv = g(B, T, 3 * d)
    import lmscale.nn as lnn

    rot = lnn.rope_table(D, T, device=device)
    q, k, v = ops.rope_qkv_forward(qkv, rot, heads)
    o, L = ops.flash_attention_forward(q, k, v, True)
    dout = g(B, T, heads, D).transpose(1, 2)  # as the graph passes it: the o-projection's gradient, viewed
    return [
        ("rms_norm_forward", lambda: ops.rms_norm_forward.default(x, None, w, 1e-5, torch.bfloat16)),
        ("rms_norm_forward +residual", lambda: ops.rms_norm_forward.default(x, attn, w, 1e-5, torch.bfloat16)),
        ("rms_norm_backward", lambda: ops.rms_norm_backward.default(y1, None, x, w, rstd1)),
        ("rms_norm_backward +dh", lambda: ops.rms_norm_backward.default(y, x, h, w, rstd, torch.bfloat16)),
        ("swiglu_forward", lambda: ops.swiglu_forward.default(a, b)),
        ("swiglu_backward", lambda: ops.swiglu_backward.default(a, a, b)),
        ("rope_qkv_forward", lambda: ops.rope_qkv_forward.default(qkv, rot, heads)),
        ("rope_qkv_backward", lambda: ops.rope_qkv_backward.default(q, k, v, rot, heads)),
        ("flash_attention_forward", lambda: ops.flash_attention_forward.default(q, k, v, True)),
        ("flash_attention_backward", lambda: ops.flash_attention_backward.default(q, k, v, o, L, dout, True)),
    ]


def host_us(fn, device, n):
    """Host µs per call: n back-to-back calls (no sync between), after a synchronized start; best of 3."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(3):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    sync(device)
    return best


def run_impl(impl, args, device):
    c = {"vocab": 10000, "context": args.context, "batch": args.batch}
    model_impl = impl.removesuffix("-python")
    model, step = dib.make_step(model_impl, args.size, c, device)
    for _ in range(3):  # compiles
        step()
    sync(device)
    keep = python_autograd_dispatch() if impl.endswith("-python") else None
    wall, host = step_times(step, device, args.steps)
    print(f"{args.size} {impl:26} step {wall:8.2f} ms wall, {host:8.2f} ms host (median of {args.steps})", flush=True)
    del model, step
    if impl.startswith("lmscale"):
        with torch.no_grad():
            for name, fn in op_calls(args.size, c, device):
                graph = host_us(fn, device, args.calls)
                with torch._C._AutoDispatchBelowAutograd():
                    below = host_us(fn, device, args.calls)
                print(f"    {name:28} {graph:7.1f} us/call host as the graph calls it, {below:7.1f} below autograd",
                      flush=True)
    del keep


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="xl", choices=list(dib.SIZES))
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--calls", type=int, default=100, help="back-to-back calls per op timing")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--in-process", action="store_true", help="run every impl in this process")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch._dynamo.config.cache_size_limit = 64
    if args.in_process or len(args.impls) == 1:
        for impl in args.impls:
            run_impl(impl, args, device)
        return 0
    rc = 0
    for impl in args.impls:  # a fresh process each: an impl timed second in one process loses time (drop_in_bench)
        rc |= subprocess.call([sys.executable, __file__, *dib.argv_without(sys.argv[1:], "--impls"), "--impls", impl])
    return rc


if __name__ == "__main__":
    sys.exit(main())
