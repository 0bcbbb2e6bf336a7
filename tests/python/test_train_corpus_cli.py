"""`lmscale train corpus` as a user meets it (issue 41 row 8): a write that fails (a full disk; here a file
size limit, which cuts the write() short as a full disk does) leaves no temporary file and no half corpus
and names the errno; `--ext py` (no dot) says where the dot goes; an `--out` that is a file gets a sentence, not a
library's exception text; usage errors exit 2 (the CLI's code for them), before any source is read."""
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def lmscale_binary() -> Path:
    return Path(os.environ.get("LMSCALE_BUILD_DIR", ROOT / "build")).resolve() / "lmscale"


def corpus(*args, limit_bytes=None):
    def limited():  # SIGXFSZ ignored, so a write past the limit comes back short instead of killing lmscale
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([str(lmscale_binary()), "train", "corpus", *map(str, args)], capture_output=True, text=True,
                          timeout=120, preexec_fn=limited if limit_bytes else None)


@pytest.fixture
def sources(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    for i in range(30):
        (src / ("pkg" if i % 2 else "") / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x * {i}\n" * 40)
    return src


def test_a_corpus_is_made(sources, tmp_path):
    r = corpus("--from", sources, "--out", tmp_path / "out", "--val-percent", "20")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["corpus.json", "train.bin", "val.bin"]


def test_a_failed_write_leaves_nothing_and_names_the_errno(sources, tmp_path):
    out = tmp_path / "out"
    r = corpus("--from", sources, "--out", out, "--val-percent", "20", limit_bytes=8192)
    assert r.returncode == 1, r.stdout + r.stderr
    # The limit cuts the write short, which the writer reports as a full disk does: ENOSPC.
    assert "No space left on device (ENOSPC)" in r.stderr and "/out/train.bin" in r.stderr, r.stderr
    assert "no temporary file was left" in r.stderr and "kB in all" in r.stderr, r.stderr
    assert list(out.iterdir()) == []  # no train.bin.tmp (nor any temporary file), no half corpus


def test_a_failed_second_file_removes_the_first(sources, tmp_path):
    """train.bin fits under the limit, val.bin does not: the train.bin just written goes too."""
    out = tmp_path / "out"
    probe = corpus("--from", sources, "--out", tmp_path / "probe", "--val-percent", "80")
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "probe").iterdir()}
    assert probe.returncode == 0 and sizes["val.bin"] > sizes["train.bin"], (probe.stderr, sizes)
    r = corpus("--from", sources, "--out", out, "--val-percent", "80", limit_bytes=sizes["train.bin"])
    assert r.returncode == 1 and "(ENOSPC)" in r.stderr and "/out/val.bin" in r.stderr, r.stderr
    assert "already written were removed" in r.stderr, r.stderr
    assert list(out.iterdir()) == []


def test_an_extension_without_its_dot_is_named(sources, tmp_path):
    r = corpus("--from", sources, "--out", tmp_path / "out", "--ext", "py")
    assert r.returncode == 2, r.stderr
    assert "an extension starts with a dot: --ext .py" in r.stderr, r.stderr
    r = corpus("--from", sources, "--out", tmp_path / "out", "--ext", ".rs")
    assert r.returncode == 2 and "no file in" in r.stderr and "--ext .txt" in r.stderr, r.stderr


def test_out_that_is_a_file_gets_a_sentence(sources, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    r = corpus("--from", sources, "--out", f)
    assert r.returncode == 2, r.stderr
    assert f"--out {f} is a file, not a folder" in r.stderr and "filesystem error" not in r.stderr, r.stderr


@pytest.mark.parametrize("args,words", [
    (["--from", "/nonexistent/src"], "--from /nonexistent/src is neither a file nor a folder (it does not exist)"),
    (["--val-percent", "0"], "--val-percent"),
    (["--from", "ONE_FILE"], "the corpus needs files in both splits"),
])
def test_usage_errors_exit_2(sources, tmp_path, args, words):
    if "--from" not in args:
        args = ["--from", sources, *args]
    args = [sources / "mod0.py" if a == "ONE_FILE" else a for a in args]
    r = corpus(*args, "--out", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    assert words in r.stderr, r.stderr


# ------------------------------------------------------------------ --tokenizer bpe | tokenizer.json (issue 42)

def test_a_bpe_corpus_records_the_tokenizer_that_made_it(sources, tmp_path):
    import hashlib
    import json

    import numpy as np

    tokenizers = pytest.importorskip("tokenizers")
    out = tmp_path / "bpe"
    r = corpus("--from", sources, "--out", out, "--val-percent", "20", "--tokenizer", "bpe", "--vocab", "300")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["corpus.json", "tokenizer.json", "train.bin", "val.bin"]
    manifest = json.loads((out / "corpus.json").read_text())
    tok = manifest["tokenizer"]
    assert tok["kind"] == "bpe" and tok["file"] == "tokenizer.json"
    assert tok["sha256"] == hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()
    tokenizer = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert manifest["vocab_needed"] == tokenizer.get_vocab_size() <= 300
    eot = tokenizer.token_to_id("<|endoftext|>")
    assert tok["end_of_file_id"] == eot
    ids = np.fromfile(out / "train.bin", dtype=np.uint16)
    assert len(ids) == manifest["train_tokens"] and ids.max() < manifest["vocab_needed"]
    first = ids[: int(np.argmax(ids == eot))].tolist()  # the first training file, decoded back to its text
    texts = {p.read_text() for p in sources.rglob("*.py")}
    assert tokenizer.decode(first) in texts
    assert len(ids) < sum(len(t) for t in texts)  # fewer tokens than bytes: merges were learned
    # The same tokenizer given as a file makes the same tokens, and the manifest says where they came from.
    again = corpus("--from", sources, "--out", tmp_path / "given", "--val-percent", "20",
                   "--tokenizer", out / "tokenizer.json")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "given" / "train.bin").read_bytes() == (out / "train.bin").read_bytes()
    given = json.loads((tmp_path / "given" / "corpus.json").read_text())["tokenizer"]
    assert given["kind"] == "tokenizer.json" and given["sha256"] == tok["sha256"]


@pytest.mark.parametrize("args,words", [
    (["--tokenizer", "nope.json"], "--tokenizer nope.json: expected bytes, bpe, or the path of a tokenizer.json"),
    (["--tokenizer", "bpe", "--vocab", "100"], "--vocab must be between 257"),
])
def test_tokenizer_usage_errors_exit_2(sources, tmp_path, args, words):
    r = corpus("--from", sources, "--out", tmp_path / "out", *args)
    assert r.returncode == 2 and words in r.stderr, r.stdout + r.stderr
