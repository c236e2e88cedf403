"""COCO's run-length encoded masks (RLE): the compressed ``counts`` string and the mask it
describes, checked against the image's size (pycocotools' format, read without it)."""
from __future__ import annotations

import numpy as np

from ....errors import ConfigError


def rle_counts(counts: str) -> list[int]:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``)."""
    out: list[int] = []
    p = 0
    while p < len(counts):
        x, k, more = 0, 0, True
        while more:
            if p >= len(counts):
                raise ValueError("truncated")
            c = ord(counts[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(out) > 2:
            x += out[-2]
        out.append(x)
    return out


def decode_rle(rle: dict, h: int, w: int, where: str) -> np.ndarray:
    """A COCO RLE (counts as a list of run lengths or a compressed string) as a boolean (H, W)
    mask, checked against the image's size."""
    size, counts = rle.get("size"), rle.get("counts")
    if not isinstance(size, list) or len(size) != 2 or list(size) != [h, w]:
        raise ConfigError(f"{where}: its RLE size {size!r} is not the image's [height, width] "
                          f"[{h}, {w}]")
    try:
        runs = rle_counts(counts) if isinstance(counts, str) else \
            [int(c) for c in counts] if isinstance(counts, list) else None
    except (ValueError, TypeError):
        runs = None
    if runs is None or any(r < 0 for r in runs) or sum(runs) != h * w:
        raise ConfigError(f"{where}: its RLE 'counts' do not describe a {h}x{w} mask (damaged "
                          f"or for another size)")
    values = np.zeros(len(runs), bool)
    values[1::2] = True
    return np.repeat(values, runs).reshape((h, w), order="F")


__all__ = ["decode_rle", "rle_counts"]
