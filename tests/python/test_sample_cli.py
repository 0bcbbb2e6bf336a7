"""`lmscale sample` on a tiny trained checkpoint (CPU): greedy output is the same on a second run, starts with
the prompt and continues it; top-p draws are the same for the same seed; a BPE corpus's checkpoint decodes
through its own tokenizer.json; a missing or damaged checkpoint is a usage error (exit 2) naming the problem and
the fix."""
import pytest

from train_cli_util import lmscale, make_corpus, train, trained_checkpoints


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    return trained_checkpoints(tmp_path_factory.mktemp("sample"), "--steps", "20", "--eval-every", "10", "--lr", "1e-2")


def sample(folder, *args):
    return lmscale("sample", "--checkpoint", folder, "--prompt", "def f1(x):", "--max-new-tokens", "24", *args)


def test_greedy_is_deterministic_and_continues_the_prompt(run_folder):
    first, second = sample(run_folder, "--temperature", "0"), sample(run_folder, "--temperature", "0")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert first.stdout.startswith("def f1(x):") and len(first.stdout) > len("def f1(x):\n")
    assert "step 20" in first.stderr and "greedy" in first.stderr, first.stderr


def test_top_p_follows_the_seed(run_folder):
    a, b = sample(run_folder, "--temperature", "1", "--top-p", "0.9", "--seed", "5"), sample(
        run_folder, "--temperature", "1", "--top-p", "0.9", "--seed", "5")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    others = {sample(run_folder, "--temperature", "1", "--seed", str(s)).stdout for s in range(4)}
    assert len(others) > 1  # the seed changes the draws: sampling is not greedy in disguise


def test_a_missing_checkpoint_names_the_fix(tmp_path):
    r = sample(tmp_path / "nowhere")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no such folder" in r.stderr and "lmscale train" in r.stderr, r.stderr


def test_a_damaged_checkpoint_names_the_file(run_folder, tmp_path):
    import shutil
    copy = tmp_path / "step-00000020"
    shutil.copytree(run_folder / "step-00000020", copy)
    (copy / "model.safetensors").write_bytes((copy / "model.safetensors").read_bytes()[:100])
    r = sample(copy)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "is damaged: model.safetensors has 100 bytes" in r.stderr and "Pass another step" in r.stderr, r.stderr


def test_a_bpe_checkpoint_samples_with_its_tokenizer(tmp_path):
    pytest.importorskip("tokenizers", reason="pip install -c constraints.txt tokenizers (./lmscale installs it)")
    corpus = make_corpus(tmp_path, "--tokenizer", "bpe", "--vocab", "300")
    out = tmp_path / "out"
    r = train(corpus, out, "--steps", "4", "--eval-every", "2")
    assert r.returncode == 0, r.stderr
    folder = out / "checkpoints/lmscale-fp32/step-00000004"
    assert (folder / "tokenizer.json").read_bytes() == (corpus / "tokenizer.json").read_bytes()
    first, second = sample(folder, "--temperature", "0"), sample(folder, "--temperature", "0")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout and first.stdout.startswith("def f1(x):")
    assert "BPE of 300 ids" in first.stderr, first.stderr
