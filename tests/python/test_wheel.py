"""`pip install ./python` as a user gets it: the wheel built with pip (no build isolation: CI is offline),
reusing the test run's build folder (so only the install step runs), installed into an empty folder;
then, with that build folder renamed away, `import lmscale` from outside the checkout loads the
libraries inside the installed package and runs the ops. Also: their library paths are $ORIGIN-relative,
the torch they were built against is recorded and checked, nothing was written into the checkout."""
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import lmscale
from lmscale import _library

ROOT = pathlib.Path(lmscale.__file__).resolve().parents[2]


def checkout_files():
    """Every file under python/ (where a setuptools build used to leave build/ and *.egg-info)."""
    return {p for p in (ROOT / "python").rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder the wheel was installed into, the wheel, the build folder it reused)."""
    if importlib.util.find_spec("wheel") is None:
        import setuptools
        if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (70, 1):
            pytest.skip("pip needs `wheel` (or setuptools >= 70.1) to build wheels offline; the ./lmscale "
                        "bootstrap installs it (constraints.txt)")
    build_dir = pathlib.Path(os.environ.get("LMSCALE_BUILD_DIR") or ROOT / "build").resolve()
    if not (build_dir / "liblmscale.so").is_file():
        pytest.skip(f"no build in {build_dir} to reuse (run ./lmscale build first)")
    tmp = tmp_path_factory.mktemp("wheel")
    before = checkout_files()
    env = {**os.environ, "LMSCALE_BUILD_DIR": str(build_dir), "LMSCALE_PYTHON": sys.executable}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
                            str(tmp / "dist"), str(ROOT / "python")], env=env, capture_output=True, text=True,
                           timeout=1800)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    assert checkout_files() == before, sorted(map(str, checkout_files() ^ before))
    (wheel,) = (tmp / "dist").glob("lmscale-*.whl")
    site = tmp / "site"
    site.mkdir()
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    return site, wheel, build_dir


def test_installed_wheel_runs_with_the_build_folder_gone(installed):
    site, _, build_dir = installed
    code = ("import pathlib, torch, lmscale, lmscale.nn as lnn\n"
            "assert pathlib.Path(lmscale.library_path).parent == pathlib.Path(lmscale.__file__).parent\n"
            "q = torch.randn(1, 2, 16, 32, requires_grad=True)\n"
            "lmscale.flash_attention(q, q, q, is_causal=True).sum().backward()\n"
            "y = lnn.RMSNorm(32)(q.detach())\n"
            "print('ran', lmscale.library_path, q.grad.shape[-1] + y.shape[-1])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LMSCALE_BUILD_DIR", "LMSCALE_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    away = build_dir.with_name(build_dir.name + ".renamed-by-test_wheel")
    build_dir.rename(away)
    try:
        run = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True,
                             timeout=600)
    finally:
        away.rename(build_dir)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.startswith("ran " + str(site)) and run.stdout.split()[-1] == "64", run.stdout


def test_library_paths_are_relative_to_the_package(installed):
    site, wheel, _ = installed
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) not found")
    libraries = sorted((site / "lmscale").glob("*.so"))
    assert {p.name.split(".")[0] for p in libraries} == {"liblmscale", "_C"}
    for lib in libraries:
        dynamic = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        paths = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "RPATH" in line or "RUNPATH" in line]
        assert paths, f"{lib.name} has no RUNPATH"
        for entry in ":".join(paths).split(":"):
            assert entry.startswith("$ORIGIN"), f"{lib.name}: library path {entry} is not relative to the package"
    print(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB")


def test_torch_version_recorded_and_checked(installed):
    import torch

    site, _, _ = installed
    record = json.loads((site / "lmscale" / "_build.json").read_text())
    assert record["torch"] == torch.__version__ and record["cuda"] == torch.version.cuda
    _library.check_torch(site / "lmscale", torch.__version__, torch.version.cuda)  # the running one: fine
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    other = f"{release.split('.')[0]}.{int(release.split('.')[1]) - 1}.0+cu999"
    with pytest.raises(ImportError, match=re.escape(f"pip install 'torch=={release}.*'")):
        _library.check_torch(site / "lmscale", other, "99.0")


def test_missing_extension_names_one_built_for_another_python(tmp_path, monkeypatch):
    """A _C built for another interpreter (the GPU machines run Python 3.12, a build here 3.11) is named as
    such, not reported as missing from the folder; with none, the message says how the build skips it."""
    monkeypatch.setattr(_library, "load", lambda: None)
    monkeypatch.setattr(_library, "library_path", lambda: tmp_path / "liblmscale.so")
    with pytest.raises(ImportError, match="which is not in") as plain:
        _library.require_extension("DistributedDataParallel")
    assert "python3-dev" in str(plain.value)
    (tmp_path / "_C.cpython-399-x86_64-linux-gnu.so").write_bytes(b"")
    with pytest.raises(ImportError, match="built for another Python") as other:
        _library.require_extension("DistributedDataParallel")
    assert "_C.cpython-399-x86_64-linux-gnu.so" in str(other.value)
    assert sys.implementation.cache_tag in str(other.value)
