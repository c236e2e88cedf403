"""Instance segmentation's label lines, as a COCO set is converted for it (the label kind
``segment`` of :mod:`autoprune.tasks.detection.formats`): a polygon ``class x1 y1 x2 y2 ...``
per object, from its COCO polygons (several parts joined into one outline over zero-width
bridges, as Ultralytics' ``merge_multi_segment`` does) or its RLE mask (uncompressed or
compressed, decoded here: all parts of the mask outlined and joined the same way); an object
without a segmentation gets its box as polygon (as Ultralytics' converter does, counted as
``box_as_polygon``). Pascal VOC holds boxes only and is refused.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ConfigError
from ..detection.formats import TOLERANCE, LabelKind, decode_rle
from ..detection.formats.coco import number


def polygon_line(c: int, points: np.ndarray, w: float, h: float, where: str) -> str:
    """``class x1 y1 x2 y2 ...`` of a polygon (N, 2) in pixels, checked against the image."""
    if len(points) < 3:
        raise ConfigError(f"{where} is a polygon of {len(points)} point(s): a polygon needs at "
                          f"least 3 points (6 numbers)")
    lo, hi = points.min(0), points.max(0)
    if lo.min() < -TOLERANCE or hi[0] > w + TOLERANCE or hi[1] > h + TOLERANCE:
        raise ConfigError(f"{where} has points outside the {w:g}x{h:g} image (x {lo[0]:g}.."
                          f"{hi[0]:g}, y {lo[1]:g}..{hi[1]:g}): fix the polygon or the image "
                          f"size")
    xy = np.clip(points / np.array([w, h]), 0.0, 1.0)
    return f"{c} " + " ".join(f"{v:.6f}" for v in xy.reshape(-1))


def _area(points: np.ndarray) -> float:
    x, y = points[:, 0], points[:, 1]
    return abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))) / 2


def join_parts(parts: list[np.ndarray]) -> np.ndarray:
    """Several outlines (each (N, 2)) as one polygon: the largest first, then each other part
    visited over a zero-width bridge from the closest point of the outline so far (as
    :func:`autoprune.datasets.scenes.polygon` and Ultralytics' ``merge_multi_segment``)."""
    parts = sorted(parts, key=lambda p: -_area(p))
    outline = parts[0]
    for part in parts[1:]:
        gaps = np.linalg.norm(outline[:, None] - part[None], axis=2)
        i, j = np.unravel_index(int(gaps.argmin()), gaps.shape)
        outline = np.concatenate([outline[:i + 1], part[j:], part[:j + 1], outline[i:]])
    return outline


def coco_outline(seg: Any, box: tuple[float, ...], w: float, h: float, where: str) -> np.ndarray:
    """The object's outline (N, 2) in pixels from COCO polygons or an RLE mask; its box when it
    has no segmentation."""
    if isinstance(seg, dict):
        mask = decode_rle(seg, int(h), int(w), where)
        if not mask.any():
            raise ConfigError(f"{where}: its RLE segmentation is an empty mask: fix or drop it")
        from ...datasets.scenes import polygon
        return polygon(mask) + 0.5  # pixel (i, j) covers [j, j + 1): its centre is at + 0.5
    if not seg:
        x0, y0, x1, y1 = box
        return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
    if not isinstance(seg, list) or not all(isinstance(p, list) for p in seg):
        raise ConfigError(f"{where} has segmentation {str(seg)[:60]}: COCO gives a list of "
                          f"polygons [[x1, y1, x2, y2, ...]] or an RLE {{'size', 'counts'}}")
    parts = []
    for k, p in enumerate(seg):
        if not all(map(number, p)) or len(p) % 2:
            raise ConfigError(f"{where} segmentation[{k}] is not a list of x, y pairs")
        if len(p) < 6:
            raise ConfigError(f"{where} segmentation[{k}] is a polygon of {len(p) // 2} "
                              f"point(s): a polygon needs at least 3 points (6 numbers)")
        parts.append(np.asarray(p, np.float64).reshape(-1, 2))
    return join_parts(parts)


def polygon_object_line(c: int, annotation: dict, box: tuple[float, float, float, float],
                        w: float, h: float, where: str, counts: dict) -> str:
    """The polygon line of a COCO object (its outline; its box when it has no segmentation)."""
    counts["box_as_polygon"] += not annotation.get("segmentation")
    outline = coco_outline(annotation.get("segmentation"), box, w, h, where)
    return polygon_line(c, outline, w, h, f"{where} segmentation")


POLYGONS = LabelKind("segment", "polygons", polygon_object_line,
                     boxes_only="instance segmentation needs COCO polygons/RLE or YOLO-seg labels")

__all__ = ["POLYGONS", "coco_outline", "join_parts", "polygon_line", "polygon_object_line"]
