"""`pip install ./python` (from an lmscale checkout): builds the C++ library and the lmscale._C
extension with CMake against the torch installed in the target environment (through ./lmscale build),
then packages both .so files inside the lmscale package, so `import lmscale` works from any folder.

Why the build reaches outside pip's isolated build environment: lmscale must link against the very
torch it will run with (C++ ABI, CUDA version), and that torch is in the target environment, not in
the throwaway one pip makes. pip isolates the build through environment variables (PYTHONPATH,
PYTHONNOUSERSITE) on the same interpreter, so the CMake step runs that interpreter without them.

Editable installs (`pip install -e python`, `./lmscale python-install`) skip the CMake step: the package
then loads the library from the checkout's build folder (see lmscale/_library.py).
"""
import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def outer_environment():
    """The environment without pip's build isolation: the target environment's site-packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        env = outer_environment()
        check = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], env=env,
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(
                f"lmscale: {sys.executable} has no torch ({check.stderr.strip().splitlines()[-1:]}). Install "
                "torch into the environment first: lmscale builds against the torch it will run with."
            )
        build_dir = pathlib.Path(env.get("LMSCALE_BUILD_DIR", ROOT / "build"))
        env.update(LMSCALE_PYTHON=sys.executable, LMSCALE_BUILD_DIR=str(build_dir),
                   LMSCALE_BUILD_TARGETS=env.get("LMSCALE_BUILD_TARGETS", "lmscale lmscale_python"))
        subprocess.run([str(ROOT / "lmscale"), "build"], env=env, check=True)
        target = pathlib.Path(self.build_lib) / "lmscale"
        built = [build_dir / "liblmscale.so", *build_dir.glob("_C.*.so")]
        if not built[0].is_file():
            raise RuntimeError(f"lmscale: the build finished without {built[0]}; see the output above.")
        for path in built:
            shutil.copy2(path, target / path.name)


class BinaryDistribution(Distribution):
    """The wheel holds compiled code for one platform and Python version."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
