"""Helpers of the tests that run `lmscale train` and `lmscale sample` on the CPU: the binary, a small
corpus of generated Python files, and a train call with the tiny settings they share."""
import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# tiny (d_model 64, 2 layers) at context 32, batch 2: a step takes milliseconds on the CPU.
TINY = ["--device", "cpu", "--size", "tiny", "--context", "32", "--batch", "2", "--eval-batches", "2"]


def lmscale_binary() -> Path:
    return Path(os.environ.get("LMSCALE_BUILD_DIR", ROOT / "build")).resolve() / "lmscale"


def lmscale(*args, timeout=300):
    return subprocess.run([str(lmscale_binary()), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def make_sources(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i in range(24):
        (folder / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x * {i} + {i % 5}\n" * 30)
    return folder


def make_corpus(tmp: Path, *extra) -> Path:
    out = tmp / "corpus"
    r = lmscale("train", "corpus", "--from", make_sources(tmp / "src"), "--out", out, "--val-percent", "20", *extra)
    assert r.returncode == 0, r.stderr
    return out


def train(corpus: Path, out: Path, *args):
    return lmscale("train", "--corpus", corpus, "--out", out, *TINY, *args)


def losses(out: Path) -> dict:
    """{(metric, step): value} of every loss and gradient-norm record of <out>/train.jsonl."""
    got = {}
    for line in (out / "train.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("metric") in ("val_loss", "train_loss", "grad_norm"):
            assert (r["metric"], r["step"]) not in got, f"{r['metric']} at step {r['step']} recorded twice"
            got[(r["metric"], r["step"])] = r["value"]
    return got


def trained_checkpoints(tmp: Path, *args) -> Path:
    """A corpus under tmp, a tiny run trained on it with args, and the folder of its lmscale-fp32 checkpoints."""
    out = tmp / "out"
    r = train(make_corpus(tmp), out, *args)
    assert r.returncode == 0, r.stderr
    return out / "checkpoints/lmscale-fp32"
