"""`--config run.toml` for `lmscale train` and `lmscale bench`: the file's keys are the long flags without
dashes, a flag on the command line wins over the file, the resolved configuration is written to
<out>/config.toml, and feeding that file back runs the same thing; a key that is no option is a usage error
naming it."""
import json

from train_cli_util import TINY, lmscale, losses, make_corpus


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_train_reads_the_file_and_the_command_line_wins(tmp_path):
    corpus = make_corpus(tmp_path)
    config = tmp_path / "run.toml"
    config.write_text(f'corpus = "{corpus}"\nsteps = 4\neval-every = 2\nlr = 2e-3\nseed = 7\n'
                      'device = "cpu"\nsize = "tiny"\ncontext = 32\nbatch = 2\neval-batches = 2\n')
    out = tmp_path / "out"
    r = lmscale("train", "--config", config, "--steps", "6", "--out", out)
    assert r.returncode == 0, r.stderr
    rec = [x for x in records(out / "train.jsonl") if x.get("metric") == "val_loss"]
    assert {x["steps"] for x in rec} == {6} and {x["lr"] for x in rec} == {2e-3} and {x["seed"] for x in rec} == {7}
    assert sorted(x["step"] for x in rec) == [0, 2, 4, 6]
    resolved = (out / "config.toml").read_text()
    assert "steps = 6" in resolved and 'size = "tiny"' in resolved and "lr-min = 0.0002" in resolved, resolved
    # The resolved file runs the same run again: the same losses, bit for bit (CPU).
    again = tmp_path / "again"
    r = lmscale("train", "--config", out / "config.toml", "--out", again)
    assert r.returncode == 0, r.stderr
    assert losses(again) == losses(out)


def test_an_unknown_key_is_a_usage_error(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text("stepz = 4\n")
    r = lmscale("train", "--config", config, *TINY)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "stepz is not an option of `lmscale train`" in r.stderr, r.stderr


def test_bench_reads_the_file_and_writes_the_resolved_config(tmp_path):
    config = tmp_path / "bench.toml"
    config.write_text('device = "cpu"\nsize = "tiny"\ncontext = 32\nsteps = 2\nwarmup = 1\n')
    out = tmp_path / "out"
    r = lmscale("bench", "--config", config, "--context", "16", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = [x for x in records(out / "e2e.jsonl") if x.get("status") == "ok"]
    assert rec and {x["context"] for x in rec} == {16} and {x["size"] for x in rec} == {"tiny"}
    resolved = (out / "config.toml").read_text()
    assert "context = 16" in resolved and "steps = 2" in resolved, resolved


def test_a_missing_file_is_a_usage_error(tmp_path):
    r = lmscale("train", "--config", tmp_path / "nowhere.toml", *TINY)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "nowhere.toml: no such file" in r.stderr, r.stderr
