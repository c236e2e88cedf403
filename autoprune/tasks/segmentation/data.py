"""Segmentation data: an ``images/`` + ``masks/`` folder pair, a user Dataset, or the built-in
Fashion-MNIST scenes. Every item is ``(image float (C, S, S) normalised, mask long (S, S))``.

Masks hold class indices (PNG, mode L/P/I); ``ignore_index`` (default 255) marks pixels that count
neither in the loss nor in the IoU. Folder data is checked once, up front, so a bad pair fails with
one clear line before any training: missing folder, no images, image/mask count mismatch,
unmatched names, a mask of another size than its image, a class index >= num_classes, masks
holding background only, a mask or image header PIL cannot read. An image whose pixels turn out
damaged (truncated) is named when it is read.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import Dataset

from ...datasets import CLASSES
from ...datasets.scenes import make_scenes
from ...engine.data import image_file, load_image
from ...errors import ConfigError

SCENES = "fashion-scenes"
SCENE_ALIASES = (SCENES, "scenes", "fashion-mnist-scenes")
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
DEFAULT_SCENES = {True: 1000, False: 200}  # train / eval scene counts without a limit


def is_scenes(spec: Any) -> bool:
    return isinstance(spec, str) and spec.lower() in SCENE_ALIASES


def scene_class_names() -> list[str]:
    return ["background", *CLASSES]


def class_key(name: Any) -> str:
    """A metric-key friendly class name: ``"T-shirt/top"`` -> ``"t_shirt_top"``."""
    return re.sub(r"[^0-9a-z]+", "_", str(name).lower()).strip("_") or "class"


def _normalize(image: torch.Tensor) -> torch.Tensor:
    """uint8 (C, H, W) -> float, ImageNet-normalised (1-channel images use the mean
    of the stats)."""
    x = image.float() / 255.0
    c = x.shape[0]
    mean = torch.tensor(MEAN if c == 3 else [sum(MEAN) / 3] * c).view(c, 1, 1)
    std = torch.tensor(STD if c == 3 else [sum(STD) / 3] * c).view(c, 1, 1)
    return (x - mean) / std


def _flip(image: torch.Tensor, mask: torch.Tensor, train: bool
          ) -> tuple[torch.Tensor, torch.Tensor]:
    if train and torch.rand(()) < 0.5:
        return image.flip(-1), mask.flip(-1)
    return image, mask


class SceneSegmentation(Dataset):
    """Fashion-MNIST scenes held in memory: garments pasted on a textured background, mask
    0 = background and ``c + 1`` = garment class ``c`` (11 classes). Scenes of the train split use
    ``seed * 2``, of the test split ``seed * 2 + 1`` — the same scenes
    :func:`~autoprune.datasets.scenes.write_segmentation_dataset` writes to disk."""

    def __init__(self, count: int, size: int, *, train: bool, seed: int = 0,
                 root: str | os.PathLike | None = None):
        scenes = make_scenes(count, size=size, seed=seed * 2 + (0 if train else 1),
                             split="train" if train else "test", root=root)
        self.images = torch.from_numpy(np.stack([s.image for s in scenes])).permute(0, 3, 1, 2)
        self.masks = torch.from_numpy(np.stack([s.mask for s in scenes]))
        self.train = train
        self.classes = scene_class_names()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _flip(_normalize(self.images[i]), self.masks[i].long(), self.train)


def _read_mask(path: Path) -> np.ndarray:
    with image_file(path), Image.open(path) as im:
        if im.mode not in ("L", "P", "I", "I;16", "1"):
            raise ConfigError(f"mask {path} is a {im.mode} image: masks must be single-channel "
                              f"PNGs of class indices (mode L or P), not colour pictures")
        return np.asarray(im).astype(np.int64)


class ImageMaskFolder(Dataset):
    """``<root>/images/<name>.png|jpg`` + ``<root>/masks/<name>.png`` (same stem, same size),
    resized to ``size`` x ``size`` (image bilinear, mask nearest); random flips when ``train``."""

    def __init__(self, root: str | os.PathLike, size: int, *, train: bool, num_classes: int | None,
                 ignore_index: int = 255, in_channels: int = 3, limit: int | None = None):
        root = Path(root)
        self.size, self.train, self.ignore_index = size, train, ignore_index
        self.mode = "RGB" if in_channels == 3 else "L"
        if in_channels not in (1, 3):
            raise ConfigError(f"in_channels={in_channels}: image folders are read as RGB (3) or "
                              f"gray (1); pass a Dataset for other inputs")
        img_dir, mask_dir = root / "images", root / "masks"
        for d in (img_dir, mask_dir):
            if not d.is_dir():
                raise ConfigError(f"{d} does not exist: segmentation data is a folder holding "
                                  f"images/ and masks/ (masks: PNG class indices, same names)")
        images = {p.stem: p for p in sorted(img_dir.iterdir()) if p.suffix.lower() in IMAGE_EXTS}
        masks = {p.stem: p for p in sorted(mask_dir.iterdir()) if p.suffix.lower() == ".png"}
        if not images:
            raise ConfigError(f"{img_dir} holds no images ({', '.join(IMAGE_EXTS)}): put the "
                              f"pictures there and their PNG masks in {mask_dir}")
        if len(images) != len(masks):
            raise ConfigError(f"{root} has {len(images)} images but {len(masks)} masks: every "
                              f"image needs one PNG mask of the same name in {mask_dir}")
        unmatched = sorted(set(images) ^ set(masks))
        if unmatched:
            raise ConfigError(f"{root}: image and mask names differ (e.g. {unmatched[0]!r}): "
                              f"give each mask the same file name as its image, extension .png")
        stems = sorted(images)[:limit] if limit is not None else sorted(images)
        self.pairs = [(images[s], masks[s]) for s in stems]
        top = -1
        for img_path, mask_path in self.pairs:  # checked once, before any training
            with image_file(img_path), Image.open(img_path) as im:
                img_size = im.size
            mask = _read_mask(mask_path)
            if (mask.shape[1], mask.shape[0]) != img_size:
                raise ConfigError(f"mask {mask_path.name} is {mask.shape[1]}x{mask.shape[0]} but "
                                  f"its image is {img_size[0]}x{img_size[1]}: masks must have "
                                  f"their image's size")
            valid = mask[mask != ignore_index]
            if valid.size:
                if valid.min() < 0:
                    raise ConfigError(f"mask {mask_path} holds negative class indices")
                top = max(top, int(valid.max()))
                if num_classes is not None and top >= num_classes:
                    raise ConfigError(f"mask {mask_path} holds class {top} but num_classes="
                                      f"{num_classes}: pass num_classes={top + 1} or mark such "
                                      f"pixels with ignore_index={ignore_index}")
        if top < 1:  # nothing to learn: often 0/255 masks whose 255 is the ignore_index
            raise ConfigError(f"the masks in {mask_dir} hold no class but 0 (background; "
                              f"ignore_index={ignore_index} pixels aside): masks are class "
                              f"indices 0..N-1, so save a 0/255 mask's foreground as 1")
        self.max_class = top

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img_path, mask_path = self.pairs[i]
        image = torch.from_numpy(np.array(load_image(img_path, self.mode), dtype=np.uint8))
        image = image[None] if image.dim() == 2 else image.permute(2, 0, 1)
        mask = torch.from_numpy(_read_mask(mask_path))
        image = F.interpolate(_normalize(image)[None], size=(self.size, self.size),
                              mode="bilinear", align_corners=False)[0]
        mask = F.interpolate(mask[None, None].float(), size=(self.size, self.size),
                             mode="nearest")[0, 0].long()
        return _flip(image, mask, self.train)


class CheckedSegmentation(Dataset):
    """A user Dataset of ``(image (C, H, W), mask (H, W))`` whose items are checked as they are
    read: matching sizes, integer class indices < ``num_classes`` (or ``ignore_index``)."""

    def __init__(self, dataset: Dataset, num_classes: int | None, ignore_index: int = 255,
                 stride: int = 32):
        self.dataset, self.num_classes = dataset, num_classes
        self.ignore_index, self.stride = ignore_index, stride
        self.classes = getattr(dataset, "classes", None)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        item = self.dataset[i]
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ConfigError(f"dataset item {i} is not an (image, mask) pair: return "
                              f"(image tensor (C, H, W), mask tensor (H, W) of class indices)")
        image, mask = (torch.as_tensor(np.asarray(t)) if not torch.is_tensor(t) else t
                       for t in item)
        if image.dim() != 3 or mask.dim() != 2:
            raise ConfigError(f"dataset item {i}: image {tuple(image.shape)} / mask "
                              f"{tuple(mask.shape)} must be (C, H, W) and (H, W)")
        if tuple(image.shape[1:]) != tuple(mask.shape):
            raise ConfigError(f"dataset item {i}: mask is {tuple(mask.shape)} but the image is "
                              f"{tuple(image.shape[1:])}: a mask must have its image's size")
        if mask.is_floating_point() or mask.dtype == torch.bool:
            raise ConfigError(f"dataset item {i}: the mask is {mask.dtype}, not integer class "
                              f"indices: return mask.long()")
        if any(s % self.stride for s in mask.shape):
            raise ConfigError(f"dataset item {i} is {mask.shape[1]}x{mask.shape[0]}: "
                              f"segmentation models need sides divisible by {self.stride}; resize "
                              f"or pad the images")
        mask = mask.long()
        valid = mask[mask != self.ignore_index]
        if valid.numel() and (int(valid.min()) < 0 or (self.num_classes is not None and
                                                      int(valid.max()) >= self.num_classes)):
            raise ConfigError(f"dataset item {i}: mask holds class {int(valid.max())} (min "
                              f"{int(valid.min())}) outside [0, {self.num_classes}): fix the mask, "
                              f"num_classes, or mark the pixels with ignore_index="
                              f"{self.ignore_index}")
        return image.float(), mask


def infer_classes(datasets: Sequence[Dataset | None]) -> int | None:
    """num_classes as far as the data tells: 11 for scenes, ``max mask value + 1`` for folders."""
    for ds in datasets:
        if isinstance(ds, SceneSegmentation):
            return len(ds.classes)
    tops = [ds.max_class for ds in datasets if isinstance(ds, ImageMaskFolder)]
    return max(2, max(tops) + 1) if tops else None
