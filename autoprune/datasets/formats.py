"""Fashion-MNIST written in the formats users bring, for tutorials and tests.

Detection / instance segmentation (the scenes of :mod:`.scenes`, the same images and objects as
:func:`~.scenes.write_yolo_dataset` with the same arguments): :func:`write_coco_dataset` (boxes,
polygons or RLE masks), :func:`write_voc_detection` (``ImageSets`` or PaddleX lists).
Segmentation (the same images and masks as :func:`~.scenes.write_segmentation_dataset`):
:func:`write_voc_segmentation`, :func:`write_cityscapes_like`, :func:`write_paddlex_segmentation`.
Classification (Fashion-MNIST garments, the same images in each): :func:`write_image_folder`,
:func:`write_paddlex_classification`, :func:`write_csv_classification`.

Every writer is deterministic by ``seed``; train scenes use ``seed * 2`` and Fashion-MNIST's train
garments, val scenes ``seed * 2 + 1`` and its test garments. Images are PNG (also in VOC's
``JPEGImages/``, which may hold .png), so every copy holds the very same pixels.
"""
from __future__ import annotations

import csv
import io
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

from ..engine.files import atomic_write, write_text_atomic
from ..errors import ConfigError
from .fashion_mnist import CLASSES, _FILES, _load, find_root
from .scenes import Scene, make_scenes, polygon

SPLITS = (("train", 0, "train"), ("val", 1, "test"))  # our split, seed offset, FMNIST split
# Cityscapes labelIds whose train ids are 0..10 (road, sidewalk, building, wall, fence, pole,
# traffic light, traffic sign, vegetation, terrain, sky): a scene's mask value v is written as
# the labelId of train id v, so the train ids read back are the scene's classes.
CITYSCAPES_LABEL_IDS = (7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23)


def _scenes(train: int, val: int, size: int, seed: int, objects: tuple[int, int],
            scale: tuple[float, float], data_root) -> Iterator[tuple[str, list[Scene]]]:
    """(split, scenes) as :func:`~.scenes.write_yolo_dataset` makes them."""
    for split, offset, source in SPLITS:
        count = train if split == "train" else val
        yield split, make_scenes(count, size=size, seed=seed * 2 + offset, split=source,
                                 objects=objects, scale=scale, root=data_root)


def _save(array: np.ndarray, path: Path, palette: list[int] | None = None) -> None:
    """A PNG of ``array`` (a palette PNG of class indices with ``palette``), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.fromarray(array)
    if palette is not None:
        im = im.convert("P") if im.mode != "P" else im
        im.putpalette(palette)
    atomic_write(path, lambda tmp: im.save(tmp, format="PNG"))


def check_format_and_split(data_format: str | None, split: str,
                           formats: tuple[str, ...]) -> None:
    """A one-line ConfigError for a ``data_format`` not among ``formats`` (None: detected) or a
    ``split`` other than "train" / "val"."""
    if data_format is not None and data_format not in formats:
        raise ConfigError(f"data_format={data_format!r} must be one of {', '.join(formats)} (or "
                          f"None to detect it)")
    if split not in ("train", "val"):
        raise ConfigError(f"split={split!r} must be 'train' or 'val'")


def read_labels_txt(path: str | os.PathLike) -> list[str]:
    """Class names from a PaddleX ``labels.txt``: one a line, line k naming class k."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no labels.txt at {path}: write the class names there, one a line, "
                          f"line k naming class k")
    try:
        names = [ln.strip() for ln in path.read_text(encoding="utf-8-sig").splitlines()]
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: labels.txt holds one class name a line") \
            from None
    while names and not names[-1]:
        names.pop()
    if not names or not all(names):
        raise ConfigError(f"{path} has {'no names' if not names else 'an empty line'}: "
                          f"labels.txt holds one class name a line, line k naming class k")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"{path} names {dup!r} twice: each class once, one a line")
    return names


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(f"{line}\n" for line in lines))


# -- detection and instance segmentation --------------------------------------------------------
def rle_string(counts: list[int]) -> str:
    """Run lengths as a compressed COCO RLE string (pycocotools' ``rleToString``)."""
    s = []
    for i, x in enumerate(counts):
        x = int(x) - (int(counts[i - 2]) if i > 2 else 0)
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            s.append(chr((c | 0x20 if more else c) + 48))
    return "".join(s)


