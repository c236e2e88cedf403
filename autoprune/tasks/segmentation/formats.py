"""Segmentation data in the layouts users have, read as datasets of ``(image, mask)`` that give
exactly the tensors of :class:`~.data.ImageMaskFolder` (same resize, normalisation and flips).

- **masks** (today's layout): a folder holding ``images/`` + ``masks/``, or a root holding
  ``<split>/images`` + ``<split>/masks``.
- **Pascal VOC**: ``JPEGImages/<id>.jpg|.jpeg|.png``, ``SegmentationClass/<id>.png`` (palette
  PNGs of class indices, 255 = ignore), ``ImageSets/Segmentation/`` lists: train = ``train.txt``,
  else ``trainval.txt``; val = ``val.txt``, else ``test.txt``; one list serves as both. Classes:
  ``class_names`` if given, else ``labels.txt`` in the root, else VOC's 21.
- **Cityscapes**: ``leftImg8bit/<split>/<city>/*_leftImg8bit.png`` with
  ``gtFine/<split>/<city>/*_gtFine_labelIds.png``; labelIds map to the 19 train ids, every other
  id (void, license plate...) to ``ignore_index``. torchvision's ``Cityscapes`` reads the same
  files but returns raw labelIds and fails late on a missing file: it is not used.
- **PaddleX SegDataset**: ``train_list.txt`` / ``val_list.txt`` of ``<image> <mask>`` lines
  (paths relative to the list's folder), classes from ``labels.txt`` beside the list (optional:
  without it the classes are ``0..max`` of the masks). Pass the list or the root and a ``split``.

Every pair is checked once, up front (as ImageMaskFolder does): a missing file, a mask whose size
differs from its image, a class id outside the class map (``ignore_index`` aside), an empty
split: each a one-line ConfigError naming the file.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from PIL import Image

from ...datasets.formats import check_format_and_split, read_labels_txt
from ...engine.data import image_file, load_image
from ...engine.paths import confined
from ...errors import ConfigError
from ...engine.data import first_items
from .data import (DEFAULT_SCENES, SCENES, CheckedSegmentation, ImageMaskFolder,
                   SceneSegmentation, _flip, _normalize, _read_mask, is_scenes)

FORMATS = ("masks", "voc", "cityscapes", "paddlex")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".JPG", ".JPEG", ".PNG")
VOC_CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car",
               "cat", "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person",
               "pottedplant", "sheep", "sofa", "train", "tvmonitor")
CITYSCAPES_CLASSES = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic light",
                      "traffic sign", "vegetation", "terrain", "sky", "person", "rider", "car",
                      "truck", "bus", "train", "motorcycle", "bicycle")
# Cityscapes labelId -> train id (cityscapesScripts' labels.py); ids 0..33 not listed are void
CITYSCAPES_TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9,
                        23: 10, 24: 11, 25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}
CITYSCAPES_IDS = 34  # labelIds 0..33


class MaskPairs(ImageMaskFolder):
    """(image, mask) file pairs read as :class:`ImageMaskFolder` reads its folder: resized to
    ``size`` x ``size`` (image bilinear, mask nearest), ImageNet-normalised, random flips when
    ``train``. ``lut`` maps the stored mask values (Cityscapes' labelIds) to class ids.
    ``classes``: the class names when the source names them."""

    def __init__(self, pairs: Sequence[tuple[Path, Path]], size: int, *, train: bool,
                 classes: Sequence[str] | None, num_classes: int | None = None,
                 ignore_index: int = 255, in_channels: int = 3, limit: int | None = None,
                 lut: np.ndarray | None = None, source: str = ""):
        if in_channels not in (1, 3):
            raise ConfigError(f"in_channels={in_channels}: image files are read as RGB (3) or "
                              f"gray (1); pass a Dataset for other inputs")
        if classes is not None and num_classes is not None and num_classes != len(classes):
            raise ConfigError(f"num_classes={num_classes} but {source} names {len(classes)} "
                              f"classes: pass num_classes={len(classes)} or omit it")
        if not pairs:
            raise ConfigError(f"{source} lists no images (empty split): list the image/mask "
                              f"pairs of this split")
        self.size, self.train, self.ignore_index = size, train, ignore_index
        self.mode = "RGB" if in_channels == 3 else "L"
        self.lut, self.source = lut, source
        self.pairs = [(Path(i), Path(m)) for i, m in pairs][:limit]
        self.classes = list(classes) if classes is not None else None
        limit_classes = len(classes) if classes is not None else num_classes
        top = -1
        for img_path, mask_path in self.pairs:
            top = max(top, self._check(img_path, mask_path, limit_classes))
        if top < 1:
            raise ConfigError(f"the masks of {source} hold no class but 0 (background; "
                              f"ignore_index={ignore_index} pixels aside): masks are class "
                              f"indices 0..N-1")
        self.max_class = len(classes) - 1 if classes is not None else top

    def _mask(self, path: Path) -> np.ndarray:
        mask = _read_mask(path)
        if self.lut is None:
            return mask
        if mask.size and (mask.min() < 0 or mask.max() >= len(self.lut)):
            raise ConfigError(f"mask {path} holds label id {int(mask.max())} outside the "
                              f"Cityscapes label ids 0..{CITYSCAPES_IDS - 1}: pass the "
                              f"*_gtFine_labelIds.png masks")
        return self.lut[mask]

    def _check(self, img_path: Path, mask_path: Path, nc: int | None) -> int:
        """The largest class in a pair's mask, after checking files, sizes and class ids."""
        for p in (img_path, mask_path):
            if not p.is_file():
                raise ConfigError(f"{p} is missing ({self.source}): add it or fix the list")
        with image_file(img_path), Image.open(img_path) as im:
            img_size = im.size
        mask = self._mask(mask_path)
        if (mask.shape[1], mask.shape[0]) != img_size:
            raise ConfigError(f"mask {mask_path} is {mask.shape[1]}x{mask.shape[0]} but its image "
                              f"{img_path.name} is {img_size[0]}x{img_size[1]}: masks must have "
                              f"their image's size")
        valid = mask[mask != self.ignore_index]
        if not valid.size:
            return -1
        if valid.min() < 0 or (nc is not None and valid.max() >= nc):
            bad = int(valid.max() if valid.min() >= 0 else valid.min())
            raise ConfigError(f"mask {mask_path} holds class {bad} outside the class map (ids "
                              f"0..{(nc or 1) - 1}, {self.ignore_index} = ignore): fix the mask, "
                              f"the class list, or mark such pixels {self.ignore_index}")
        return int(valid.max())

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img_path, mask_path = self.pairs[i]
        image = torch.from_numpy(np.array(load_image(img_path, self.mode), dtype=np.uint8))
        image = image[None] if image.dim() == 2 else image.permute(2, 0, 1)
        mask = torch.from_numpy(self._mask(mask_path))
        image = F.interpolate(_normalize(image)[None], size=(self.size, self.size),
                              mode="bilinear", align_corners=False)[0]
        mask = F.interpolate(mask[None, None].float(), size=(self.size, self.size),
                             mode="nearest")[0, 0].long()
        return _flip(image, mask, self.train)


def detect_format(path: str | os.PathLike) -> str:
    """``"masks"``, ``"voc"``, ``"cityscapes"`` or ``"paddlex"`` from what ``path`` holds; a
    one-line ConfigError when it is none of them."""
    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".txt":
        return "paddlex"
    if p.is_dir():
        if _is_masks(p) or any(_is_masks(p / s) for s in ("train", "val")):
            return "masks"
        if (p / "SegmentationClass").is_dir() and (p / "ImageSets" / "Segmentation").is_dir():
            return "voc"
        if (p / "leftImg8bit").is_dir() or (p / "gtFine").is_dir():
            return "cityscapes"  # a missing half is named by the reader
        if any((p / f"{s}_list.txt").is_file() for s in ("train", "val")):
            return "paddlex"
    elif not p.exists():
        raise ConfigError(f"data path {p} does not exist: pass a folder of images/ + masks/, a "
                          f"VOC or Cityscapes root, or a PaddleX list")
    raise ConfigError(f"cannot tell the data format of {p}: pass a folder holding images/ + "
                      f"masks/, a Pascal VOC root (SegmentationClass/, ImageSets/Segmentation/), "
                      f"a Cityscapes root (leftImg8bit/, gtFine/) or a PaddleX list "
                      f"(train_list.txt), or name it with data_format='masks'|'voc'|"
                      f"'cityscapes'|'paddlex'")


def _is_masks(p: Path) -> bool:
    return (p / "images").is_dir() and (p / "masks").is_dir()


def read_segmentation_data(path: str | os.PathLike, *, split: str = "train", input_size: int,
                           train: bool | None = None, data_format: str | None = None,
                           num_classes: int | None = None, ignore_index: int = 255,
                           in_channels: int = 3, limit: int | None = None,
                           class_names: Sequence[str] | None = None) -> ImageMaskFolder:
    """The ``split`` ("train" or "val") of the data at ``path`` as a dataset of ``(image (C, S,
    S) normalised, mask (S, S) long)``; ``train`` (default: split == "train") turns random flips
    on. ``class_names``: the classes of a VOC set that are not VOC's 21."""
    check_format_and_split(data_format, split, FORMATS)
    p = Path(path).expanduser()
    fmt = data_format or detect_format(p)
    train = split == "train" if train is None else train
    common = dict(train=train, num_classes=num_classes, ignore_index=ignore_index,
                  in_channels=in_channels, limit=limit)
    if fmt == "masks":
        folder = p if _is_masks(p) or not _is_masks(p / split) else p / split
        return ImageMaskFolder(folder, input_size, **common)
    if fmt == "voc":
        pairs, source = _voc_pairs(p, split)
        classes = list(class_names) if class_names is not None else \
            read_labels_txt(p / "labels.txt") if (p / "labels.txt").is_file() else list(VOC_CLASSES)
        return MaskPairs(pairs, input_size, classes=classes, source=source, **common)
    if fmt == "cityscapes":
        lut = np.full(CITYSCAPES_IDS, ignore_index, np.int64)
        for label_id, train_id in CITYSCAPES_TRAIN_IDS.items():
            lut[label_id] = train_id
        pairs, source = _cityscapes_pairs(p, split)
        return MaskPairs(pairs, input_size, classes=list(CITYSCAPES_CLASSES), lut=lut,
                         source=source, **common)
    file = p if p.is_file() else p / f"{split}_list.txt"
    pairs = _paddlex_pairs(file)
    labels = file.parent / "labels.txt"
    classes = list(class_names) if class_names is not None else \
        read_labels_txt(labels) if labels.is_file() else None
    return MaskPairs(pairs, input_size, classes=classes, source=str(file), **common)


def _lines(path: Path) -> list[tuple[int, str]]:
    if not path.is_file():
        raise ConfigError(f"no list at {path}: check the path or the split")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: a list holds one entry per line") from None
    lines = [(n, ln.strip()) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not lines:
        raise ConfigError(f"{path} is empty (no images in this split): list the images, one per "
                          f"line")
    return lines


def _voc_pairs(root: Path, split: str) -> tuple[list[tuple[Path, Path]], str]:
    lists = root / "ImageSets" / "Segmentation"
    names = {"train": ("train.txt", "trainval.txt", "val.txt", "test.txt"),
             "val": ("val.txt", "test.txt", "train.txt", "trainval.txt")}[split]
    file = next((lists / n for n in names if (lists / n).is_file()), None)
    if file is None:
        raise ConfigError(f"{lists} holds none of train.txt, trainval.txt, val.txt, test.txt: "
                          f"list the image ids of each split there")
    pairs = []
    for n, line in _lines(file):
        image_id = line.split()[0]
        where = f"{file} line {n} ({image_id!r})"
        image = next((root / "JPEGImages" / f"{image_id}{s}" for s in IMAGE_SUFFIXES
                      if (root / "JPEGImages" / f"{image_id}{s}").is_file()), None)
        if image is None:
            raise ConfigError(f"{where}: its image JPEGImages/{image_id}.jpg (or .png) is "
                              f"missing: add it or drop the id")
        confined(image.relative_to(root), root, where=where)
        mask = confined(f"SegmentationClass/{image_id}.png", root, where=where)
        if not mask.is_file():
            raise ConfigError(f"{file} line {n} ({image_id!r}): its mask {mask} is missing: add "
                              f"it or drop the id")
        pairs.append((image, mask))
    return pairs, str(file)


def _cityscapes_pairs(root: Path, split: str) -> tuple[list[tuple[Path, Path]], str]:
    for part in ("leftImg8bit", "gtFine"):
        if not (root / part).is_dir():
            raise ConfigError(f"{root} is read as a Cityscapes root but has no {part}/: "
                              f"Cityscapes holds leftImg8bit/<split>/<city>/*_leftImg8bit.png "
                              f"and gtFine/<split>/<city>/*_gtFine_labelIds.png; add {part}/ "
                              f"(or pass data_format= for another layout)")
    images = root / "leftImg8bit" / split
    if not images.is_dir():
        raise ConfigError(f"{images} does not exist: a Cityscapes root holds leftImg8bit/{split}/"
                          f"<city>/ and gtFine/{split}/<city>/")
    pairs = []
    for image in sorted(images.glob("*/*_leftImg8bit.png")):
        stem = image.name[:-len("_leftImg8bit.png")]
        mask = root / "gtFine" / split / image.parent.name / f"{stem}_gtFine_labelIds.png"
        if not mask.is_file():
            raise ConfigError(f"the mask of {image} is missing ({mask}): Cityscapes needs "
                              f"gtFine/<split>/<city>/<name>_gtFine_labelIds.png for each image")
        pairs.append((image, mask))
    if not pairs:
        raise ConfigError(f"{images} holds no <city>/*_leftImg8bit.png images (empty split)")
    return pairs, str(images)


def _paddlex_pairs(file: Path) -> list[tuple[Path, Path]]:
    pairs = []
    for n, line in _lines(file):
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError(f"{file} line {n} ({line[:50]!r}) is not '<image path> <mask "
                              f"path>': PaddleX's segmentation lists hold two paths per line")
        image, mask = (confined(x, file.parent, where=f"{file} line {n}") for x in parts)
        for kind, q in (("image", image), ("mask", mask)):
            if not q.is_file():
                raise ConfigError(f"{file} line {n}: its {kind} {q} is missing: add it or fix "
                                  f"the line")
        pairs.append((image, mask))
    return pairs


__all__ = ["CITYSCAPES_CLASSES", "CITYSCAPES_TRAIN_IDS", "FORMATS", "MaskPairs", "VOC_CLASSES",
           "detect_format", "read_segmentation_data", "data_kind", "resolve_segmentation_data",
           "val_split_of"]


# -- what the task reads as data, by what is passed --------------------------------------------
def resolve_segmentation_data(spec: Any, *, train: bool, input_size: int,
                              num_classes: int | None, ignore_index: int = 255,
                              in_channels: int = 3, limit: int | None = None, seed: int = 0,
                              root: str | os.PathLike | None = None,
                              data_format: str | None = None,
                              class_names: Sequence[str] | None = None) -> Dataset:
    """``"fashion-scenes"``, a folder in one of the layouts of :mod:`.formats` (``images/`` +
    ``masks/``, Pascal VOC, Cityscapes, PaddleX lists; ``data_format`` names it, else it is told
    from the path), or a torch Dataset."""
    if isinstance(spec, Dataset):
        checked = CheckedSegmentation(first_items(spec, limit), num_classes, ignore_index)
        if len(checked):
            checked[0]  # a systematic mistake shows before any training
        return checked
    if is_scenes(spec):
        if in_channels != 3:
            raise ConfigError(f"{SCENES} are RGB: use in_channels=3 (got {in_channels})")
        return SceneSegmentation(limit or DEFAULT_SCENES[train], input_size, train=train,
                                 seed=seed, root=root)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        if not path.exists():
            raise ConfigError(f"data path {path} does not exist: pass a folder with images/ and "
                              f"masks/, a VOC, Cityscapes or PaddleX layout, a Dataset or "
                              f"'{SCENES}'")
        if data_format is None and path.is_dir() and _unknown_layout(path):
            data_format = "masks"  # an images/ + masks/ folder missing a part: named there
        return read_segmentation_data(path, split="train" if train else "val", train=train,
                                      input_size=input_size, data_format=data_format,
                                      num_classes=num_classes, ignore_index=ignore_index,
                                      in_channels=in_channels, limit=limit,
                                      class_names=class_names)
    raise ConfigError(f"segmentation data must be a folder path, a torch Dataset or '{SCENES}', "
                      f"not {type(spec).__name__}")


def val_split_of(spec: Any, data_format: str | None = None) -> Any:
    """The data a run evaluates on when only ``spec`` is given: a VOC, Cityscapes or PaddleX
    root again (read as its val split), else None."""
    if not isinstance(spec, (str, os.PathLike)) or not Path(spec).is_dir():
        return None
    return spec if (data_format or detect_format(spec)) in ("voc", "cityscapes", "paddlex") \
        else None


def data_kind(spec: Any, data_format: str | None = None) -> str:
    """The layout of ``spec`` in one word (``masks``, ``voc``, ``fashion-scenes``, a Dataset)."""
    if isinstance(spec, Dataset):
        return "a Dataset"
    if is_scenes(spec):
        return SCENES
    return data_format or (detect_format(spec) if Path(spec).exists() else "?")


def _unknown_layout(path: Path) -> bool:
    """Whether :func:`detect_format` cannot tell the layout of the folder ``path``."""
    try:
        detect_format(path)
    except ConfigError:
        return True
    return False
