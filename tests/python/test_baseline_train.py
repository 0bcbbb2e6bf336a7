"""The PyTorch reference of `lmscale train` (python/lmscale/baseline/train.py): it trains on the
batches and learning rates it is handed, lowers the validation loss of a tiny model on text, skips
evaluations already recorded, and refuses a bad token file with its cause. CPU only."""
import array
import io
import json
import math

import pytest

from lmscale.baseline import train


def token_file(path, ids):
    path.write_bytes(array.array("H", ids).tobytes())  # uint16, the machine's order (little-endian here)
    return str(path)


def text_ids(n_files, seed):
    ids = []
    for f in range(n_files):
        text = "".join(f"def f{(i * 7 + f + seed) % 23}(x):\n    return x * {i % 5}\n" for i in range(40))
        ids += list(text.encode()) + [256]
    return ids


def run_of(tmp_path, steps=30, recorded=(), clip=1.0):
    train_ids, val_ids = text_ids(12, 0), text_ids(3, 5)
    B, T = 4, 32
    n = len(train_ids)
    # The same shape of data order as lmscale's (any fixed positions will do here).
    starts = [[(s * 7919 + r * 104729) % (n - T - 1) for r in range(B)] for s in range(steps)]
    lrs = [3e-3 * min(1.0, s / 3) for s in range(1, steps + 1)]
    return {"impl": "torch-eager", "vocab": 512, "d_model": 64, "d_ff": 256, "layers": 2, "heads": 4,
            "model_context": T, "context": T, "batch": B, "precision": "fp32", "device": "cpu", "seed": 0,
            "adamw": {"lr": 3e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}, "clip": clip,
            "train_path": token_file(tmp_path / "train.bin", train_ids),
            "val_path": token_file(tmp_path / "val.bin", val_ids), "eval_steps": list(range(0, steps + 1, 10)),
            "recorded": list(recorded), "eval_batches": 2, "val_starts": [0, 100, 200, 300, 400, 500, 600, 700],
            "lr": lrs, "train_starts": starts}


def evaluations(run):
    out = io.StringIO()
    train.train(run, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [line["eval"] for line in lines if "eval" in line], [line["step"] for line in lines if "step" in line]


def test_reference_lowers_the_validation_loss(tmp_path):
    evals, progress = evaluations(run_of(tmp_path))
    assert [e["step"] for e in evals] == [0, 10, 20, 30]
    assert abs(evals[0]["val_loss"] - math.log(512)) < 1.0
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 1.5, evals
    assert evals[0]["train_loss"] is None and evals[-1]["train_loss"] > 0
    assert evals[-1]["lr"] == pytest.approx(3e-3)
    assert progress and progress[-1] == 30


def test_recorded_evaluations_are_trained_through_not_repeated(tmp_path):
    whole, _ = evaluations(run_of(tmp_path))
    rest, _ = evaluations(run_of(tmp_path, recorded=(0, 10)))
    assert [e["step"] for e in rest] == [20, 30]
    for a, b in zip(whole[2:], rest):  # the same run replayed: the same losses on the CPU
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)


def test_clipping_uses_the_runs_norm_and_zero_turns_it_off(tmp_path, monkeypatch):
    caps = []
    clip = train.torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(train.torch.nn.utils, "clip_grad_norm_", lambda p, cap: caps.append(cap) or clip(p, cap))
    evals, _ = evaluations(run_of(tmp_path, steps=10, clip=0.5))
    assert caps == [0.5] * 10
    assert evals[-1]["grad_norm"] > 0  # measured before clipping
    caps.clear()
    evaluations(run_of(tmp_path, steps=10, clip=0))
    assert caps == [math.inf] * 10  # measured, never scaled


@pytest.mark.parametrize("content, message", [(b"", "0 bytes"), (b"\x01\x00\x02", "3 bytes"),
                                              (array.array("H", [1, 600]).tobytes(), "id 600")])
def test_bad_token_files_are_refused(tmp_path, content, message):
    path = tmp_path / "t.bin"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        train.token_file(str(path), 512)


def lmscale_name(name):
    """This model's parameter name in lmscale's spelling (the inverse of train.RENAMES)."""
    name = {"emb": "token_embeddings.weight", "ln.weight": "ln_final.weight", "head.weight": "lm_head.weight"}.get(name, name)
    name = name.replace("blocks.", "layers.")
    for p in ("q", "k", "v"):
        name = name.replace(f".attn.{p}.", f".attn.{p}_proj.")
    name = name.replace(".attn.o.", ".attn.output_proj.")
    for w in ("w1", "w2", "w3"):
        name = name.replace(f".{w}.", f".ffn.{w}.")
    return name