def encode_rle(mask: np.ndarray, compressed: bool = True) -> dict:
    """A boolean mask (H, W) as a COCO RLE ``{"size": [H, W], "counts": ...}`` (column-major runs
    starting with the background; a compressed string, or the list of run lengths)."""
    flat = np.asarray(mask, bool).reshape(-1, order="F")
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(flat.astype(np.int8))) + 1, [flat.size]])
    runs = np.diff(bounds).astype(int).tolist()
    if flat.size and flat[0]:
        runs = [0, *runs]
    return {"size": [int(mask.shape[0]), int(mask.shape[1])],
            "counts": rle_string(runs) if compressed else runs}


def write_coco_dataset(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                       size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                       scale: tuple[float, float] = (0.25, 0.5),
                       data_root: str | os.PathLike | None = None, task: str = "detect",
                       rle: bool = False) -> Path:
    """Write the scenes as COCO: ``<root>/{train,val}/<n>.png`` and
    ``<root>/annotations/instances_{train,val}.json`` (category ids 1..10 = Fashion-MNIST's
    classes); returns ``root``. ``task="segment"`` adds each garment's outline (the polygon of
    the YOLO-seg copy, in pixels), or with ``rle=True`` its visible pixels as a compressed RLE."""
    if task not in ("detect", "segment"):
        raise ConfigError(f"task={task!r}: write_coco_dataset writes 'detect' or 'segment'")
    root = Path(root)
    categories = [{"id": c + 1, "name": name, "supercategory": "garment"}
                  for c, name in enumerate(CLASSES)]
    for split, scenes in _scenes(train, val, size, seed, objects, scale, data_root):
        images, annotations = [], []
        for n, s in enumerate(scenes):
            _save(s.image, root / split / f"{n:05d}.png")
            images.append({"id": n + 1, "file_name": f"{n:05d}.png", "width": size,
                           "height": size})
            for k, ((x0, y0, x1, y1), c) in enumerate(zip(s.boxes.tolist(), s.labels.tolist())):
                region = s.instances == k
                seg: list | dict = []
                if task == "segment":
                    seg = encode_rle(region) if rle else \
                        [(polygon(region) + 0.5).reshape(-1).tolist()]
                annotations.append({"id": len(annotations) + 1, "image_id": n + 1,
                                    "category_id": c + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                    "area": int(region.sum()), "iscrowd": 0,
                                    "segmentation": seg})
        path = root / "annotations" / f"instances_{split}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"info": {"description": "Fashion-MNIST scenes"},
                                            "images": images, "annotations": annotations,
                                            "categories": categories}))
    return root


def _voc_xml(name: str, size: int, boxes: np.ndarray, labels: np.ndarray,
             classes: tuple[str, ...]) -> str:
    ann = ET.Element("annotation")
    ET.SubElement(ann, "folder").text = "JPEGImages"
    ET.SubElement(ann, "filename").text = name
    sz = ET.SubElement(ann, "size")
    for tag, v in (("width", size), ("height", size), ("depth", 3)):
        ET.SubElement(sz, tag).text = str(v)
    for (x0, y0, x1, y1), c in zip(boxes.tolist(), labels.tolist()):
        obj = ET.SubElement(ann, "object")
        ET.SubElement(obj, "name").text = classes[c]
        ET.SubElement(obj, "pose").text = "Unspecified"
        ET.SubElement(obj, "truncated").text = "0"
        ET.SubElement(obj, "difficult").text = "0"
        box = ET.SubElement(obj, "bndbox")
        # VOC boxes are 1-based pixel indices, inclusive: pixels x0..x1-1 -> x0+1..x1
        for tag, v in (("xmin", x0 + 1), ("ymin", y0 + 1), ("xmax", x1), ("ymax", y1)):
            ET.SubElement(box, tag).text = str(int(round(v)))
    ET.indent(ann)
    return ET.tostring(ann, encoding="unicode") + "\n"


