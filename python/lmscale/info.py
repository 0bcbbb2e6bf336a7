"""What the loaded lmscale build holds (``python -m lmscale``, ``lmscale.build_info()``)."""
from __future__ import annotations

import pathlib
import struct
from typing import Any

import torch

from . import _library


_FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)


def _kernel_archs(library: str) -> str:
    """The GPU architectures of the CUDA code inside liblmscale.so, read from its fat binaries (no GPU
    or CUDA toolkit needed): each fat binary is a header (magic, version, header size, payload size)
    followed by entries (kind 1 = PTX, 2 = cubin; header size, payload size; the SM number at byte 28)."""
    data = pathlib.Path(library).read_bytes()
    found = set()
    start = data.find(_FATBIN_MAGIC)
    while start != -1:
        header_size, payload = struct.unpack_from("<HQ", data, start + 6)
        entry, end = start + header_size, start + header_size + payload
        while entry + 32 <= min(end, len(data)):
            kind, entry_header, size = struct.unpack_from("<HxxIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            found.add(f"sm_{arch} (cubin)" if kind == 2 else f"compute_{arch} (PTX)")
            if entry_header == 0:
                break
            entry += entry_header + size
        start = data.find(_FATBIN_MAGIC, max(end, start + 4))
    return ", ".join(sorted(found)) if found else "none (no CUDA code in the library)"


def build_info() -> dict[str, Any]:
    """Library path, extension, torch version and the attention kernels built (dtypes x head dims, and
    the CUDA architecture they were compiled for)."""
    C = _library.load()
    library = str(_library.library_path())
    kernels = torch.ops.lmscale.flash_build_info()
    return {
        "library": library,
        "extension (lmscale._C: DDP, ShardedOptimizer)": getattr(C, "__file__", None) or "not built",
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
        "CUDA kernels (dtypes x head dims)": kernels,
        "CUDA kernel architectures": _kernel_archs(library),
        "CPU": "tiled ATen reference: any head dim, dtypes bf16/fp16/fp32/fp64",
        "GPU visible": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
    }