def test_starts_from_lmscales_initial_weights(tmp_path):
    import torch
    torch.manual_seed(1)
    source = train.LM(512, 64, 256, 2, 4, 32, "sdpa")
    index, offset, chunks = [], 0, []
    for name, p in reversed(list(source.named_parameters())):  # any order: the index says where each is
        index.append({"name": lmscale_name(name), "shape": list(p.shape), "offset": offset})
        chunks.append(p.detach().flatten())
        offset += p.numel()
    path = tmp_path / "w.bin"
    path.write_bytes(array.array("f", torch.cat(chunks).tolist()).tobytes())  # fp32, little-endian here
    (tmp_path / "w.bin.json").write_text(json.dumps(index))
    torch.manual_seed(2)
    model = train.LM(512, 64, 256, 2, 4, 32, "sdpa")
    train.load_lmscale_weights(model, str(path))
    for (name, a), (_, b) in zip(source.named_parameters(), model.named_parameters()):
        assert torch.equal(a, b), name
    (tmp_path / "w.bin.json").write_text(json.dumps(index[1:]))  # one missing: named
    with pytest.raises(ValueError, match="left these parameters unset"):
        train.load_lmscale_weights(model, str(path))


def test_a_non_finite_loss_ends_the_run_with_one_line(tmp_path):
    """lmscale's Note [divergence]: the first non-finite training loss or gradient norm stops the run
    (before its update) with one {"diverged": ...} line, the last the module prints."""
    run = run_of(tmp_path, steps=20)
    run["lr"] = [1e30] * 20
    out = io.StringIO()
    train.train(run, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    diverged = [line["diverged"] for line in lines if "diverged" in line]
    assert len(diverged) == 1 and lines[-1] == {"diverged": diverged[0]}, lines
    assert 1 <= diverged[0]["step"] < 20
    assert diverged[0]["what"] in ("training loss", "gradient norm")
    assert not math.isfinite(float(diverged[0]["value"]))
    assert all(line["eval"]["step"] < diverged[0]["step"] for line in lines if "eval" in line)


def test_segments_start_after_each_end_of_file_id():
    import torch
    E = 256
    rows = torch.tensor([[E, 1, 2, 3, 4, 5],    # the row starts on an id: its document's last token, alone
                         [1, 2, 3, 4, 5, E],    # ends on one: no segment after it
                         [1, E, E, 2, 3, 4],    # two in a row: the second is a document of one token
                         [1, 2, 3, 4, 5, 6]])   # none: one segment
    assert train.segment_ids(rows, E).tolist() == [[0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 1, 2, 2, 2],
                                                   [0, 0, 0, 0, 0, 0]]


@pytest.mark.parametrize("attention", ["sdpa", "naive"])
def test_a_packed_row_gives_each_document_its_logits_alone(attention):
    import torch
    torch.manual_seed(0)
    E = 256
    model = train.LM(300, 32, 64, 2, 4, 16, attention).double()
    x = torch.tensor([[5, 7, E, 9, 10, 11, E, E, 3, 4, 8, 2]])
    packed = model(x, train.segment_ids(x, E))
    # Positions run through the row; RoPE makes scores depend on distances only, so a document
    # shifted along the row scores as it does alone, up to the rounding of the fp32 RoPE table (~1e-7).
    for a, b in [(0, 3), (3, 7), (7, 8), (8, 12)]:
        assert torch.allclose(packed[:, a:b], model(x[:, a:b]), atol=1e-6, rtol=0), (a, b)
    assert not torch.allclose(packed[:, 3:7], model(x)[:, 3:7], atol=1e-3)  # the mask did something


def test_packed_run_trains_with_the_segments(tmp_path, monkeypatch):
    seen = []
    ids = train.segment_ids
    monkeypatch.setattr(train, "segment_ids", lambda x, e: seen.append(e) or ids(x, e))
    run = run_of(tmp_path, steps=10)
    run["pack"], run["end_of_file_id"] = True, 256
    evals, _ = evaluations(run)
    assert [e["step"] for e in evals] == [0, 10] and seen and set(seen) == {256}
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
