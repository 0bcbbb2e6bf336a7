"""lmscale.attention_layouts_bench without a GPU: the impl order of its rounds and its argument checks."""
import pytest

from lmscale.attention_layouts_bench import main, round_orders


def test_rounds_alternate_the_given_order_and_its_reverse():
    assert round_orders(["a", "b", "c"], 1) == [["a", "b", "c"]]
    assert round_orders(["a", "b", "c"], 4) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]]


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--iters", "0"], ["--warmup", "-1"]])
def test_bad_counts_fail_before_any_gpu_work(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "--rounds and --iters must be >= 1" in capsys.readouterr().err
