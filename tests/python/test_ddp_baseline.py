"""The PyTorch baselines of `bench ddp` (python -m lmscale.baseline.ddp): two real ranks over Gloo
on a tiny model, every design (single, DDP fp32, DDP bf16-compressed, FSDP2) recorded with its
step, backward, bytes sent and slowdown, and a clear error when started as one process."""
import json
import os
import pathlib
import socket
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + [p for p in [e.get("PYTHONPATH")] if p])
    return e


def test_every_design_is_recorded_over_gloo(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "lmscale.baseline.ddp", "--size", "tiny", "--context", "16", "--batch", "2", "--precision", "fp32",
           "--warmup", "0", "--steps", "2", "--out", str(tmp_path)]
    r = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    records = [json.loads(line) for line in (tmp_path / "ddp.jsonl").read_text().splitlines()]
    seen = {(x["impl"], x["metric"]) for x in records}
    for impl in ("torch-single", "torch-ddp", "torch-ddp-bf16", "torch-fsdp2"):
        assert (impl, "step_ms") in seen and (impl, "backward_ms") in seen, impl
    for impl in ("torch-ddp", "torch-ddp-bf16", "torch-fsdp2"):
        assert (impl, "bytes_sent_per_step") in seen and (impl, "backward_slowdown") in seen, impl
    sent = {x["impl"]: x["value"] for x in records if x["metric"] == "bytes_sent_per_step"}
    assert sent["torch-ddp-bf16"] * 2 == sent["torch-ddp"] > 0
    assert all(x["world"] == 2 and x["backend"] == "gloo" and x["command"] for x in records)


def test_one_process_is_refused_with_the_fix():
    e = env()
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        e.pop(k, None)
    r = subprocess.run([sys.executable, "-m", "lmscale.baseline.ddp", "--size", "tiny"], env=e, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert "torchrun --nproc-per-node 2 -m lmscale.baseline.ddp" in r.stderr
