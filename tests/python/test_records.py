"""lmscale.records: the one writer of the Python benchmarks' results records (the schema version
typed once, equal to the C++ side's), its per-metric expansion and its appends."""
import json
import re
from pathlib import Path

from lmscale import records

ROOT = Path(__file__).resolve().parents[2]


def test_schema_version_is_the_cpp_one():
    header = (ROOT / "src/results/record.h").read_text()
    assert int(re.search(r"kSchemaVersion = (\d+);", header).group(1)) == records.SCHEMA_VERSION


def test_no_other_python_writer_types_the_schema_field():
    typed = [p.relative_to(ROOT).as_posix() for p in (ROOT / "python/lmscale").rglob("*.py")
             if p.name != "records.py" and re.search(r"""["']schema["']\s*:""", p.read_text())]
    assert typed == [], f"build records with lmscale.records.record_base instead: {typed}"


def test_one_record_per_metric_with_its_unit():
    base = records.record_base("e2e", "torch-eager", "ok", {"size": "small"}, gpu="cpu", commit="abc",
                               date="2026-01-01T00:00:00Z", command="python -m x")
    out = records.metric_records(base, {"step_ms": {"value": 2.0, "min": 1.5}, "tokens_per_s": 10.0},
                                 {"step_ms": "ms", "tokens_per_s": "tokens/s"})
    assert [(r["metric"], r["value"], r["unit"]) for r in out] == [("step_ms", 2.0, "ms"),
                                                                    ("tokens_per_s", 10.0, "tokens/s")]
    assert out[0]["min"] == 1.5 and out[0]["schema"] == records.SCHEMA_VERSION and out[0]["size"] == "small"
    assert list(out[0])[:4] == ["schema", "bench", "impl", "status"]


def test_a_config_that_did_not_run_is_one_status_record():
    base = records.record_base("e2e", "torch-eager", "oom", {}, gpu="cpu", commit="abc", date="d", command="c")
    (only,) = records.metric_records(base, {}, {}, "out of memory")
    assert (only["metric"], only["value"], only["reason"], only["status"]) == ("status", None, "out of memory", "oom")


def test_append_adds_lines_and_makes_the_folder(tmp_path):
    path = tmp_path / "new" / "e2e.jsonl"
    records.append(str(path), [{"a": 1}])
    records.append(str(path), [{"a": 2}, {"a": 3}])
    assert [json.loads(line)["a"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_commit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("LMSCALE_COMMIT", "0123abc")
    assert records.commit() == "0123abc"
    monkeypatch.delenv("LMSCALE_COMMIT")
    assert records.commit() == "unknown"
