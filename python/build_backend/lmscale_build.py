"""The build backend of `pip install ./python`: scikit-build-core (pinned in pyproject.toml) builds the
CMake project at the checkout's root, with three things only this project knows added around it.

1. The torch to build against is the one in the target environment, not in pip's throwaway build
   environment: lmscale links against libtorch's C++ ABI and CUDA runtime, so it must be the very torch
   it will run with. pip isolates the build through environment variables on the same interpreter
   (PYTHONPATH, PYTHONNOUSERSITE), so the interpreter run without them finds that torch; its CMake
   prefix goes to CMake as CMAKE_PREFIX_PATH.
2. The build folder persists ($LMSCALE_BUILD_DIR, default ~/.cache/lmscale/wheel-build), so a rebuild
   compiles only what changed, and pointing it at an existing build (the checkout's build/) only installs.
3. The wheel says what it needs: its version carries a local label naming the torch release and CUDA
   it was built against (0.1.0+torch2.11.cu130, +torch2.11.cpu without CUDA), its platform tag the
   glibc its ELF files ask for (manylinux_2_N, N the highest GLIBC_2.N they reference), and
   lmscale/_build.json records the exact torch for the check at import (lmscale/_library.py).

Editable installs (`pip install -e ./python`, `./lmscale python-install`) skip CMake: the wheel is a
.pth naming this python/ folder plus the `lmscale` console script, and the package loads the checkout's
build folder (lmscale/_library.py). No prepare_metadata hook: the version depends on the build, and pip
then takes the metadata from the built wheel without building twice.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
PYTHON_DIR = HERE.parent  # <checkout>/python
ROOT = PYTHON_DIR.parent  # <checkout>: the CMake project
NAME, VERSION = "lmscale", "0.1.0"  # as in pyproject.toml's [project]
ISOLATION_VARIABLES = ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")


def _say(line: str) -> None:
    """A line where a person sees it: the terminal (pip shows only a spinner unless -v), and stderr."""
    print(f"[lmscale build] {line}", file=sys.stderr, flush=True)
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(f"[lmscale build] {line}\n")
    except OSError:
        pass


def target_torch() -> dict:
    """version, cuda and cmake_prefix of the torch in the environment being installed into."""
    env = {k: v for k, v in os.environ.items() if k not in ISOLATION_VARIABLES}
    code = ("import json, torch, torch.utils; print(json.dumps({'version': torch.__version__, "
            "'cuda': torch.version.cuda, 'cmake_prefix': torch.utils.cmake_prefix_path}))")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"lmscale: {sys.executable} has no torch ({last}). Install torch into this environment "
                           "first (pip install torch==2.11.0): lmscale builds against the torch it will run with.")
    return json.loads(run.stdout.strip().splitlines()[-1])


def local_label(torch: dict) -> str:
    """'torch2.11.cu130' for torch 2.11.x with CUDA 13.0, 'torch2.11.cpu' without CUDA."""
    release = ".".join(torch["version"].split("+")[0].split(".")[:2])
    cuda = "cu" + torch["cuda"].replace(".", "") if torch.get("cuda") else "cpu"
    return f"torch{release}.{cuda}"


def build_dir() -> pathlib.Path:
    if os.environ.get("LMSCALE_BUILD_DIR"):
        return pathlib.Path(os.environ["LMSCALE_BUILD_DIR"]).resolve()
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    return cache / "lmscale" / "wheel-build"


# Cache entries a configured build folder keeps across pip runs, passed again on every configure so
# that a cache scikit-build-core cleared (`-Cfresh=true`, a folder last built by another scikit-build-core
# for another source; see keep_objects) comes back with the kernels' architectures and variants, the
# headers' folder and the compiler ./lmscale chose (one that links libstdc++ shared). Options only:
# what find_program/find_library found is found again.
KEPT_CACHE_ENTRY = re.compile(r"^(LMSCALE_[A-Z0-9_]+:(?:STRING|PATH|BOOL)|CMAKE_CXX_COMPILER:(?:STRING|FILEPATH)|"
                              r"CMAKE_CUDA_HOST_COMPILER:(?:STRING|FILEPATH))=(.*)$")


def kept_cache_entries(folder: pathlib.Path) -> dict[str, str]:
    cache = folder / "CMakeCache.txt"
    if not cache.is_file():
        return {}
    return {m[1].split(":")[0]: m[2] for line in cache.read_text(errors="replace").splitlines()
            if (m := KEPT_CACHE_ENTRY.match(line))}


def skbuild_settings(config_settings: dict | None, torch: dict) -> dict:
    """scikit-build-core's config settings: the persistent build folder, the three targets the wheel
    ships, and the CMake values the project's own bootstrap (./lmscale) would pass."""
    folder = build_dir()
    settings = dict(config_settings or {})
    settings.setdefault("build-dir", str(folder))
    for name, value in kept_cache_entries(folder).items():
        if name == "CMAKE_CXX_COMPILER":  # as ./lmscale gave it: through CXX (a -D of the same path is
            os.environ["CXX"] = value      # taken for another compiler and recompiles everything)
        elif name == "CMAKE_CUDA_HOST_COMPILER":
            os.environ["CUDAHOSTCXX"] = value
        else:
            settings[f"cmake.define.{name}"] = value
    settings["cmake.define.CMAKE_PREFIX_PATH"] = torch["cmake_prefix"]
    settings["cmake.define.LMSCALE_PYTHON_EXTENSION"] = "ON"
    if os.environ.get("LMSCALE_CUDA_ARCHS"):
        settings["cmake.define.LMSCALE_CUDA_ARCHS"] = os.environ["LMSCALE_CUDA_ARCHS"]
    # The headers: the checkout's .deps/ when it is there, else fetched beside the build folder (nothing
    # written into the source tree). A build folder that is already configured keeps its own (a changed
    # include path would recompile everything).
    if not (folder / "CMakeCache.txt").is_file():
        deps = os.environ.get("LMSCALE_DEPS") or (
            str(ROOT / ".deps") if (ROOT / ".deps" / ".complete").is_file() else str(folder.parent / "deps"))
        settings["cmake.define.LMSCALE_DEPS"] = deps
    if os.environ.get("LMSCALE_JOBS"):
        os.environ["CMAKE_BUILD_PARALLEL_LEVEL"] = os.environ["LMSCALE_JOBS"]
    return settings


