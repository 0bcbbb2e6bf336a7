"""The pandas recipe of docs/results/SCHEMA.md ("Reading records with pandas"), run as written on a
records file of three runs (two commits, one run from before the `run` field): it must select the
newest run only, so its table holds that run's numbers and no average of several runs."""
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def recipe() -> str:
    page = (ROOT / "docs/results/SCHEMA.md").read_text()
    section = page.split("## Reading records with pandas", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def record(run, date, commit, impl, size, value, metric="step_ms"):
    r = {"schema": 2, "bench": "e2e", "impl": impl, "status": "ok", "metric": metric, "value": value, "unit": "ms",
         "size": size, "context": 128, "date": date, "commit": commit, "command": f"lmscale bench --size {size}"}
    if run:
        r["run"] = run
    return r


def test_recipe_selects_one_run_before_pivoting(tmp_path):
    pd = pytest.importorskip("pandas", reason="the recipe needs pandas (pip install pandas)")
    path = tmp_path / "e2e.jsonl"
    rows = [record(None, "2026-11-01T00:00:00Z", "1111111", "lmscale", "small", 100.0),       # before `run`
            record("aaaa", "2026-11-02T00:00:00Z", "1111111", "lmscale", "small", 10.0),
            record("aaaa", "2026-11-02T00:00:00Z", "1111111", "torch-eager", "small", 20.0),
            record("bbbb", "2026-11-03T00:00:00Z", "2222222", "lmscale", "small", 5.0),
            record("bbbb", "2026-11-03T00:00:00Z", "2222222", "torch-eager", "small", 7.0),
            record("bbbb", "2026-11-03T00:00:00Z", "2222222", "lmscale", "small", 9.0, metric="forward_ms")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = recipe().replace('"results/e2e.jsonl"', repr(str(path)), 1)
    assert repr(str(path)) in code, "the recipe no longer starts from path = \"results/e2e.jsonl\"; update this test"
    scope = {}
    exec(compile(code, "SCHEMA.md recipe", "exec"), scope)
    table = scope["table"]
    assert table.loc[("small", 128)].to_dict() == {"lmscale": 5.0, "torch-eager": 7.0}, table
    assert len(scope["runs"]) == 3  # the run from before `run` is told apart by (date, command)
    assert set(scope["runs"].commit) == {"1111111", "2222222"}
