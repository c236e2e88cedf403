"""Classification data: the data sets the adapter reads (``"fashion-mnist"``, a folder or file in
one of the layouts of :mod:`.formats` — ImageFolder, PaddleX / ImageNet lists, CSV — or a torch
Dataset of (image, label)), with timm's transforms for the model's data config, subsets that
take from every class in turn, and the val split found beside a train list."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from torchvision import datasets

from ...datasets import FashionMNIST
from ...engine.data import first_items, load_image, subset, walk_files
from ...errors import ConfigError
from . import formats
from .pretrained import data_transforms

FASHION_MNIST = "fashion-mnist"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class SafeImageFolder(datasets.ImageFolder):
    """torchvision's ImageFolder that follows a symlinked folder only into a folder it has not read
    (``a/loop -> .`` would read the class's images again and again), saying which it skipped."""

    @staticmethod
    def make_dataset(directory: str, class_to_idx: dict[str, int], extensions: Any = None,
                     is_valid_file: Any = None, allow_empty: bool = False) -> list[tuple[str, int]]:
        extensions = tuple(extensions or datasets.folder.IMG_EXTENSIONS)
        samples, empty = [], []
        for name, index in sorted(class_to_idx.items(), key=lambda item: item[1]):
            files, links = walk_files(os.path.join(directory, name))
            for link in links:
                print(f"[autoprune] {link} leads back into a folder already read: not followed",
                      flush=True)
            found = [(str(f), index) for f in files if (is_valid_file(str(f)) if is_valid_file
                                                        else f.suffix.lower() in extensions)]
            samples += found
            if not found:
                empty.append(name)
        if empty and not allow_empty:
            raise FileNotFoundError(f"found no valid file for the classes {', '.join(empty)}")
        return samples


DEFAULT_DATA = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD, "interpolation": "bilinear",
                "crop_pct": 0.875}  # a model trained from scratch: ImageNet's normalisation


def folder_data(path: Path, size: int, train: bool, data_config: dict[str, Any],
                data_format: str | None, split: str | None = None) -> Dataset:
    """The images under ``path`` in its layout (told from it, or ``data_format``): an ImageFolder,
    PaddleX / ImageNet file lists or a CSV, with timm's transforms for ``data_config`` (training
    ones when ``train``); a list's ``split`` (train or val) follows ``train`` unless given."""
    transform = data_transforms(data_config, train, size)
    found = data_format or layout_of(path)
    if found not in formats.FORMATS:
        raise ConfigError(f"data_format={data_format!r} is not a classification format: use one "
                          f"of {', '.join(formats.FORMATS)}, or leave it out")
    if found != "imagefolder":
        return formats.read_classification_data(path, transform=transform, data_format=found,
                                                 split=split or ("train" if train else "val"))
    if not path.is_dir():
        raise ConfigError(f"data path {path} is not a folder: an ImageFolder is a folder of "
                          f"class folders; pass data_format= for a file list")
    try:
        return SafeImageFolder(str(path), transform=transform, loader=load_image)
    except FileNotFoundError as e:
        raise ConfigError(f"{path} holds no images in class sub-folders ({e}): expected "
                          f"<root>/<class>/<image>.jpg") from None


def balanced_indices(targets: list[int], limit: int) -> list[int]:
    """The first ``limit`` indices of a round robin over the classes (each class in its own
    order), so a subset of a class-sorted folder holds every class about equally."""
    by_class: dict[int, list[int]] = {}
    for i, t in enumerate(targets):
        by_class.setdefault(int(t), []).append(i)
    queues = [iter(by_class[c]) for c in sorted(by_class)]
    picked: list[int] = []
    while queues and len(picked) < limit:
        for q in list(queues):
            i = next(q, None)
            if i is None:
                queues.remove(q)
            elif len(picked) < limit:
                picked.append(i)
    return picked


def targets_of(ds: Dataset) -> list[int] | None:
    """The labels of ``ds`` without reading its images (ImageFolder, Fashion-MNIST, Subsets of
    them); None when the dataset does not expose them."""
    if isinstance(ds, torch.utils.data.Subset):
        inner = targets_of(ds.dataset)
        return None if inner is None else [inner[i] for i in ds.indices]
    targets = getattr(ds, "targets", None)
    return None if targets is None else [int(t) for t in targets]


