"""Scenes built from Fashion-MNIST: garments pasted on a canvas, deterministic by seed.

Each garment keeps its real pixels (tinted with a random colour) on a textured background. The
garments give exact labels for two tasks:

- detection: one box per garment (tight around its visible pixels), written in YOLO format;
- segmentation: a per-pixel class mask (0 = background, ``c + 1`` = Fashion-MNIST class ``c``);
- instance segmentation: one polygon per garment, the outline of its visible pixels, written in
  YOLO-seg format (``write_yolo_dataset(..., task="segment")``);
- pose: the box plus five keypoints per garment, the corners of its whole box and its centre, each
  with a visibility (``task="pose"``, the same images as detection);
- oriented boxes: each garment rotated by a random angle, one rotated box per garment around its
  visible pixels in the garment's own frame, written as Ultralytics' DOTA-style 4 corners
  (``task="obb"``).

``write_yolo_dataset`` and ``write_segmentation_dataset`` write folders any user tool can read;
``make_scenes`` returns arrays for in-memory use.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

from ..engine.files import atomic_write, write_text_atomic
from ..errors import ConfigError
from .fashion_mnist import CLASSES, _FILES, _load, find_root

INK = 40  # a garment pixel counts as the garment where its gray value exceeds this
TASKS = ("detect", "segment", "pose", "obb")  # the label kinds write_yolo_dataset writes
KPT_SHAPE = [5, 3]  # pose: top-left, top-right, bottom-right, bottom-left corner, centre; x y v
FLIP_IDX = [1, 0, 3, 2, 4]  # each keypoint's twin in a left-right flipped image


@dataclass
class Scene:
    """One scene: ``image`` (H, W, 3) uint8, ``mask`` (H, W) uint8, ``boxes`` (N, 4) x0 y0 x1 y1
    in pixels, ``labels`` (N,) Fashion-MNIST class indices, ``instances`` (H, W) int64: the index
    of the garment (into ``boxes``/``labels``) each pixel shows, -1 for the background.

    ``keypoints`` (N, 5, 3): x, y in pixels and a visibility of the corners of each garment's
    whole box (all its pixels, hidden ones too; top-left, top-right, bottom-right, bottom-left in
    the garment's own frame) and of its centre: 2 in view, 1 covered by a garment pasted over
    it, 0 off the canvas. ``corners`` (N, 4, 2): the rotated box around each garment's visible
    pixels, in the garment's own frame (its corners in the same order, in pixels; for a garment
    that is not rotated, the corners of ``boxes``)."""

    image: np.ndarray
    mask: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    instances: np.ndarray | None = None
    keypoints: np.ndarray | None = None
    corners: np.ndarray | None = None


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


def _fitting_side(side: int, angle: float, size: int) -> int:
    """``side``, reduced so that the garment turned by ``angle`` degrees (plus a pixel each way)
    still fits on the ``size`` canvas."""
    spread = abs(math.cos(math.radians(angle))) + abs(math.sin(math.radians(angle)))
    return max(4, min(side, int((size - 2) / spread)))


def _rotated(garment: np.ndarray, angle: float) -> tuple[np.ndarray, np.ndarray]:
    """``garment`` (side, side) turned by ``angle`` degrees about its centre onto a square patch
    it fits in (bilinear), and the 2x3 map from the garment's own continuous coordinates (pixel
    ``(i, j)`` covers ``[j, j + 1) x [i, i + 1)``) to the patch's."""
    import cv2  # OpenCV comes with Ultralytics, the only reader of these labels

    side = garment.shape[0]
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    foot = int(math.ceil(side * (abs(c) + abs(s)))) + 2
    turn = np.array([[c, -s], [s, c]])
    frame = np.concatenate([turn, (foot / 2 - turn @ np.full(2, side / 2))[:, None]], 1)
    # OpenCV's pixel (i, j) sits at (j, i), ours at (j + 0.5, i + 0.5)
    shift = frame[:, 2] + turn @ np.full(2, 0.5) - 0.5
    patch = cv2.warpAffine(garment, np.concatenate([turn, shift[:, None]], 1), (foot, foot),
                           flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return patch, frame


def _frame_box(frame: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """The box (u0, v0, u1, v1), in the garment's own coordinates (``frame``: garment to canvas),
    around the canvas pixels ``(ys, xs)``: exact pixel edges for a garment that is not turned."""
    turn, shift = frame[:, :2], frame[:, 2]
    centres = np.stack([xs + 0.5, ys + 0.5], 1) - shift
    own = centres @ turn  # turn is orthonormal: its transpose undoes it
    return np.concatenate([own.min(0) - 0.5, own.max(0) + 0.5])


def _corners(frame: np.ndarray, box: np.ndarray, inward: float = 0.0) -> np.ndarray:
    """The corners (top-left, top-right, bottom-right, bottom-left) and centre of ``box`` (in the
    garment's coordinates) on the canvas, each moved ``inward`` pixels towards the centre."""
    u0, v0, u1, v1 = box
    points = np.array([[u0, v0], [u1, v0], [u1, v1], [u0, v1]], np.float64)
    centre = np.array([(u0 + u1) / 2, (v0 + v1) / 2])
    points = np.concatenate([points + inward * np.sign(centre - points), centre[None]])
    return points @ frame[:, :2].T + frame[:, 2]


def _keypoints(frame: np.ndarray, box: np.ndarray, owner: np.ndarray, k: int) -> np.ndarray:
    """The five keypoints (x, y, visibility) of garment ``k`` whose whole box is ``box``: a point
    is read on the pixel half a pixel inside the box; 2 in view, 1 where a garment pasted later
    covers it, 0 off the canvas."""
    size = owner.shape[0]
    points = _corners(frame, box)[:, :2]
    inside = np.floor(_corners(frame, box, inward=0.5)).astype(np.int64)
    out = np.zeros((len(points), 3))
    out[:, :2] = points
    for n, (x, y) in enumerate(inside):
        if not (0 <= x < size and 0 <= y < size):
            continue
        out[n, 2] = 1 if owner[y, x] > k else 2
    return out


def make_scene(rng: np.random.Generator, images: np.ndarray, labels: np.ndarray, size: int,
               objects: tuple[int, int] = (1, 4), scale: tuple[float, float] = (0.25, 0.5),
               rotate: bool = False) -> Scene:
    """Paste between ``objects[0]`` and ``objects[1]`` garments, each ``scale`` x ``size`` wide
    (``rotate``: each turned by a random angle in [0, 180) degrees, made smaller where it would
    not fit)."""
    canvas = _background(rng, size)
    mask = np.zeros((size, size), np.uint8)
    owner = np.full((size, size), -1, np.int64)
    picked, frames, extents = [], [], []
    for k in range(int(rng.integers(objects[0], objects[1] + 1))):
        i = int(rng.integers(len(images)))
        side = max(8, int(size * rng.uniform(*scale)))
        if rotate:
            angle = float(rng.uniform(0, 180))
            g, frame = _rotated(_resize(images[i], _fitting_side(side, angle, size))
                                .astype(np.float64), angle)
        else:
            g, frame = _resize(images[i], side).astype(np.float64), np.eye(2, 3)
        foot = g.shape[0]
        x, y = (int(v) for v in rng.integers(0, size - foot + 1, 2))
        on = g > INK
        colour = rng.uniform(120, 255, 3)
        patch = canvas[y:y + foot, x:x + foot]
        patch[on] = (g[on, None] / 255.0) * colour
        mask[y:y + foot, x:x + foot][on] = labels[i] + 1
        owner[y:y + foot, x:x + foot][on] = k
        picked.append(int(labels[i]))
        frame = frame + np.array([[0, 0, x], [0, 0, y]])  # garment -> canvas
        ys, xs = np.nonzero(on)
        frames.append(frame)
        extents.append(_frame_box(frame, ys + y, xs + x) if len(xs) else None)
    boxes, kept, keypoints, corners = [], [], [], []
    instances = np.full((size, size), -1, np.int64)
    for k, label in enumerate(picked):
        ys, xs = np.nonzero(owner == k)
        if len(xs) < 12:  # hidden behind later garments
            continue
        instances[ys, xs] = len(kept)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        kept.append(label)
        keypoints.append(_keypoints(frames[k], extents[k], owner, k))
        corners.append(_corners(frames[k], _frame_box(frames[k], ys, xs))[:4])
    return Scene(canvas.astype(np.uint8), mask, np.array(boxes, np.float32).reshape(-1, 4),
                 np.array(kept, np.int64), instances,
                 np.array(keypoints, np.float64).reshape(-1, 5, 3),
                 np.array(corners, np.float64).reshape(-1, 4, 2))


def make_scenes(count: int, *, size: int = 128, seed: int = 0, split: str = "train",
                objects: tuple[int, int] = (1, 4), scale: tuple[float, float] = (0.25, 0.5),
                root: str | os.PathLike | None = None, rotate: bool = False) -> list[Scene]:
    """``count`` scenes, identical for the same arguments. Garments come from Fashion-MNIST's
    ``split`` ("train" or "test"), so train and validation scenes never share a garment;
    ``rotate`` turns each garment by a random angle (other scenes than without it)."""
    if count < 1 or size < 16:
        raise ConfigError(f"count={count} and size={size} must be at least 1 and 16")
    if not (1 <= objects[0] <= objects[1]) or not (0 < scale[0] <= scale[1] <= 1):
        raise ConfigError(f"objects={objects} or scale={scale} is not a valid range")
    images, labels = _garments(split, root)
    rng = np.random.default_rng(seed)
    return [make_scene(rng, images, labels, size, objects, scale, rotate) for _ in range(count)]


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
    """YOLO label lines of a scene, fractions of the canvas: ``class cx cy w h`` per garment
    (detect), that plus ``x y v`` for each of its five keypoints (pose), ``class x1 y1 x2 y2
    ...`` around its visible pixels (segment) or the four corners of its rotated box (obb)."""
    lines = []
    for k, ((x0, y0, x1, y1), c) in enumerate(zip(s.boxes, s.labels)):
        if task == "segment":
            # pixel (i, j) covers [j, j + 1) x [i, i + 1): its centre is at + 0.5
            points = np.clip((polygon(s.instances == k) + 0.5) / size, 0.0, 1.0)
            lines.append(f"{c} " + " ".join(f"{v:.6f}" for v in points.reshape(-1)))
        elif task == "obb":
            points = np.clip(s.corners[k] / size, 0.0, 1.0)
            lines.append(f"{c} " + " ".join(f"{v:.6f}" for v in points.reshape(-1)))
        else:
            cx, cy = (x0 + x1) / 2 / size, (y0 + y1) / 2 / size
            line = f"{c} {cx:.6f} {cy:.6f} {(x1 - x0) / size:.6f} {(y1 - y0) / size:.6f}"
            if task == "pose":
                line += "".join(f" {x / size:.6f} {y / size:.6f} {int(v)}"
                                for x, y, v in s.keypoints[k])
            lines.append(line)
    return lines


def write_yolo_dataset(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                       size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                       scale: tuple[float, float] = (0.25, 0.5),
                       data_root: str | os.PathLike | None = None, task: str = "detect") -> Path:
    """Write a YOLO detection set (``images/``, ``labels/``, ``data.yaml``); returns data.yaml.
    ``task="segment"`` writes a YOLO-seg set instead: one polygon per garment, the outline of its
    largest visible part (the same images). ``task="pose"``: the same images, each box followed by
    five keypoints (the corners of the garment's whole box and its centre, ``x y v``;
    ``kpt_shape: [5, 3]`` and ``flip_idx`` in data.yaml). ``task="obb"``: every garment turned by
    a random angle (other images), one rotated box per garment as 4 corners (Ultralytics' OBB
    format)."""
    if task not in TASKS:
        raise ConfigError(f"task={task!r}: write_yolo_dataset writes 'detect' (boxes), "
                          f"'segment' (polygons), 'pose' (boxes and keypoints) or 'obb' "
                          f"(rotated boxes) labels")
    root = Path(root)
    for split, count, offset, source in (("train", train, 0, "train"), ("val", val, 1, "test")):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        scenes = make_scenes(count, size=size, seed=seed * 2 + offset, split=source,
                             objects=objects, scale=scale, root=data_root,
                             rotate=task == "obb")
        for n, s in enumerate(scenes):
            _save_png(s.image, root / "images" / split / f"{n:05d}.png")
            lines = _label_lines(s, size, task)
            write_text_atomic(root / "labels" / split / f"{n:05d}.txt",
                              "\n".join(lines) + ("\n" if lines else ""))
    data = {"path": str(root.resolve()), "train": "images/train", "val": "images/val",
            "names": {i: name for i, name in enumerate(CLASSES)}}
    if task == "pose":
        data.update(kpt_shape=list(KPT_SHAPE), flip_idx=list(FLIP_IDX))
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
