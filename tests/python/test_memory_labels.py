"""`lmscale memory` snapshots carry lmscale's labels inside the pickle: every allocation recorded
after the recording starts has `user_metadata` "phase=<init|forward|backward|optimizer> where=<range:
op>", so PyTorch's memory viewer (pytorch.org/memory_viz) shows where a block came from. Needs CUDA
(the CPU allocator keeps no history): skipped without a GPU."""
import os
import pickle
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def lmscale_binary() -> Path:
    return Path(os.environ.get("LMSCALE_BUILD_DIR", ROOT / "build")).resolve() / "lmscale"


@pytest.mark.gpu
def test_snapshot_pickle_carries_phase_and_op_labels(tmp_path):
    cmd = [str(lmscale_binary()), "memory", "--device", "cuda", "--size", "tiny", "--context", "64",
           "--precision", "fp32", "--mode", "train-step", "--no-table", "--no-plot", "--out", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    pickles = list(tmp_path.glob("memory_*train-step.pickle"))
    assert len(pickles) == 1, list(tmp_path.iterdir())
    snapshot = pickle.loads(pickles[0].read_bytes())
    allocs = [e for trace in snapshot["device_traces"] for e in trace if e.get("action") == "alloc"]
    assert allocs, "the snapshot recorded no allocations"
    labels = [e.get("user_metadata", "") for e in allocs]
    labelled = [m for m in labels if m.startswith("phase=")]
    # Every allocation of the recorded steps is labelled, and each phase of a train step appears.
    assert len(labelled) == len(allocs), [m for m in labels if not m.startswith("phase=")][:5]
    phases = {m.split()[0] for m in labelled}
    assert {"phase=forward", "phase=backward", "phase=optimizer"} <= phases, phases
    assert any("where=" in m and "aten::" in m for m in labelled), labelled[:5]