def write_voc_detection(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                        size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                        scale: tuple[float, float] = (0.25, 0.5),
                        data_root: str | os.PathLike | None = None,
                        lists: str = "imagesets") -> Path:
    """Write the scenes as Pascal VOC: ``JPEGImages/<split>_<n>.png``, ``Annotations/*.xml``,
    ``labels.txt`` and the split lists: ``ImageSets/Main/{train,val}.txt`` (``lists=
    "imagesets"``) or PaddleX's ``train_list.txt`` / ``val_list.txt`` (``lists="paddlex"``);
    returns ``root``."""
    if lists not in ("imagesets", "paddlex"):
        raise ConfigError(f"lists={lists!r} must be 'imagesets' or 'paddlex'")
    root = Path(root)
    for split, scenes in _scenes(train, val, size, seed, objects, scale, data_root):
        ids = []
        for n, s in enumerate(scenes):
            image_id = f"{split}_{n:05d}"
            _save(s.image, root / "JPEGImages" / f"{image_id}.png")
            xml = root / "Annotations" / f"{image_id}.xml"
            xml.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(xml, _voc_xml(f"{image_id}.png", size, s.boxes, s.labels,
                                            CLASSES))
            ids.append(image_id)
        if lists == "imagesets":
            _write_lines(root / "ImageSets" / "Main" / f"{split}.txt", ids)
        else:
            _write_lines(root / f"{split}_list.txt",
                         [f"JPEGImages/{i}.png Annotations/{i}.xml" for i in ids])
    _write_lines(root / "labels.txt", list(CLASSES))
    return root


# -- segmentation -------------------------------------------------------------------------------
def voc_palette() -> list[int]:
    """Pascal VOC's 256-colour palette (class k's colour; 255 = the cream boundary colour)."""
    out = []
    for k in range(256):
        r = g = b = 0
        c = k
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        out += [r, g, b]
    return out


def write_voc_segmentation(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                           size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                           scale: tuple[float, float] = (0.25, 0.5),
                           data_root: str | os.PathLike | None = None) -> Path:
    """Write the scenes as Pascal VOC segmentation: ``JPEGImages/<split>_<n>.png``,
    ``SegmentationClass/*.png`` (palette PNGs of class indices), ``ImageSets/Segmentation/
    {train,val}.txt`` and ``labels.txt`` (background + the 10 garments); returns ``root``."""
    root = Path(root)
    palette = voc_palette()
    for split, scenes in _scenes(train, val, size, seed, objects, scale, data_root):
        ids = []
        for n, s in enumerate(scenes):
            image_id = f"{split}_{n:05d}"
            _save(s.image, root / "JPEGImages" / f"{image_id}.png")
            _save(s.mask, root / "SegmentationClass" / f"{image_id}.png", palette)
            ids.append(image_id)
        _write_lines(root / "ImageSets" / "Segmentation" / f"{split}.txt", ids)
    _write_lines(root / "labels.txt", ["background", *CLASSES])
    return root


def write_cityscapes_like(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                          size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                          scale: tuple[float, float] = (0.25, 0.5),
                          data_root: str | os.PathLike | None = None,
                          city: str = "fmnist") -> Path:
    """Write the scenes in Cityscapes' layout: ``leftImg8bit/<split>/<city>/*_leftImg8bit.png``
    and ``gtFine/<split>/<city>/*_gtFine_labelIds.png`` whose labelIds map to train ids equal to
    the scene's classes (:data:`CITYSCAPES_LABEL_IDS`); returns ``root``."""
    root = Path(root)
    lut = np.array(CITYSCAPES_LABEL_IDS, np.uint8)
    for split, scenes in _scenes(train, val, size, seed, objects, scale, data_root):
        for n, s in enumerate(scenes):
            stem = f"{city}_{n:06d}_000019"
            _save(s.image, root / "leftImg8bit" / split / city / f"{stem}_leftImg8bit.png")
            _save(lut[s.mask], root / "gtFine" / split / city / f"{stem}_gtFine_labelIds.png")
    return root


def write_paddlex_segmentation(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                               size: int = 128, seed: int = 0, objects: tuple[int, int] = (1, 4),
                               scale: tuple[float, float] = (0.25, 0.5),
                               data_root: str | os.PathLike | None = None) -> Path:
    """Write the scenes as a PaddleX ``SegDataset``: ``JPEGImages/*.png``, ``Annotations/*.png``
    (class indices), ``train_list.txt`` / ``val_list.txt`` of ``<image> <mask>`` lines and
    ``labels.txt``; returns ``root``."""
    root = Path(root)
    for split, scenes in _scenes(train, val, size, seed, objects, scale, data_root):
        lines = []
        for n, s in enumerate(scenes):
            name = f"{split}_{n:05d}.png"
            _save(s.image, root / "JPEGImages" / name)
            _save(s.mask, root / "Annotations" / name)
            lines.append(f"JPEGImages/{name} Annotations/{name}")
        _write_lines(root / f"{split}_list.txt", lines)
    _write_lines(root / "labels.txt", ["background", *CLASSES])
    return root


