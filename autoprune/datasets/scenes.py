"""Scenes built from Fashion-MNIST: garments pasted on a canvas, deterministic by seed.

Each garment keeps its real pixels (tinted with a random colour) on a textured background. The
garments give exact labels for two tasks:

- detection: one box per garment (tight around its visible pixels), written in YOLO format;
- segmentation: a per-pixel class mask (0 = background, ``c + 1`` = Fashion-MNIST class ``c``);
- instance segmentation: one polygon per garment, the outline of its visible pixels, written in
  YOLO-seg format (``write_yolo_dataset(..., task="segment")``).

``write_yolo_dataset`` and ``write_segmentation_dataset`` write folders any user tool can read;
``make_scenes`` returns arrays for in-memory use.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

from ..engine.store import atomic_write, write_text_atomic
from ..errors import ConfigError
from .fashion_mnist import CLASSES, _FILES, _load, find_root

INK = 40  # a garment pixel counts as the garment where its gray value exceeds this


@dataclass
class Scene:
    """One scene: ``image`` (H, W, 3) uint8, ``mask`` (H, W) uint8, ``boxes`` (N, 4) x0 y0 x1 y1
    in pixels, ``labels`` (N,) Fashion-MNIST class indices, ``instances`` (H, W) int64: the index
    of the garment (into ``boxes``/``labels``) each pixel shows, -1 for the background."""

    image: np.ndarray
    mask: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    instances: np.ndarray | None = None


def _garments(split: str, root: str | os.PathLike | None) -> tuple[np.ndarray, np.ndarray]:
    base = find_root(root)
    return _load(base, _FILES[split][0]), _load(base, _FILES[split][1]).astype(np.int64)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size] / max(1, size - 1)
    a, b = rng.uniform(-40, 40, 2)
    base = rng.uniform(20, 90, 3)
    img = base[None, None, :] + (a * xx + b * yy)[..., None]
    img += rng.normal(0, 6, (size, size, 3))
    return np.clip(img, 0, 255)


def _resize(garment: np.ndarray, side: int) -> np.ndarray:
    idx = (np.arange(side) * garment.shape[0] / side).astype(int)
    return garment[idx][:, idx]


def make_scene(rng: np.random.Generator, images: np.ndarray, labels: np.ndarray, size: int,
               objects: tuple[int, int] = (1, 4), scale: tuple[float, float] = (0.25, 0.5)) -> Scene:
    """Paste between ``objects[0]`` and ``objects[1]`` garments, each ``scale`` x ``size`` wide."""
    canvas = _background(rng, size)
    mask = np.zeros((size, size), np.uint8)
    owner = np.full((size, size), -1, np.int64)
    picked = []
    for k in range(int(rng.integers(objects[0], objects[1] + 1))):
        i = int(rng.integers(len(images)))
        side = max(8, int(size * rng.uniform(*scale)))
        g = _resize(images[i], side).astype(np.float64)
        x, y = (int(v) for v in rng.integers(0, size - side + 1, 2))
        on = g > INK
        colour = rng.uniform(120, 255, 3)
        patch = canvas[y:y + side, x:x + side]
        patch[on] = (g[on, None] / 255.0) * colour
        mask[y:y + side, x:x + side][on] = labels[i] + 1
        owner[y:y + side, x:x + side][on] = k
        picked.append(int(labels[i]))
    boxes, kept = [], []
    instances = np.full((size, size), -1, np.int64)
    for k, label in enumerate(picked):
        ys, xs = np.nonzero(owner == k)
        if len(xs) < 12:  # hidden behind later garments
            continue
        instances[ys, xs] = len(kept)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        kept.append(label)
    return Scene(canvas.astype(np.uint8), mask, np.array(boxes, np.float32).reshape(-1, 4),
                 np.array(kept, np.int64), instances)


def make_scenes(count: int, *, size: int = 128, seed: int = 0, split: str = "train",
                objects: tuple[int, int] = (1, 4), scale: tuple[float, float] = (0.25, 0.5),
                root: str | os.PathLike | None = None) -> list[Scene]:
    """``count`` scenes, identical for the same arguments. Garments come from Fashion-MNIST's
    ``split`` ("train" or "test"), so train and validation scenes never share a garment."""
    if count < 1 or size < 16:
        raise ConfigError(f"count={count} and size={size} must be at least 1 and 16")
    if not (1 <= objects[0] <= objects[1]) or not (0 < scale[0] <= scale[1] <= 1):
        raise ConfigError(f"objects={objects} or scale={scale} is not a valid range")
    images, labels = _garments(split, root)
    rng = np.random.default_rng(seed)
    return [make_scene(rng, images, labels, size, objects, scale) for _ in range(count)]


def _save_png(array: np.ndarray, path: Path) -> None:
    atomic_write(path, lambda tmp: Image.fromarray(array).save(tmp, format="PNG"))


def polygon(region: np.ndarray) -> np.ndarray:
    """The outline of the boolean ``region`` (H, W) as one polygon (N, 2) of x, y pixel centres
    (OpenCV's ``findContours``). A region in several parts (a garment cut by one pasted over
    it) gives one polygon that visits each part over a zero-width bridge from the closest point
    of the outline so far, as Ultralytics' ``merge_multi_segment`` joins COCO's parts."""
    import cv2  # OpenCV comes with Ultralytics, the only reader of these labels

    contours, _ = cv2.findContours(region.astype(np.uint8), cv2.RETR_EXTERNAL,
                                   cv2.CHAIN_APPROX_SIMPLE)
    parts = sorted((c.reshape(-1, 2).astype(np.float64) for c in contours),
                   key=lambda c: -cv2.contourArea(c.astype(np.float32)))
    outline = parts[0]
    for part in parts[1:]:
        gaps = np.linalg.norm(outline[:, None] - part[None], axis=2)
        i, j = np.unravel_index(int(gaps.argmin()), gaps.shape)
        outline = np.concatenate([outline[:i + 1], part[j:], part[:j + 1], outline[i:]])
    if len(outline) < 3:  # a pixel or a line of pixels: its bounding rectangle
        (x0, y0), (x1, y1) = outline.min(0), outline.max(0) + 1
        outline = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
    return outline


def _label_lines(s: Scene, size: int, task: str) -> list[str]:
    """YOLO label lines of a scene: ``class cx cy w h`` per garment (detect) or ``class x1 y1 x2
    y2 ...`` around its visible pixels (segment); fractions of the canvas."""
    lines = []
    for k, ((x0, y0, x1, y1), c) in enumerate(zip(s.boxes, s.labels)):
        if task == "segment":
            # pixel (i, j) covers [j, j + 1) x [i, i + 1): its centre is at + 0.5
            points = np.clip((polygon(s.instances == k) + 0.5) / size, 0.0, 1.0)
            lines.append(f"{c} " + " ".join(f"{v:.6f}" for v in points.reshape(-1)))
        else:
            cx, cy = (x0 + x1) / 2 / size, (y0 + y1) / 2 / size
            lines.append(f"{c} {cx:.6f} {cy:.6f} {(x1 - x0) / size:.6f} {(y1 - y0) / size:.6f}")
    return lines


def write_yolo_dataset(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                       size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                       scale: tuple[float, float] = (0.25, 0.5),
                       data_root: str | os.PathLike | None = None, task: str = "detect") -> Path:
    """Write a YOLO detection set (``images/``, ``labels/``, ``data.yaml``); returns data.yaml.
    ``task="segment"`` writes a YOLO-seg set instead: one polygon per garment, the outline of its
    largest visible part (the same images)."""
    if task not in ("detect", "segment"):
        raise ConfigError(f"task={task!r}: write_yolo_dataset writes 'detect' (boxes) or "
                          f"'segment' (polygons) labels")
    root = Path(root)
    for split, count, offset, source in (("train", train, 0, "train"), ("val", val, 1, "test")):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        scenes = make_scenes(count, size=size, seed=seed * 2 + offset, split=source,
                             objects=objects, scale=scale, root=data_root)
        for n, s in enumerate(scenes):
            _save_png(s.image, root / "images" / split / f"{n:05d}.png")
            lines = _label_lines(s, size, task)
            write_text_atomic(root / "labels" / split / f"{n:05d}.txt",
                              "\n".join(lines) + ("\n" if lines else ""))
    data = {"path": str(root.resolve()), "train": "images/train", "val": "images/val",
            "names": {i: name for i, name in enumerate(CLASSES)}}
    write_text_atomic(root / "data.yaml", yaml.safe_dump(data, sort_keys=False))  # written last
    return root / "data.yaml"


def write_segmentation_dataset(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                               size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                               scale: tuple[float, float] = (0.25, 0.5),
                               data_root: str | os.PathLike | None = None) -> Path:
    """Write ``<root>/{train,val}/{images,masks}/*.png`` (masks: 0 background, class + 1)."""
    root = Path(root)
    for split, count, offset, source in (("train", train, 0, "train"), ("val", val, 1, "test")):
        for sub in ("images", "masks"):
            (root / split / sub).mkdir(parents=True, exist_ok=True)
        scenes = make_scenes(count, size=size, seed=seed * 2 + offset, split=source,
                             objects=objects, scale=scale, root=data_root)
        for n, s in enumerate(scenes):
            _save_png(s.image, root / split / "images" / f"{n:05d}.png")
            _save_png(s.mask, root / split / "masks" / f"{n:05d}.png")
    return root
