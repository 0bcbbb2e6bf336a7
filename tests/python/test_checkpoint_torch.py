"""A checkpoint of `lmscale train` loads into the PyTorch reference model as a PyTorch user loads any
safetensors file (`safetensors.torch.load_file` + `load_state_dict`, strict), and that model's logits equal
lmscale's forward (`lmscale sample --logits`) on the same tokens: CPU, fp32. AdamW's state loads the same way."""
import json

import pytest
import torch

from lmscale.baseline.e2e import LM
from train_cli_util import lmscale, trained_checkpoints

safetensors_torch = pytest.importorskip("safetensors.torch", reason="pip install -c constraints.txt safetensors "
                                        "(./lmscale installs it into its .venv)")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return trained_checkpoints(tmp_path_factory.mktemp("torch"), "--steps", "6", "--eval-every", "3", "--lr",
                               "3e-3") / "step-00000006"


def reference_model(folder):
    m = json.loads((folder / "manifest.json").read_text())["model"]
    return LM(m["vocab_size"], m["d_model"], m["d_ff"], m["num_layers"], m["num_heads"], m["context_length"], "naive")


def test_load_state_dict_then_the_logits_match_lmscale(checkpoint, tmp_path):
    model = reference_model(checkpoint)
    state = safetensors_torch.load_file(str(checkpoint / "model.safetensors"))
    model.load_state_dict(state)  # strict: every name and shape of the reference, nothing left over
    logits_file = tmp_path / "logits.safetensors"
    r = lmscale("sample", "--checkpoint", checkpoint, "--prompt", "def f3(x):\n    return", "--max-new-tokens", "0",
                "--logits", logits_file)
    assert r.returncode == 0, r.stderr
    theirs = safetensors_torch.load_file(str(logits_file))
    with torch.no_grad():
        ours = model(theirs["ids"])
    assert ours.shape == theirs["logits"].shape
    print("largest |difference|:", (ours - theirs["logits"]).abs().max().item())
    torch.testing.assert_close(ours, theirs["logits"], rtol=1e-5, atol=1e-5)
    # Trained weights, not the initial ones: the same model with its own init gives other logits.
    assert not torch.allclose(reference_model(checkpoint)(theirs["ids"]), theirs["logits"], atol=1e-2)


def test_the_optimizer_state_is_in_the_reference_names(checkpoint):
    opt = safetensors_torch.load_file(str(checkpoint / "optimizer.safetensors"))
    params = dict(reference_model(checkpoint).named_parameters())
    assert opt["step"].item() == 6
    for name, p in params.items():
        assert opt[f"exp_avg.{name}"].shape == p.shape and opt[f"exp_avg_sq.{name}"].shape == p.shape
        assert opt[f"exp_avg_sq.{name}"].min() >= 0 and opt[f"exp_avg_sq.{name}"].max() > 0, name
    assert len(opt) == 2 * len(params) + 1
