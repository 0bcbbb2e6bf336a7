"""`pip install ./python` as a user gets it, and the `lmscale` command it puts on PATH.

The wheel is built by pip through the project's backend (scikit-build-core, no build isolation so the
test needs no network), reusing the test run's build folder: CMake is configured again and finds
everything built, so this measures the packaging (what the wheel holds, its name, its library paths,
the console script), not a compile, and costs well under a minute. It is installed into a fresh venv
whose site-packages holds the test interpreter's packages as links (torch beside lmscale, as in a
user's environment: the binary finds libtorch through its $ORIGIN-relative RUNPATH, with no Python
having loaded it first). Then, with the build folder renamed away and from `/`: `lmscale info` and
`lmscale --help` from PATH, the binary run directly (it must find its own interpreter, or say it fell
back to python3), and `import lmscale` loading the installed libraries. Also: nothing was written into
the checkout, the torch it was built against is recorded and checked."""
import importlib.util
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

import lmscale
from lmscale import _library

ROOT = pathlib.Path(lmscale.__file__).resolve().parents[2]
PURELIB = pathlib.Path(sysconfig.get_path("purelib"))


def checkout_files():
    """Every file under python/ (where a build backend could leave build/, *.egg-info or a .so)."""
    return {p for p in (ROOT / "python").rglob("*") if "__pycache__" not in p.parts}


def clean_env(**extra):
    """The environment of a user who never set lmscale's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMSCALE_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, its site-packages, the wheel, the build folder it reused)."""
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.skip("the build backend scikit-build-core is not installed here; the ./lmscale bootstrap installs "
                    "it (constraints.txt): pip install -c constraints.txt scikit-build-core")
    build_dir = pathlib.Path(os.environ.get("LMSCALE_BUILD_DIR") or ROOT / "build").resolve()
    if not (build_dir / "liblmscale.so").is_file() or not (build_dir / "lmscale").is_file():
        pytest.skip(f"no build in {build_dir} to reuse (run ./lmscale build first)")
    tmp = tmp_path_factory.mktemp("wheel")
    before = checkout_files()
    env = {**os.environ, "LMSCALE_BUILD_DIR": str(build_dir)}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
                            str(tmp / "dist"), str(ROOT / "python")], env=env, capture_output=True, text=True,
                           timeout=1800)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    assert checkout_files() == before, sorted(map(str, checkout_files() ^ before))
    (wheel,) = (tmp / "dist").glob("lmscale-*.whl")

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for entry in PURELIB.iterdir():  # torch, nvidia, matplotlib, ... as links; not lmscale itself
        if not entry.name.startswith(("lmscale", "__editable__")) and not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=600)
    if install.returncode != 0 and "no such option: --python" in install.stderr:
        pytest.skip("pip older than 22.3 has no --python to install into a venv without pip")
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    return venv, site, wheel, build_dir


@pytest.fixture()
def build_folder_gone(installed):
    """The reused build folder renamed away for the test's duration: only the install can answer."""
    build_dir = installed[3]
    away = build_dir.with_name(build_dir.name + ".renamed-by-test_wheel")
    build_dir.rename(away)
    try:
        yield
    finally:
        away.rename(build_dir)


def test_wheel_name_says_what_it_needs(installed):
    import torch

    wheel = installed[2]
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    cuda = "cu" + torch.version.cuda.replace(".", "") if torch.version.cuda else "cpu"
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    m = re.fullmatch(rf"lmscale-0\.1\.0\+torch{re.escape(release)}\.{cuda}-{py}-{py}-manylinux_2_(\d+)_"
                     rf"{platform.machine()}\.whl", wheel.name)
    assert m, f"{wheel.name}: expected lmscale-0.1.0+torch{release}.{cuda}-{py}-{py}-manylinux_2_N_{platform.machine()}.whl"
    libc, version = platform.libc_ver()
    assert libc == "glibc" and int(m[1]) <= int(version.split(".")[1]), f"{wheel.name} claims a newer glibc than {version}"