def resolve_dataset(spec: Any, *, train: bool, input_size: int, limit: int | None = None,
                    root: str | None = None, data_config: dict[str, Any] | None = None,
                    data_format: str | None = None, split: str | None = None) -> Dataset:
    """``"fashion-mnist"``, a folder or file in one of the layouts of :mod:`.formats`
    (ImageFolder, PaddleX lists, CSV), or a torch Dataset of (image, label); ``data_config``:
    the normalisation, interpolation and crop of the model (a pretrained one's). ``train``:
    training transforms and split; ``split="train"`` with ``train=False``: the training split
    through the evaluation transforms (what an INT8 model is calibrated on)."""
    data_config = data_config or DEFAULT_DATA
    if isinstance(spec, Dataset):
        targets = targets_of(spec) if limit is not None and limit < len(spec) else None
        if targets is None:
            return first_items(spec, limit)
        return subset(spec, balanced_indices(targets, limit))
    if isinstance(spec, str) and spec.lower() == FASHION_MNIST:
        own = data_config is not DEFAULT_DATA  # a pretrained model's normalisation
        fm_split = "train" if train or split == "train" else "test"
        return FashionMNIST(fm_split, root=root, size=input_size, channels=3,
                            limit=limit, mean=data_config["mean"] if own else None,
                            std=data_config["std"] if own else None)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        if not path.exists():
            raise ConfigError(f"data path {path} does not exist: pass an ImageFolder root "
                              f"(<root>/<class>/<image>), a PaddleX list or CSV, a Dataset or "
                              f"'{FASHION_MNIST}'")
        ds = folder_data(path, input_size, train, data_config, data_format, split)
        if limit is not None:  # a folder lists class by class: take from every class
            ds = subset(ds, balanced_indices(ds.targets, limit))
        return ds
    raise ConfigError(f"data must be a folder path, a torch Dataset or '{FASHION_MNIST}', "
                      f"not {type(spec).__name__}")


def val_split(data: Any, data_format: str | None) -> Any:
    """The val split beside a PaddleX / CSV ``data`` (a root: itself, read as its val split; a
    train list: the val list beside it), or None."""
    if not isinstance(data, (str, os.PathLike)) or not Path(data).exists():
        return None
    path = Path(data)
    folder = path if path.is_dir() else path.parent
    found = data_format or layout_of(path)
    val = {"paddlex": folder / "val_list.txt", "csv": folder / "val.csv"}.get(found)
    if val is None or not val.is_file() or (path.is_file() and path == val):
        return None
    return path if path.is_dir() else val


def layout_of(path: Path) -> str:
    """The layout of ``path`` (:func:`.formats.detect_format`); a folder it cannot tell is read as
    an ImageFolder, whose error then says what is missing."""
    try:
        return formats.detect_format(path)
    except ConfigError:
        if path.is_dir():
            return "imagefolder"
        raise


def data_kind(data: Any) -> str:
    """What ``data`` is, in a word for the run's log: a Dataset, Fashion-MNIST or its layout."""
    if isinstance(data, Dataset):
        return "a Dataset"
    if isinstance(data, str) and data.lower() == FASHION_MNIST:
        return FASHION_MNIST
    return layout_of(Path(data)) if Path(data).exists() else "?"


def dataset_classes(ds: Dataset) -> list[str] | None:
    """The class names a dataset declares, if any."""
    classes = getattr(ds, "classes", None)
    return list(classes) if classes is not None else None


def is_class_index(label: Any) -> bool:
    """An int, a numpy integer or a 0-d integer tensor (what cross-entropy takes as a target)."""
    try:
        t = torch.as_tensor(label)
    except (TypeError, ValueError, RuntimeError):
        return False
    return t.dim() == 0 and not t.is_floating_point() and not t.is_complex() and \
        t.dtype != torch.bool


__all__ = ["DEFAULT_DATA", "FASHION_MNIST", "IMAGENET_MEAN", "IMAGENET_STD", "SafeImageFolder",
           "balanced_indices", "data_kind", "dataset_classes", "folder_data", "is_class_index",
           "layout_of", "resolve_dataset", "targets_of", "val_split"]
