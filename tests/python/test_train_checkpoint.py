"""Checkpoints of `lmscale train` on the CPU: a run stopped at a checkpoint and resumed with --resume records
the same losses as an uninterrupted run, every one equal to the last bit; the resumed invocation starts at the
checkpoint (it says so), not at step 0; a damaged newest checkpoint is skipped with a message naming it and the
one before it is used; a folder left by a write that crashed is no checkpoint; the manifest lists every file
with its size and SHA-256."""
import hashlib
import json

import pytest

from train_cli_util import losses, make_corpus, train

RUN = ["--steps", "8", "--eval-every", "2", "--seed", "3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "out"
    r = train(corpus, out, *RUN)
    assert r.returncode == 0, r.stderr
    return losses(out)


def test_resume_from_a_checkpoint_equals_an_uninterrupted_run(corpus, uninterrupted, tmp_path):
    out = tmp_path / "out"
    # Step 3 is between evaluations: the training-loss sum of steps 3 and 4 spans the stop.
    first = train(corpus, out, *RUN, "--save-every", "3", "--stop-at", "3")
    assert first.returncode == 0, first.stderr
    assert "stopped after step 3" in first.stderr, first.stderr
    assert (out / "checkpoints/lmscale-fp32/step-00000003/manifest.json").is_file()
    second = train(corpus, out, *RUN, "--save-every", "3", "--resume")
    assert second.returncode == 0, second.stderr
    assert "resuming from checkpoint" in second.stderr and "step-00000003 (step 3)" in second.stderr, second.stderr
    got = losses(out)
    assert sorted(got) == sorted(uninterrupted)
    for key, value in uninterrupted.items():
        assert got[key] == value, f"{key}: resumed {got[key]!r}, uninterrupted {value!r}"  # exact, not approximate


def test_a_damaged_newest_checkpoint_is_skipped(corpus, uninterrupted, tmp_path):
    out = tmp_path / "out"
    r = train(corpus, out, *RUN, "--save-every", "2", "--stop-at", "6", "--keep-checkpoints", "3")
    assert r.returncode == 0, r.stderr
    ckpts = out / "checkpoints/lmscale-fp32"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-00000002", "step-00000004", "step-00000006"]
    model = ckpts / "step-00000006/model.safetensors"
    data = bytearray(model.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit pattern in the last weight: same size, another hash
    model.write_bytes(bytes(data))
    (ckpts / ".tmp-step-00000008-12345").mkdir()  # a write that crashed before its rename
    r = train(corpus, out, *RUN, "--save-every", "2", "--resume")
    assert r.returncode == 0, r.stderr
    assert "step-00000006 is damaged, skipped: model.safetensors's SHA-256 differs" in r.stderr, r.stderr
    assert "step-00000004 (step 4)" in r.stderr, r.stderr
    assert losses(out) == uninterrupted
    assert not (ckpts / ".tmp-step-00000008-12345").exists()  # the next save cleared it


def test_the_manifest_lists_every_file_with_its_size_and_hash(corpus, tmp_path):
    out = tmp_path / "out"
    assert train(corpus, out, "--steps", "2", "--eval-every", "1").returncode == 0
    folder = out / "checkpoints/lmscale-fp32/step-00000002"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["step"] == 2 and manifest["optimizer"]["step"] == 2
    assert manifest["config"]["steps"] == 2 and manifest["config"]["size"] == "tiny"
    assert manifest["corpus"]["tokenizer"]["kind"] == "bytes" and manifest["corpus"]["corpus_hash"]
    assert set(manifest["files"]) == {"model.safetensors", "optimizer.safetensors", "trainer.safetensors"}
    for name, entry in manifest["files"].items():
        data = (folder / name).read_bytes()
        assert entry["bytes"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest(), name
    assert sorted(p.name for p in folder.iterdir()) == sorted([*manifest["files"], "manifest.json"])
