"""Data helpers shared by the task adapters: loaders, and evaluation batches decoded once."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .distributed import rank_and_world
from ..errors import AutopruneError, ConfigError


def check_limits(**limits: int | None) -> None:
    """Refuse a ``train_limit`` / ``eval_limit`` that is not None or a positive whole number."""
    for name, value in limits.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"{name}={value!r} must be a positive number of images (or None "
                              f"for all)")


@contextmanager
def image_file(path: Any) -> Iterator[None]:
    """Reading one image file inside this block: a file PIL cannot decode (truncated, corrupt, not
    an image) becomes a one-line ConfigError that names it, even in the middle of training."""
    try:
        yield
    except AutopruneError:
        raise
    except Exception as e:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError...
        reason = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"image {path} cannot be read ({reason}): remove or replace the "
                          f"file") from None


def load_image(path: Any, mode: str = "RGB") -> Any:
    """The PIL image at ``path`` converted to ``mode`` (the ImageFolder loader), or a
    ConfigError naming a damaged file."""
    with image_file(path), Image.open(path) as im:
        return im.convert(mode)


def walk_files(root: str | os.PathLike) -> tuple[list[Path], list[Path]]:
    """Every file under ``root`` (sorted), following a symlinked folder only into a folder not
    read yet: ``(files, links)``, ``links`` being the symlinks skipped because they lead back
    into a folder already read (a loop such as ``a/loop -> .``, or a second link to one
    folder)."""
    files: list[Path] = []
    links: list[Path] = []
    seen: set[str] = set()
    for folder, dirs, names in os.walk(root, followlinks=True):
        seen.add(os.path.realpath(folder))
        keep = []
        for d in sorted(dirs):
            path = os.path.join(folder, d)
            if os.path.realpath(path) in seen:
                links.append(Path(path))
            else:
                keep.append(d)
                seen.add(os.path.realpath(path))
        dirs[:] = keep
        files += [Path(folder) / n for n in sorted(names)]
    return sorted(files), links


def subset(dataset: Dataset, indices: Sequence[int]) -> Dataset:
    """``Subset(dataset, indices)`` that keeps the ``classes`` the dataset declares."""
    part = torch.utils.data.Subset(dataset, indices)
    if getattr(dataset, "classes", None) is not None:
        part.classes = dataset.classes
    return part


def first_items(dataset: Dataset, limit: int | None) -> Dataset:
    """The first ``limit`` items of ``dataset`` (all of it for None), its ``classes`` kept."""
    if limit is None or limit >= len(dataset):
        return dataset
    return subset(dataset, range(limit))


def make_loader(dataset: Dataset, batch_size: int, *, shuffle: bool, num_workers: int = 0,
                seed: int = 0, drop_last: bool = False, shard: bool = False) -> DataLoader:
    """A DataLoader with a seeded shuffle (reproducible epochs).

    Workers are started anew each epoch (not persistent) and seeded from the loader's
    generator, so restoring that generator's state resumes the augmentation randomness exactly.

    ``shard=True`` under torch.distributed (torchrun, several ranks): each rank reads its own
    share of every epoch (``DistributedSampler``, shuffled by ``seed`` + epoch) in batches of
    ``batch_size // world``, so ``batch_size`` stays the total batch, as in PaddleX."""
    if len(dataset) == 0:
        raise ConfigError("the dataset is empty: check the data path (no images were found)")
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be at least 1")
    rank, world = rank_and_world()
    if shard and world > 1:
        if batch_size < world:
            raise ConfigError(f"batch_size={batch_size} is the total over {world} processes: "
                              f"pass at least {world} (one sample per process)")
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=shuffle,
                                     seed=seed, drop_last=drop_last)
        return DataLoader(dataset, batch_size=batch_size // world, sampler=sampler,
                          num_workers=num_workers, drop_last=drop_last and
                          len(sampler) > batch_size // world)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                      generator=torch.Generator().manual_seed(seed) if shuffle else None,
                      drop_last=drop_last and len(dataset) > batch_size)


DEVICE_BUDGET = 1024 ** 3  # cached evaluation batches kept on a GPU: at most this many bytes
DEVICE_SHARE = 0.05  # ... and at most this share of its memory (training shares it too)


class CachedBatches:
    """Iterates a loader's batches, decoding and preprocessing them only once.

    The first pass keeps the batches in memory as long as they total at most ``max_bytes``
    (default 2 GB); past that it falls back to iterating the loader each time. With a CUDA
    ``device`` (where the evaluation runs) the kept batches are moved there once they fit
    :data:`DEVICE_BUDGET` and :data:`DEVICE_SHARE` of its memory, else pinned: every later
    pass then copies nothing from pageable host memory (a masked analysis evaluates each
    variant's batches again: those copies were a fifth of its GPU time on an H100).
    """

    def __init__(self, loader: DataLoader, max_bytes: int = 2 * 1024 ** 3,
                 device: torch.device | str | None = None):
        self.loader = loader
        self.max_bytes = max_bytes
        self.device = torch.device(device) if device is not None else None
        self._cache: list[Any] | None = None
        self._too_big = False

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        if self._cache is not None:
            yield from self._cache
            return
        if self._too_big:
            yield from self.loader
            return
        cache, size = [], 0
        for batch in self.loader:
            if not self._too_big:
                size += sum(t.numel() * t.element_size() for t in tensors_in(batch))
                if size > self.max_bytes:
                    self._too_big, cache = True, []
                else:
                    cache.append(batch)
            yield batch
        if not self._too_big:
            self._cache = self._placed(cache, size)

    def _placed(self, cache: list[Any], size: int) -> list[Any]:
        """The kept batches on the CUDA device when they fit its budget, else pinned; on the CPU
        as they are."""
        if self.device is None or self.device.type != "cuda" or not torch.cuda.is_available():
            return cache
        total = torch.cuda.get_device_properties(self.device).total_memory
        if size <= min(DEVICE_BUDGET, DEVICE_SHARE * total):
            return [mapped(batch, lambda t: t.to(self.device)) for batch in cache]
        return [mapped(batch, torch.Tensor.pin_memory) for batch in cache]


def mapped(batch: Any, fn: Any) -> Any:
    """``batch`` with ``fn`` applied to every tensor in it (nested lists, tuples and dicts)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, (list, tuple)):
        return type(batch)(mapped(b, fn) for b in batch)
    if isinstance(batch, dict):
        return {k: mapped(v, fn) for k, v in batch.items()}
    return batch


def tensors_in(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``batch`` (nested lists, tuples and dicts), depth first."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (list, tuple)):
        for b in batch:
            yield from tensors_in(b)
    elif isinstance(batch, dict):
        for b in batch.values():
            yield from tensors_in(b)
