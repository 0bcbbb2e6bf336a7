"""`pip install ./python` (from an lmscale checkout): builds the C++ library and the lmscale._C
extension with CMake against the torch installed in the target environment (through ./lmscale build),
then installs both .so files inside the lmscale package with library paths relative to it ($ORIGIN),
and records the torch they were built against (lmscale/_build.json, checked at import).

Out of tree: the CMake build goes to $LMSCALE_BUILD_DIR, default a cache folder outside the checkout
(~/.cache/lmscale/wheel-build, kept so a rebuild only compiles what changed; point LMSCALE_BUILD_DIR
at an existing build folder, e.g. the checkout's build/, to reuse what it already compiled), and
setuptools' own build/ and *.egg-info folders go to a temporary folder: nothing is written into the
source tree. Progress: the build's lines go to the terminal (/dev/tty) even when pip hides the
backend's output, and to pip's log (pip -v shows them).

Why the build reaches outside pip's isolated build environment: lmscale must link against the very
torch it will run with (C++ ABI, CUDA version), and that torch is in the target environment, not in
the throwaway one pip makes. pip isolates the build through environment variables (PYTHONPATH,
PYTHONNOUSERSITE) on the same interpreter, so the CMake step runs that interpreter without them.
Offline, `pip install --no-build-isolation ./python` skips the isolated environment altogether.

Editable installs (`pip install -e python`, `./lmscale python-install`) skip the CMake step: the package
then loads the library from the checkout's build folder (see lmscale/_library.py).
"""
import atexit
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
SCRATCH = pathlib.Path(tempfile.mkdtemp(prefix="lmscale-setuptools-"))  # setuptools' build/ and egg-info
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)  # pip has copied what it needs by then


def outer_environment():
    """The environment without pip's build isolation: the target environment's site-packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}


def default_build_dir():
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    return cache / "lmscale" / "wheel-build"


class Progress:
    """Build lines where a person sees them: the terminal when there is one (pip captures the backend's
    stdout and stderr and shows only a spinner), and stderr, which pip logs."""

    def __init__(self):
        try:
            self.tty = open("/dev/tty", "w")
        except OSError:
            self.tty = None
        self.start = time.monotonic()

    def __call__(self, line):
        text = f"[lmscale build {time.monotonic() - self.start:5.0f}s] {line.rstrip()}"
        print(text, file=sys.stderr, flush=True)
        if self.tty:
            self.tty.write(text + "\n")
            self.tty.flush()


def run_logged(cmd, env, say):
    """Runs cmd, passing each output line to `say`; ninja's "[k/n]" lines become a percentage."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    tail = []
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        step = re.match(r"\[(\d+)/(\d+)\]\s*(.*)", line)
        say(f"{100 * int(step[1]) // int(step[2]):3d}% {step[3]}" if step else line)
    if proc.wait() != 0:
        raise RuntimeError(f"lmscale: `{' '.join(map(str, cmd))}` failed (exit {proc.returncode}); its last lines:\n"
                           + "".join(tail))


def cmake_command(build_dir):
    """The cmake that configured build_dir (CMakeCache.txt's CMAKE_COMMAND), else the one on PATH."""
    cache = build_dir / "CMakeCache.txt"
    for line in cache.read_text().splitlines() if cache.is_file() else []:
        if line.startswith("CMAKE_COMMAND:"):
            return line.split("=", 1)[1]
    return "cmake"


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        env = outer_environment()
        check = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                               env=env, capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(
                f"lmscale: {sys.executable} has no torch ({check.stderr.strip().splitlines()[-1:]}). Install "
                "torch into the environment first: lmscale builds against the torch it will run with."
            )
        torch_version, cuda = check.stdout.split()
        build_dir = pathlib.Path(env.get("LMSCALE_BUILD_DIR") or default_build_dir()).resolve()
        build_dir.mkdir(parents=True, exist_ok=True)
        env.update(LMSCALE_PYTHON=sys.executable, LMSCALE_BUILD_DIR=str(build_dir),
                   LMSCALE_BUILD_TARGETS=env.get("LMSCALE_BUILD_TARGETS", "lmscale lmscale_python"))
        if not (ROOT / ".deps" / ".complete").is_file():  # the headers, fetched outside the checkout
            env.setdefault("LMSCALE_DEPS", str(build_dir.parent / "deps"))
        say = Progress()
        say(f"building liblmscale and lmscale._C against torch {torch_version} in {build_dir} "
            "(a first build takes about 16 minutes on 2 cores; later ones only what changed)")
        run_logged([str(ROOT / "lmscale"), "build"], env, say)
        target = pathlib.Path(self.build_lib).resolve()
        run_logged([cmake_command(build_dir), "--install", str(build_dir), "--component", "lmscale_python",
                    "--prefix", str(target)], env, say)
        package = target / "lmscale"
        if not (package / "liblmscale.so").is_file() or not list(package.glob("_C.*.so")):
            raise RuntimeError(f"lmscale: the build installed no liblmscale.so and _C into {package}; see the "
                               "output above (lmscale._C needs the Python headers: apt-get install python3-dev).")
        record = {"torch": torch_version, "cuda": None if cuda == "None" else cuda}
        (package / "_build.json").write_text(json.dumps(record) + "\n")
        say(f"installed into the wheel: {', '.join(sorted(p.name for p in package.glob('*.so')))}")


class BinaryDistribution(Distribution):
    """The wheel holds compiled code for one platform and Python version."""

    def has_ext_modules(self):
        return True


setup(
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
    options={"build": {"build_base": str(SCRATCH / "build")}, "egg_info": {"egg_base": str(SCRATCH)}},
)
