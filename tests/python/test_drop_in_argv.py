"""argv_without (lmscale.drop_in_bench): how the drop-in benchmark and tools/probes/drop_in/drop_in_host.py re-run
their own command for one cell, with an option taken out."""
from lmscale.drop_in_bench import argv_without


def test_takes_out_the_option_and_its_values_only():
    assert argv_without(["--sizes", "xl", "--out", "a.jsonl", "--impls", "x"], "--out") == ["--sizes", "xl", "--impls", "x"]
    assert argv_without(["--size", "xl", "--impls", "a", "b", "--steps", "3"], "--impls") == ["--size", "xl", "--steps", "3"]
    assert argv_without(["--out=a.jsonl", "--in-process"], "--out") == ["--in-process"]
    assert argv_without(["--outdir", "d"], "--out") == ["--outdir", "d"]
    assert argv_without(["--steps", "3"], "--out") == ["--steps", "3"]