def test_console_script_runs_the_bundled_cli_from_path(installed, build_folder_gone):
    venv, site, _, _ = installed
    script = venv / "bin" / "lmscale"
    assert script.is_file(), f"pip installed no lmscale command into {venv / 'bin'}"
    env = clean_env(PATH=f"{venv / 'bin'}:/usr/bin:/bin")
    info = subprocess.run(["lmscale", "info"], cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert info.returncode == 0, info.stdout[-3000:] + info.stderr[-3000:]
    # The interpreter its Python steps run is the venv's (the console script's), not python3 from PATH.
    assert f"baseline interpreter: {venv / 'bin' / 'python'}" in info.stdout, info.stdout
    assert f"Python extension lmscale._C: built ({site / 'lmscale'}" in info.stdout, info.stdout
    assert "LMSCALE_PYTHON" in info.stdout, info.stdout
    usage = subprocess.run(["lmscale", "--help"], cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert usage.returncode == 0 and "report" in usage.stdout, usage.stdout + usage.stderr


def test_installed_binary_finds_its_own_interpreter(installed, build_folder_gone, tmp_path):
    """Run directly (no console script, no LMSCALE_PYTHON), the binary in site-packages uses the
    interpreter it is installed into; a copy outside the install layout falls back to python3 from PATH,
    and when that one cannot draw, report says so and which interpreter it was (exit 1, not 0)."""
    venv, site, _, _ = installed
    binary = site / "lmscale" / "bin" / "lmscale"
    env = clean_env(PATH="/usr/bin:/bin")
    info = subprocess.run([str(binary), "info"], cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert info.returncode == 0, info.stderr[-3000:]
    assert re.search(rf"baseline interpreter: {re.escape(str(venv / 'bin'))}/python3(\.\d+)? ", info.stdout), info.stdout
    assert "the interpreter this binary is installed into" in info.stdout, info.stdout

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'matplotlib'\" >&2\nexit 1\n")
    (fake_bin / "python3").chmod(0o755)
    elsewhere = site / "lmscale" / "copied-by-test"  # not bin/: no install layout to go by
    elsewhere.mkdir()
    shutil.copy2(binary, elsewhere / "lmscale")
    records = tmp_path / "records"
    records.mkdir()
    (records / "e2e.jsonl").write_text(json.dumps({"schema": 2, "bench": "e2e", "impl": "lmscale", "status": "ok",
                                                   "metric": "step_ms", "value": 1.0, "unit": "ms"}) + "\n")
    try:
        run = subprocess.run([str(elsewhere / "lmscale"), "report", "--in", str(records), "--out", str(tmp_path / "r")],
                             cwd="/", env=clean_env(PATH=f"{fake_bin}:/usr/bin:/bin"), capture_output=True, text=True,
                             timeout=300)
    finally:
        shutil.rmtree(elsewhere)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "python3 from PATH" in run.stderr and "matplotlib" in run.stderr, run.stderr
    assert (tmp_path / "r" / "index.md").is_file()  # the tables are written; only the plots are missing


def test_installed_package_runs_with_the_build_folder_gone(installed, build_folder_gone):
    venv, site, _, _ = installed
    code = ("import pathlib, torch, lmscale, lmscale.nn as lnn\n"
            "assert pathlib.Path(lmscale.library_path).parent == pathlib.Path(lmscale.__file__).parent\n"
            "q = torch.randn(1, 2, 16, 32, requires_grad=True)\n"
            "lmscale.flash_attention(q, q, q, is_causal=True).sum().backward()\n"
            "y = lnn.RMSNorm(32)(q.detach())\n"
            "print('ran', lmscale.library_path, q.grad.shape[-1] + y.shape[-1])\n")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd="/", env=clean_env(), capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.startswith("ran " + str(site)) and run.stdout.split()[-1] == "64", run.stdout


def test_library_paths_are_relative_to_the_package(installed):
    _, site, wheel, _ = installed
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) not found")
    files = sorted((site / "lmscale").glob("*.so")) + [site / "lmscale" / "bin" / "lmscale"]
    assert {p.name.split(".")[0] for p in files} == {"liblmscale", "_C", "lmscale"}
    for path in files:
        dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
        paths = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "RPATH" in line or "RUNPATH" in line]
        assert paths, f"{path.name} has no RUNPATH"
        for entry in ":".join(paths).split(":"):
            assert entry.startswith("$ORIGIN"), f"{path.name}: library path {entry} is not relative to the package"
    print(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB")


def test_torch_version_recorded_and_checked(installed):
    import torch

    site = installed[1]
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
