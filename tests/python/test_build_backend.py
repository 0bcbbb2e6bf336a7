"""python/build_backend/lmscale_build.py without a build: the wheel's name from the torch it was built
against and the glibc its ELF files reference, the rewritten wheel's metadata and RECORD (every hash
and size true, so pip installs it), and the editable wheel (a .pth and the console script)."""
import base64
import hashlib
import importlib.util
import pathlib
import platform
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def backend():
    spec = importlib.util.spec_from_file_location("lmscale_build", ROOT / "python/build_backend/lmscale_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_local_label_names_torch_release_and_cuda(backend):
    assert backend.local_label({"version": "2.11.0+cu130", "cuda": "13.0"}) == "torch2.11.cu130"
    assert backend.local_label({"version": "2.11.1", "cuda": "12.8"}) == "torch2.11.cu128"
    assert backend.local_label({"version": "2.11.0+cpu", "cuda": None}) == "torch2.11.cpu"


def test_platform_tag_is_the_newest_glibc_referenced(backend):
    arch = platform.machine()
    elf = b"\x7fELF" + b"\0" * 12 + b"GLIBC_2.2.5\0GLIBC_2.34\0GLIBC_2.17\0"
    assert backend.platform_tag({"a.so": elf, "b.py": b"GLIBC_2.99"}) == f"manylinux_2_34_{arch}"
    assert backend.platform_tag({"b.py": b"print()"}) == f"linux_{arch}"


def record_is_true(z: zipfile.ZipFile, info: str):
    rows = [line.split(",") for line in z.read(f"{info}/RECORD").decode().splitlines()]
    names = {r[0] for r in rows}
    assert names == set(z.namelist()), names ^ set(z.namelist())
    for name, digest, size in rows:
        if name.endswith("/RECORD"):
            assert digest == "" and size == ""
            continue
        data = z.read(name)
        want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (want, len(data)), name


def test_rewritten_wheel_is_named_and_recorded(backend, tmp_path):
    arch = platform.machine()
    plain = tmp_path / f"lmscale-0.1.0-cp311-cp311-linux_{arch}.whl"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("lmscale/__init__.py", "")
        z.writestr("lmscale/liblmscale.so", b"\x7fELF" + b"\0" * 12 + b"GLIBC_2.28\0")
        z.writestr("lmscale-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: lmscale\nVersion: 0.1.0\n")
        z.writestr("lmscale-0.1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nTag: cp311-cp311-linux_{arch}\n")
        z.writestr("lmscale-0.1.0.dist-info/RECORD", "stale\n")
    out = backend.rewrite_wheel(plain, "0.1.0+torch2.11.cu130", {"torch": "2.11.0+cu130", "cuda": "13.0"})
    assert out.name == f"lmscale-0.1.0+torch2.11.cu130-cp311-cp311-manylinux_2_28_{arch}.whl"
    assert not plain.exists()
    info = "lmscale-0.1.0+torch2.11.cu130.dist-info"
    with zipfile.ZipFile(out) as z:
        assert "Version: 0.1.0+torch2.11.cu130\n" in z.read(f"{info}/METADATA").decode()
        assert z.read(f"{info}/WHEEL").decode().splitlines()[-1] == f"Tag: cp311-cp311-manylinux_2_28_{arch}"
        assert b'"torch": "2.11.0+cu130"' in z.read("lmscale/_build.json")
        record_is_true(z, info)


def test_editable_wheel_is_a_pth_and_the_console_script(backend, tmp_path):
    name = backend.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as z:
        info = next(n.split("/")[0] for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        assert z.read("__editable__.lmscale.pth").decode().strip() == str(ROOT / "python")
        assert "lmscale = lmscale_cli:main" in z.read(f"{info}/entry_points.txt").decode()
        record_is_true(z, info)


def test_a_configured_build_folder_keeps_its_options(backend, tmp_path):
    """scikit-build-core clears CMakeCache.txt when pip's isolated environment changes; the options
    ./lmscale gave the folder (kernel architectures, compiler) are passed again, find results are not."""
    (tmp_path / "CMakeCache.txt").write_text(
        "LMSCALE_CUDA_ARCHS:STRING=90\nLMSCALE_DEPS:PATH=/x/.deps\n"
        "LMSCALE_NVCC:FILEPATH=/usr/local/cuda/bin/nvcc\nCMAKE_CXX_COMPILER:FILEPATH=/usr/bin/g++\n"
        "LMSCALE_CUDA_ARCHITECTURES:INTERNAL=90\n")
    assert backend.kept_cache_entries(tmp_path) == {"LMSCALE_CUDA_ARCHS": "90", "LMSCALE_DEPS": "/x/.deps",
                                                    "CMAKE_CXX_COMPILER": "/usr/bin/g++"}
    assert backend.kept_cache_entries(tmp_path / "missing") == {}


def test_a_reused_build_folder_is_not_wiped_by_a_new_isolated_environment(backend, tmp_path):
    """scikit-build-core deletes CMakeFiles/ (the objects) when .skbuild-info.json names another copy of
    itself, as every isolated pip run has; the record is pointed at the running copy, for this source only."""
    pytest.importorskip("scikit_build_core")
    import scikit_build_core

    here = str(pathlib.Path(scikit_build_core.__file__).parent.resolve())
    info = tmp_path / ".skbuild-info.json"
    info.write_text('{"source_dir": "%s", "build_dir": "%s", "skbuild_path": "/tmp/pip-build-env-gone/x"}'
                    % (ROOT.resolve(), tmp_path))
    backend.keep_objects(tmp_path)
    assert json_of(info)["skbuild_path"] == here
    info.write_text('{"source_dir": "/another/project", "skbuild_path": "/tmp/pip-build-env-gone/x"}')
    backend.keep_objects(tmp_path)
    assert json_of(info)["skbuild_path"] == "/tmp/pip-build-env-gone/x"  # another project's folder: untouched
    backend.keep_objects(tmp_path / "missing")  # nothing recorded: nothing to do


def json_of(path):
    import json
    return json.loads(path.read_text())


def test_the_console_script_starts_without_torch():
    """The `lmscale` command only execs the binary: importing its module must not import torch (the
    package's __init__ would, through liblmscale), which costs seconds on every call."""
    import subprocess
    import sys

    code = "import sys, lmscale_cli; print('torch' in sys.modules, lmscale_cli.candidates()[0])"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "python", capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    imported_torch, first = run.stdout.split()
    assert imported_torch == "False", "lmscale_cli imported torch"
    assert first == str(ROOT / "python" / "lmscale" / "bin" / "lmscale"), first
