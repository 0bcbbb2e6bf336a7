"""Finds and loads lmscale's compiled parts, once, on first use: liblmscale.so (whose TORCH_LIBRARY
registrations create ``torch.ops.lmscale.*``) and the pybind11 extension ``lmscale._C`` (the C++ DDP
reducer and ZeRO's shard math).

Nothing here runs at ``import lmscale``: pure-Python subpackages (``lmscale.baseline``,
``lmscale.plots``) import without a build. Where the files are looked for, in order:

1. ``$LMSCALE_LIBRARY`` (the path of liblmscale.so; _C sits beside it);
2. the package folder itself (``pip install ./python`` copies both there);
3. ``$LMSCALE_BUILD_DIR``, then ``build/`` and ``build-gpu/`` of the checkout this package sits in
   (``./lmscale build``, ``./lmscale python-install``).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import pathlib
import sys
import json
import threading
from types import ModuleType
from typing import Optional

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_LIBRARY_NAME = "liblmscale.so"
# Written by `pip install ./python` beside the libraries: the torch they were built against.
_BUILD_RECORD = "_build.json"

_lock = threading.Lock()
_library_path: Optional[pathlib.Path] = None
_extension: Optional[ModuleType] = None
_loaded = False


def candidate_folders() -> list[pathlib.Path]:
    """The folders searched for liblmscale.so when $LMSCALE_LIBRARY is not set, in order."""
    folders = [_PACKAGE_DIR]
    if os.environ.get("LMSCALE_BUILD_DIR"):
        folders.append(pathlib.Path(os.environ["LMSCALE_BUILD_DIR"]))
    root = _PACKAGE_DIR.parents[1]  # <checkout>/python/lmscale -> <checkout>
    folders += [root / "build", root / "build-gpu"]
    return folders


def find_library() -> pathlib.Path:
    """The liblmscale.so that load() would load; ImportError naming the places looked at and the fix."""
    if os.environ.get("LMSCALE_LIBRARY"):
        path = pathlib.Path(os.environ["LMSCALE_LIBRARY"])
        if not path.is_file():
            raise ImportError(f"lmscale: LMSCALE_LIBRARY={path} is not a file. Point it at a built liblmscale.so.")
        return path
    folders = candidate_folders()
    for folder in folders:
        if (folder / _LIBRARY_NAME).is_file():
            return folder / _LIBRARY_NAME
    raise ImportError(
        "lmscale: the compiled library liblmscale.so was not found (looked in "
        + ", ".join(str(f) for f in folders)
        + "). Build it with `./lmscale build` in the lmscale checkout (then set LMSCALE_BUILD_DIR if the "
        "build folder is not build/), install with `pip install ./python`, or point LMSCALE_LIBRARY at it."
    )


def _import_extension(folder: pathlib.Path) -> Optional[ModuleType]:
    """Imports lmscale._C from `folder` (it is built beside liblmscale.so, not in this package, so that
    several build folders coexist). None when the build skipped it (no Python headers)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / ("_C" + suffix)
        if path.is_file():
            spec = importlib.util.spec_from_file_location("lmscale._C", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
    return None


def load() -> Optional[ModuleType]:
    """Loads liblmscale.so and lmscale._C once (thread-safe); returns _C, or None if it was not built."""
    global _library_path, _extension, _loaded
    if _loaded:
        return _extension
    with _lock:
        if not _loaded:
            import torch

            path = find_library()
            check_torch(path.parent, torch.__version__, torch.version.cuda)
            # Load order matters: the op library first (its registrations), then _C, which links
            # against it and so reuses the copy already loaded.
            try:
                torch.ops.load_library(str(path))
            except OSError as e:
                raise ImportError(f"lmscale: loading {path} failed: {e}. {_REBUILD_HINT}") from e
            _extension = _import_extension(path.parent)
            _library_path = path
            _loaded = True
    return _extension


_REBUILD_HINT = ("The library must be built against the torch it runs with: rebuild it in this environment "
                 "(`pip install --force-reinstall --no-deps ./python` from an lmscale checkout, or "
                 "`./lmscale build`), or install the torch it was built against.")


class TorchMismatchError(ImportError):
    """The installed libraries were built against another torch than the one running."""


def check_torch(folder: pathlib.Path, version: str, cuda: Optional[str]) -> None:
    """ImportError, with the fix, when the libraries in `folder` were built (by the wheel build, which
    records it in _build.json) against another torch release or CUDA major than the one running."""
    record = folder / _BUILD_RECORD
    if not record.is_file():
        return  # a build folder of this checkout, built against the environment's torch
    built = json.loads(record.read_text())
    same_release = version.split("+")[0].split(".")[:2] == built["torch"].split("+")[0].split(".")[:2]
    same_cuda = (cuda or "").split(".")[0] == (built.get("cuda") or "").split(".")[0]
    if same_release and same_cuda:
        return
    want = built["torch"].split("+")[0].rsplit(".", 1)[0]
    index = f"cu{built['cuda'].replace('.', '')}" if built.get("cuda") else "cpu"
    raise TorchMismatchError(
        f"lmscale: this install was built against torch {built['torch']} (CUDA {built.get('cuda') or 'none'}), "
        f"but the environment has torch {version} (CUDA {cuda or 'none'}); their C++ ABIs differ. Fix: "
        f"pip install 'torch=={want}.*' --index-url https://download.pytorch.org/whl/{index} . {_REBUILD_HINT}"
    )


def library_path() -> pathlib.Path:
    """The path of the loaded liblmscale.so (loading it if needed)."""
    load()
    assert _library_path is not None
    return _library_path


def require_extension(what: str) -> ModuleType:
    """lmscale._C, or an ImportError saying why it is missing and how to build it."""
    C = load()
    if C is None:
        folder = library_path().parent
        # An extension built for another interpreter (e.g. _C.cpython-311-*.so under Python 3.12) is not
        # importable here: name it, since "not in" the folder would send the reader looking for a build problem.
        others = sorted(p.name for p in folder.glob("_C.*.so"))
        if others:
            raise ImportError(
                f"lmscale.{what} needs the extension lmscale._C for this interpreter ({sys.implementation.cache_tag}, "
                f"suffix {importlib.machinery.EXTENSION_SUFFIXES[0]}), but {folder} holds only {', '.join(others)}, "
                "built for another Python. Build it with this interpreter: LMSCALE_PYTHON=$(command -v python3) "
                "./lmscale build (a separate LMSCALE_BUILD_DIR keeps the other build)."
            )
        raise ImportError(
            f"lmscale.{what} needs the extension lmscale._C, which is not in {folder}. "
            "It is skipped when CMake finds no Python headers for the interpreter: install them "
            "(apt-get install python3-dev) and run `./lmscale build` again (its log names the cause)."
        )
    return C


def require_distributed(what: str, how: str) -> ModuleType:
    """lmscale._C, once torch.distributed is initialised; `how` says how to initialise it."""
    import torch.distributed as dist

    C = require_extension(what)
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"lmscale.{what}: torch.distributed is not initialised. Call {how}")
    return C
