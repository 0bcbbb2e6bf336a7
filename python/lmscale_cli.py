"""The ``lmscale`` console script (what ``pip install ./python`` puts on PATH): runs the CLI binary
that the wheel ships in ``lmscale/bin/`` (an editable install: the checkout's build folder's), with
``LMSCALE_PYTHON`` set to the interpreter this package is installed into, so that the binary's
Python steps (``report``'s plots, ``bench --impl torch-*``, ``train --impl torch-eager``) run with this
environment's torch and matplotlib rather than whatever ``python3`` is first on PATH.

A module of its own beside the package, not inside it: importing anything in ``lmscale`` runs the
package's ``__init__``, which loads liblmscale and so torch (seconds), for a command that only execs."""
from __future__ import annotations

import os
import pathlib
import sys

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent / "lmscale"  # site-packages/lmscale, <checkout>/python/lmscale


def candidates() -> list[pathlib.Path]:
    """Where the binary is looked for, in order: the package's bin/ (a wheel), then the build folders
    that lmscale._library searches for liblmscale.so ($LMSCALE_BUILD_DIR, the checkout's build/)."""
    folders = [_PACKAGE_DIR / "bin"]
    if os.environ.get("LMSCALE_BUILD_DIR"):
        folders.append(pathlib.Path(os.environ["LMSCALE_BUILD_DIR"]))
    root = _PACKAGE_DIR.parents[1]  # <checkout>/python/lmscale -> <checkout>
    folders += [root / "build", root / "build-gpu"]
    return [folder / "lmscale" for folder in folders]


def find_binary() -> pathlib.Path:
    for path in candidates():
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise SystemExit(
        "lmscale: the CLI binary was not found (looked for " + ", ".join(map(str, candidates())) + "). "
        "A wheel ships it in lmscale/bin/: reinstall with `pip install ./python` from an lmscale checkout; "
        "an editable install runs the checkout's build/lmscale: build it with `./lmscale build`.")


def main() -> None:
    binary = find_binary()
    # The binary's own choice when LMSCALE_PYTHON is unset would be the interpreter its build folder was
    # configured with, or python3: neither need be this environment's.
    os.environ.setdefault("LMSCALE_PYTHON", sys.executable)
    os.execv(str(binary), [str(binary), *sys.argv[1:]])


if __name__ == "__main__":
    main()