# ---------------------------------------------------------------- the wheel's name, tag and record

def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def platform_tag(files: dict[str, bytes]) -> str:
    """manylinux_2_N_<arch>, N the highest GLIBC_2.N version any ELF file of the wheel references (the
    oldest glibc it loads on); linux_<arch> when none does."""
    arch = platform.machine()
    needed = [int(m) for data in files.values() if data[:4] == b"\x7fELF"
              for m in re.findall(rb"GLIBC_2\.(\d+)", data)]
    return f"manylinux_2_{max(needed)}_{arch}" if needed else f"linux_{arch}"


def rewrite_wheel(path: pathlib.Path, version: str, record: dict, editable: bool = False) -> pathlib.Path:
    """The wheel at `path` renamed to `version` and its platform tag, with lmscale/_build.json added
    (not for editable wheels); a fresh RECORD. Returns the new path (the old file is removed)."""
    with zipfile.ZipFile(path) as z:
        files = {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
        modes = {i.filename: i.external_attr for i in z.infolist()}
    old_info = next(n.split("/")[0] for n in files if n.split("/")[0].endswith(".dist-info"))
    new_info = f"{NAME}-{version}.dist-info"
    python_tag, abi_tag, _ = path.name[:-len(".whl")].split("-")[-3:]
    tag = f"{python_tag}-{abi_tag}-{'linux_' + platform.machine() if editable else platform_tag(files)}"
    out: dict[str, bytes] = {}
    for name, data in files.items():
        if name == f"{old_info}/RECORD":
            continue
        if name.startswith(old_info + "/"):
            name = new_info + name[len(old_info):]
            if name.endswith("/METADATA"):
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {version}".encode(), data, count=1)
            elif name.endswith("/WHEEL"):
                data = re.sub(rb"(?m)^Tag: .*\n", b"", data) + f"Tag: {tag}\n".encode()
        out[name] = data
    if not editable:
        out[f"{NAME}/_build.json"] = (json.dumps(record) + "\n").encode()
    record_name = f"{new_info}/RECORD"
    out[record_name] = "".join(f"{n},{_hash(d)},{len(d)}\n" for n, d in out.items()).encode() + \
        f"{record_name},,\n".encode()
    new_path = path.with_name(f"{NAME}-{version}-{tag}.whl")
    tmp = new_path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in out.items():
            old = name.replace(new_info, old_info, 1) if name.startswith(new_info) else name
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = modes.get(old, 0o100644 << 16)  # a regular file, rw-r--r--
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    path.unlink()
    tmp.rename(new_path)
    return new_path


# ---------------------------------------------------------------- PEP 517 hooks

def get_requires_for_build_wheel(config_settings=None):
    from scikit_build_core import build
    return build.get_requires_for_build_wheel(config_settings)


def keep_objects(folder: pathlib.Path) -> None:
    """scikit-build-core deletes a build folder's CMakeCache.txt and CMakeFiles/ (where the object files
    are) when its own location differs from the one recorded in <build>/.skbuild-info.json, which is the
    case for every `pip install` with build isolation (a new temporary environment each time): every
    reinstall would compile everything again. The record is pointed at this run's scikit-build-core when
    the folder was built from this same source tree; the configure step then runs on the kept cache, and
    scikit-build-core sets its own tool paths (cmake, ninja, FindPython) again anyway."""
    import scikit_build_core

    info = folder / ".skbuild-info.json"
    try:
        record = json.loads(info.read_text())
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and pathlib.Path(record.get("source_dir", "")) == ROOT.resolve():
        record["skbuild_path"] = os.fspath(pathlib.Path(scikit_build_core.__file__).parent.resolve())
        info.write_text(json.dumps(record, indent=2))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    from scikit_build_core import build
    torch = target_torch()
    folder = build_dir()
    keep_objects(folder)
    _say(f"building liblmscale, lmscale._C and the lmscale CLI against torch {torch['version']} in {folder} "
         "(a first build takes about 16 minutes on 2 cores, later ones only what changed; pip -v shows progress)")
    name = build.build_wheel(wheel_directory, skbuild_settings(config_settings, torch))
    record = {"torch": torch["version"], "cuda": torch.get("cuda")}
    final = rewrite_wheel(pathlib.Path(wheel_directory) / name, f"{VERSION}+{local_label(torch)}", record)
    _say(f"built {final.name}")
    return final.name


def get_requires_for_build_editable(config_settings=None):
    return []


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel of a .pth naming this python/ folder and the console script; no CMake (see the top)."""
    version = f"{VERSION}+editable"
    info = f"{NAME}-{VERSION}.dist-info"
    metadata = (PYTHON_DIR / "pyproject.toml").read_text()
    requires = re.search(r'(?m)^requires-python = "([^"]+)"', metadata)
    files = {
        f"__editable__.{NAME}.pth": f"{PYTHON_DIR}\n".encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
                             + (f"Requires-Python: {requires[1]}\n" if requires else "")).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: lmscale_build\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": b"[console_scripts]\nlmscale = lmscale_cli:main\n",
    }
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    path = pathlib.Path(wheel_directory) / f"{NAME}-{VERSION}-{tag}-{tag}-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return rewrite_wheel(path, version, {}, editable=True).name


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("lmscale builds from a checkout (the CMake project is the repository root, above "
                       "python/): run `pip install ./python` there; there is no source distribution.")