# -- classification -----------------------------------------------------------------------------
def _garments(train: int, val: int, size: int, seed: int,
              data_root) -> Iterator[tuple[str, list[np.ndarray], list[int]]]:
    """(split, images (size, size) uint8, labels): ``count`` Fashion-MNIST garments of its train
    (test) split picked by ``seed``, resized (bilinear)."""
    base = find_root(data_root)
    for split, offset, source in SPLITS:
        count = train if split == "train" else val
        if count < 1:
            raise ConfigError(f"{split}={count} must be at least 1")
        images, labels = _load(base, _FILES[source][0]), _load(base, _FILES[source][1])
        picked = np.random.default_rng(seed * 2 + offset).choice(len(images), count,
                                                                 replace=False)
        out = [np.asarray(Image.fromarray(images[i]).resize((size, size), Image.BILINEAR))
               if size != images.shape[1] else images[i] for i in picked]
        yield split, out, [int(labels[i]) for i in picked]


def folder_name(c: int) -> str:
    """The ImageFolder class folder of Fashion-MNIST class ``c`` (``0_T-shirt_top``...): they
    sort in the classes' order."""
    return f"{c}_{CLASSES[c].replace('/', '_')}"


def write_image_folder(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                       size: int = 28, seed: int = 0,
                       data_root: str | os.PathLike | None = None) -> Path:
    """Write ``<root>/{train,val}/<class folder>/<n>.png`` (:func:`folder_name`); returns
    ``root``."""
    root = Path(root)
    for split, images, labels in _garments(train, val, size, seed, data_root):
        for n, (im, c) in enumerate(zip(images, labels)):
            _save(im, root / split / folder_name(c) / f"{n:05d}.png")
    return root


def write_paddlex_classification(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                                 size: int = 28, seed: int = 0,
                                 data_root: str | os.PathLike | None = None) -> Path:
    """Write a PaddleX / ImageNet file-list set: ``images/<split>/<n>.png``, ``train_list.txt``
    and ``val_list.txt`` of ``<path> <label id>`` lines, ``labels.txt``; returns ``root``."""
    root = Path(root)
    for split, images, labels in _garments(train, val, size, seed, data_root):
        lines = []
        for n, (im, c) in enumerate(zip(images, labels)):
            _save(im, root / "images" / split / f"{n:05d}.png")
            lines.append(f"images/{split}/{n:05d}.png {c}")
        _write_lines(root / f"{split}_list.txt", lines)
    _write_lines(root / "labels.txt", list(CLASSES))
    return root


def write_csv_classification(root: str | os.PathLike, *, train: int = 64, val: int = 16,
                             size: int = 28, seed: int = 0,
                             data_root: str | os.PathLike | None = None) -> Path:
    """Write ``images/<split>/<n>.png`` and ``train.csv`` / ``val.csv`` with a ``path,label``
    header and class names as labels; returns ``root``."""
    root = Path(root)
    for split, images, labels in _garments(train, val, size, seed, data_root):
        rows = []
        for n, (im, c) in enumerate(zip(images, labels)):
            _save(im, root / "images" / split / f"{n:05d}.png")
            rows.append((f"images/{split}/{n:05d}.png", CLASSES[c]))
        text = io.StringIO(newline="")
        w = csv.writer(text, lineterminator="\n")
        w.writerow(("path", "label"))
        w.writerows(rows)
        write_text_atomic(root / f"{split}.csv", text.getvalue())
    return root


__all__ = ["CITYSCAPES_LABEL_IDS", "check_format_and_split", "encode_rle", "folder_name",
           "read_labels_txt", "voc_palette", "write_cityscapes_like", "write_coco_dataset",
           "write_csv_classification", "write_image_folder", "write_paddlex_classification",
           "write_paddlex_segmentation", "write_voc_detection", "write_voc_segmentation"]
