"""The area a causal forward's tiles visit against the area its queries see (CPU only, no GPU).

Question: how much of the gap between packed short documents and one long sequence is the tile geometry itself (the
masked half of every diagonal tile, a sequence's partial last tile), and how much of it a half-width diagonal tile
(Note [half edge tile], src/kernels/hopper/flash_fwd_hopper.cuh) takes back? The visited area is the tensor cores'
work; a kernel whose per-tile overheads were zero would reach at most (visible / visited) of its long-sequence rate.
Retire: with the probe's half edge variants (``_half`` in tools/flash_hopper_probe.cu), once they are timed and
shipped or dropped.

    python tools/probes/hopper_fwd/visited_area.py
"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
from lmscale.attention_layouts_bench import packed_lengths  # noqa: E402  (the bench's documents)


def visited(n: int, rows: int, keys: int, top_aligned: bool, half_edge: bool) -> float:
    """Query-key pairs the tiles of one causal n x n sequence visit (rows x keys tiles, walked per 64-row group)."""
    pad = (rows - n % rows) % rows if top_aligned else 0
    area = 0.0
    for tile in range(math.ceil(n / rows)):
        m0 = tile * rows - pad
        last_key = min(m0 + rows, n) - 1
        n_tiles = last_key // keys + 1
        area += n_tiles * rows * keys
        if half_edge and n_tiles > 1:  # the first-walked (last) key tile, per group of 64 rows
            n0 = (n_tiles - 1) * keys
            for g in range(rows // 64):
                if m0 + 64 * g + 63 < n0 + keys // 2:
                    area -= 64 * keys / 2
    return area


def main() -> int:
    # (label, sequence lengths, rows, keys, top-aligned): the shipped forward tiles (flash_hopper_tiles.h); causal
    # calls of at most 2,048 keys per sequence at d = 64 take FwdShort's 128 x 128.
    docs = packed_lengths(16384, 16)
    cases = [("16 packed documents, d 64 / d 128 (128 x 128)", docs, 128, 128, False),
             ("16 x 1024, d 64 / d 128 (128 x 128)", [1024] * 16, 128, 128, False),
             ("4 x 512, the step shape at d 64 (128 x 128)", [512] * 4, 128, 128, False),
             ("one 16,384-token sequence, d 128 (128 x 128)", [16384], 128, 128, False),
             ("one 16,384-token sequence, d 64 (192 x 128, top-aligned)", [16384], 192, 128, True)]
    print(f"documents: {sorted(docs)}")
    print("| case | visited / visible | with half edge tiles |\n|---|---|---|")
    for label, lengths, rows, keys, top in cases:
        seen = sum(n * (n + 1) / 2 for n in lengths)
        full = sum(visited(n, rows, keys, top, False) for n in lengths)
        half = sum(visited(n, rows, keys, top, True) for n in lengths)
        print(f"| {label} | {full / seen:.3f} | {half / seen:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
