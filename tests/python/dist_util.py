"""Spawns real processes for the multi-rank tests: each rank joins a torch.distributed group over
TCP on a free local port, runs `fn(rank, world_size, *args)`, and any rank's exception fails the
test (torch.multiprocessing.spawn re-raises it with the rank's traceback). `fn` must be a
module-level function of an importable module (the test files are: pytest puts their folder on
sys.path, and spawned children inherit sys.path). With `timeout_s`, ranks still running after that
long are killed and the test fails naming a hang, so a collective left unmatched cannot stall CI."""
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world_size, port, backend, args):
    torch.set_num_threads(1)  # ranks share the machine's cores
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on the GPU machines
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
    # The rank passed: leave without the interpreter's teardown. With torch 2.11 on CPU, a process
    # that ran autograd and Gloo collectives aborts there now and then ("terminate called without an
    # active exception", no Python frame) — 2 in 30 runs of a script with no lmscale in it — which
    # would fail a test whose checks all held.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(fn, world_size=2, *args, backend="gloo", timeout_s=None):
    entry_args = (fn, world_size, free_port(), backend, args)
    if timeout_s is None:
        mp.spawn(_entry, args=entry_args, nprocs=world_size, join=True)
        return
    ctx = mp.start_processes(_entry, args=entry_args, nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):  # raises when a rank failed
        if time.monotonic() >= deadline:
            running = [rank for rank, p in enumerate(ctx.processes) if p.is_alive()]
            for rank in running:
                ctx.processes[rank].kill()
            raise TimeoutError(f"{fn.__name__}: rank(s) {running} still running after {timeout_s} s: a collective "
                               "that the other ranks never matched (a hang); killed them")
