"""The fp32 CUDA kernels' logic on the CPU, so CI (no GPU) checks it: the kernel sources
(src/kernels/flash_fp32_*) compiled with the host compiler under fp32_emulation/emulate_cuda.h (each
block as 256 threads with real barriers, NaN-filled shared memory), run forward and backward on odd
shapes against an fp64 reference (fp32_emulation/check_fp32_kernels.cpp); and once more under
ThreadSanitizer, where a missing __syncthreads shows as a data race. What this cannot see: GPU
memory-model effects, warp scheduling, fast-math intrinsics, and register or shared-memory limits
(ptxas reports those at build time). The GPU test is test_flash_fp32_cuda.py."""
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent / "fp32_emulation"
SOURCES = ["flash_params.h", "flash_sequence.cuh", "flash_fp32.h", "cuda_check.h", "flash_head_dims.h", "head_dim_switch.h",
           "flash_fp32_tile.cuh", "flash_fp32_fwd.cu", "flash_fp32_bwd.cu"]
CXX = shutil.which("g++") or shutil.which("c++")

pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")


def host_copy(text):
    """A kernel source with its CUDA-only lines rewritten for emulate_cuda.h."""
    text = re.sub(r"#include <cuda_runtime(_api)?\.h>", "", text)
    text = text.replace("extern __shared__ float smem[];", "float* smem = emu::smem();")
    text, launches = re.subn(r"(\w+)<<<(.*), (\w+), (\w+), (\w+)>>>\((\w+)\);", r"emu::launch(\1, \2, \3, \4, \6);", text)
    return text, launches


def build(tmp_path, name, flags):
    kernels = tmp_path / "kernels"
    kernels.mkdir(exist_ok=True)
    launches = 0
    for source in SOURCES:
        text, n = host_copy((ROOT / "src" / "kernels" / source).read_text())
        launches += n
        (kernels / source).write_text(text)
    assert launches == 1, "expected the one launch site of flash_fp32_tile.cuh; update host_copy()"
    exe = tmp_path / name
    cmd = [CXX, "-std=c++17", *flags, "-include", str(HERE / "emulate_cuda.h"), "-I", str(tmp_path),
           "-x", "c++", str(kernels / "flash_fp32_fwd.cu"), "-x", "c++", str(kernels / "flash_fp32_bwd.cu"),
           "-x", "c++", str(HERE / "check_fp32_kernels.cpp"), "-o", str(exe), "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe


def run(exe, *args):
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=900)
    print(proc.stdout)
    return proc


def test_fp32_kernels_match_fp64_on_cpu(tmp_path):
    proc = run(build(tmp_path, "check", ["-O2"]))
    assert proc.returncode == 0 and "0 failures" in proc.stdout, proc.stdout + proc.stderr


def test_fp32_kernels_have_no_shared_memory_race(tmp_path):
    probe = subprocess.run([CXX, "-fsanitize=thread", "-x", "c++", "-", "-o", str(tmp_path / "probe")],
                           input="int main() { return 0; }", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the compiler has no ThreadSanitizer")
    proc = run(build(tmp_path, "check_tsan", ["-O1", "-g", "-fsanitize=thread"]), "quick")
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-6000:]
    assert proc.returncode == 0 and "0 failures" in proc.stdout, proc.stdout + proc.stderr
