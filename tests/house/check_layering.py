#!/usr/bin/env python3
"""Fails when a folder of src/ includes a header of a higher layer or of a sibling in its own layer
(docs/design.md §2), when src/kernels/ includes anything outside kernels/ or any ATen, c10 or
torch header, and when a folder other than src/ops/ (the bridge) includes src/kernels/. Run by CTest (House.Layering); no build or GPU needed.

    python3 tests/house/check_layering.py [repo root]
    python3 tests/house/check_layering.py --self-test   # it catches what it should, on a made-up tree
"""
import re
import sys
from pathlib import Path

import house_check

# folder -> layer; the table of docs/design.md §2. A folder may include its own headers and those of
# folders in a strictly lower layer.
LAYERS = {
    "core": 0,
    "kernels": 1,
    "results": 1,
    "ops": 2,
    "model": 3,
    "train": 4,
    "profile": 5,
    "distributed": 5,
    "bench": 6,
    "train_app": 6,
    "cli": 7,
}
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/[^"]*"')
FRAMEWORK_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]((ATen|c10|torch)/[^>"]*)[>"]')


def violations(root: Path):
    src = root / "src"
    if not src.is_dir():
        yield f"{root} has no src/ folder; pass the repo root"
    for path in sorted(src.rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        folder = path.relative_to(src).parts[0]
        if folder not in LAYERS:
            yield (f"{path.relative_to(root)}: folder src/{folder}/ has no layer; add it to LAYERS here and "
                   "to the table of docs/design.md §2")
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            where = f"{path.relative_to(root)}:{number}"
            framework = FRAMEWORK_INCLUDE.match(line)
            if folder == "kernels" and framework:
                yield (f"{where}: src/kernels/ includes <{framework.group(1)}>; kernels take plain pointers and "
                       "strides (kernels/flash_params.h) and src/ops/ does the tensor work")
                continue
            local = LOCAL_INCLUDE.match(line)
            if not local:
                continue
            target = local.group(1)
            if target == folder or target not in LAYERS:
                continue  # own folder, or not a src/ folder (e.g. a generated header's own path)
            if folder == "kernels":
                yield (f"{where}: src/kernels/ includes {target}/; kernels include only kernels/ headers, so "
                       "the layer stays free of ATen (move the shared piece into kernels/ or into ops/)")
            elif target == "kernels" and folder != "ops":
                yield (f"{where}: src/{folder}/ includes kernels/; src/ops/ is the only bridge from tensors to "
                       "kernels, so call the op instead (docs/design.md §2)")
            elif LAYERS[target] >= LAYERS[folder]:
                kind = "a sibling layer" if LAYERS[target] == LAYERS[folder] else "a higher layer"
                yield (f"{where}: src/{folder}/ (layer {LAYERS[folder]}) includes {target}/ ({kind}, layer "
                       f"{LAYERS[target]}); move the code down or pass what it needs in (docs/design.md §2)")


def self_test() -> int:
    """A made-up src/ with allowed includes and five violations: exactly the five must be reported."""
    import tempfile
    files = {
        "core/a.h": '#include "core/b.h"\n',
        "model/m.cpp": '#include "ops/x.h"\n#include "core/a.h"\n#include "distributed/ddp.h"\n',
        "kernels/k.cu": '#include "kernels/p.h"\n#include <ATen/ATen.h>\n#include "core/a.h"\n',
        "profile/p.cpp": '#include "train/t.h"\n#  include "distributed/z.h"\n',
        "cli/c.cpp": '#include "bench/b.h"\n#include "profile/p.h"\n#include <torch/torch.h>\n',
        "ops/o.cpp": '#include "kernels/p.h"\n',
        "train/t.cpp": '#include "ops/o.h"\n#include "kernels/p.h"\n',
    }
    expected = ["model/m.cpp:3", "kernels/k.cu:2", "kernels/k.cu:3", "profile/p.cpp:2", "train/t.cpp:2"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in files.items():
            (root / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "src" / rel).write_text(text)
        found = list(violations(root))
    return house_check.expect_found(found, [f"src/{e}:" for e in expected])


if __name__ == "__main__":
    sys.exit(house_check.main("check_layering", violations, self_test, noun="violation"))
