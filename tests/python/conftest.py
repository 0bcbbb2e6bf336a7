"""pytest set-up for the Python bindings: the `gpu` marker (skip without enough CUDA devices, or fail
when LMSCALE_REQUIRE_GPU=1, as scripts/gpu/gpu_python.sh sets so that a GPU run cannot pass by skipping)."""
import os

import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu(n=1): needs n CUDA devices; skipped without them (failed if LMSCALE_REQUIRE_GPU=1)"
    )


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("gpu")
    if marker is None:
        return
    need = marker.kwargs.get("n", marker.args[0] if marker.args else 1)
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < need:
        why = f"needs {need} CUDA device(s), found {have}"
        if os.environ.get("LMSCALE_REQUIRE_GPU") == "1":
            pytest.fail(why + " (LMSCALE_REQUIRE_GPU=1)")
        pytest.skip(why)
