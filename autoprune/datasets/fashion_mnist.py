"""Fashion-MNIST from the standard IDX files, decoded once into tensors.

Looked up in ``root``, then ``$AUTOPRUNE_FASHION_MNIST``, then Debian's
``/usr/share/datasets/fashion-mnist`` (``apt-get install dataset-fashion-mnist``). Nothing is
downloaded.
"""
from __future__ import annotations

import functools
import gzip
import os
from typing import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from ..errors import ConfigError

CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot")
DEBIAN_ROOT = "/usr/share/datasets/fashion-mnist"
_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
MEAN, STD = 0.2860, 0.3530


def find_root(root: str | os.PathLike | None = None) -> Path:
    """The folder that holds the Fashion-MNIST IDX files, or a ConfigError that says how
    to get it."""
    candidates = [root] if root else [os.environ.get("AUTOPRUNE_FASHION_MNIST"), DEBIAN_ROOT]
    for c in filter(None, candidates):
        p = Path(c)
        if (p / (_FILES["test"][0] + ".gz")).is_file() or (p / _FILES["test"][0]).is_file():
            return p
    where = root or f"$AUTOPRUNE_FASHION_MNIST or {DEBIAN_ROOT}"
    raise ConfigError(f"Fashion-MNIST not found in {where}: run `apt-get install "
                      f"dataset-fashion-mnist` or pass the folder holding "
                      f"t10k-images-idx3-ubyte(.gz)")


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ConfigError(f"{path} is not an unsigned-byte IDX file: the download is damaged")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ConfigError(f"{path} is truncated ({body.size} of {int(np.prod(dims))} values)")
    return body.reshape(dims)


def _load(root: Path, name: str) -> np.ndarray:
    for candidate in (root / (name + ".gz"), root / name):
        if candidate.is_file():
            stat = candidate.stat()
            return _read_once(str(candidate.resolve()), stat.st_mtime_ns, stat.st_size)
    raise ConfigError(f"{root} lacks {name}(.gz): the Fashion-MNIST folder is incomplete")


@functools.lru_cache(maxsize=4)  # the four files, decoded once a process (gunzip: ~0.7 s each)
def _read_once(path: str, mtime_ns: int, size: int) -> np.ndarray:
    """:func:`read_idx` of ``path`` as it was at ``mtime_ns`` / ``size``: a read-only array (the
    callers copy what they keep), shared by every dataset built from the same file."""
    return read_idx(Path(path))


class FashionMNIST(Dataset):
    """Fashion-MNIST as normalised float tensors, decoded and resized once.

    split: "train" (60k) or "test" (10k). ``limit`` keeps the first N images of each class in turn
    (a balanced subset). ``size`` resizes (bilinear); ``channels=3`` repeats the gray channel so
    ImageNet-style models (3-channel stems) take it unchanged. ``mean`` / ``std`` (per channel)
    normalise as a pretrained model expects; by default Fashion-MNIST's own statistics.
    """

    def __init__(self, split: str = "train", *, root: str | os.PathLike | None = None,
                 size: int = 28, channels: int = 1, limit: int | None = None,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None):
        if split not in _FILES:
            raise ConfigError(f"split {split!r} is not one of 'train', 'test'")
        if channels not in (1, 3):
            raise ConfigError(f"channels={channels} must be 1 or 3")
        base = find_root(root)
        images = _load(base, _FILES[split][0])
        labels = _load(base, _FILES[split][1]).astype(np.int64)
        if limit is not None:
            per_class = [np.flatnonzero(labels == c) for c in range(len(CLASSES))]
            n = min(len(idx) for idx in per_class)
            order = np.stack([idx[:n] for idx in per_class], 1).reshape(-1)
            keep = np.sort(order[:limit])
            images, labels = images[keep], labels[keep]
        x = torch.from_numpy(images.copy()).float().div_(255.0).unsqueeze(1)
        if size != 28:
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        x = x.expand(-1, channels, -1, -1) if channels == 3 else x
        if mean is None and std is None:  # Fashion-MNIST's own statistics
            x = (x - MEAN) / STD
        else:  # a pretrained model's (one value per channel, or one for all)
            shape = (1, -1, 1, 1)
            x = ((x - torch.tensor(mean or [MEAN]).view(shape))
                 / torch.tensor(std or [STD]).view(shape))
        self.images = x.contiguous()
        self.targets = torch.from_numpy(labels)
        self.classes = list(CLASSES)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        return self.images[i], self.targets[i]
