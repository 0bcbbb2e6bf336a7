"""The results records the Python benchmarks write (docs/results/SCHEMA.md): the schema version, the
fields every record carries (what ran, on which GPU, at which commit, when, by which command), one
record per metric, and appending them to a ``.jsonl``. Reading and tables are ``lmscale report``'s.

The schema version is the C++ side's ``kSchemaVersion`` (src/results/record.h); a record written here
reads there as one written by ``lmscale bench``.
"""
from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone

SCHEMA_VERSION = 2  # src/results/record.h kSchemaVersion; docs/results/SCHEMA.md


def utc_now() -> str:
    """The record's ``date``: UTC, to the second (the form lmscale's C++ records use)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def commit(ask_git: bool = False) -> str:
    """The commit measured: ``LMSCALE_COMMIT`` (the GPU machines get no ``.git``), else, when
    ``ask_git``, git's short hash of HEAD, else "unknown"."""
    named = os.environ.get("LMSCALE_COMMIT")
    if named:
        return named
    if ask_git:
        try:
            out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
            if out:
                return out
        except OSError:
            pass
    return "unknown"


def gpu_name(device) -> str:
    """The record's ``gpu``: the CUDA device's name, or "cpu"."""
    import torch
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def record_base(bench: str, impl: str, status: str, fields: dict, *, gpu: str, commit: str, date: str,
                command: str) -> dict:
    """The fields every record of one measured configuration shares, in the schema's order: the
    schema version, bench, impl, status, the configuration (``fields``), then where and how it ran."""
    return {"schema": SCHEMA_VERSION, "bench": bench, "impl": impl, "status": status, **fields,
            "gpu": gpu, "commit": commit, "date": date, "command": command}


def metric_records(base: dict, metrics: dict, units: dict, reason: str = "") -> list:
    """One record per metric of ``metrics`` (a value, or a dict of statistics with ``value``), each
    with its unit from ``units``; a configuration that did not run (status not "ok") is one "status"
    record carrying ``reason`` instead."""
    if base["status"] != "ok":
        return [{**base, "reason": reason, "metric": "status", "value": None, "unit": ""}]
    return [{**base, "metric": name, **(value if isinstance(value, dict) else {"value": value}), "unit": units[name]}
            for name, value in metrics.items()]


def append(path: str, records) -> None:
    """Appends the records to the ``.jsonl`` at ``path``, one line each (its folder made if missing)."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
