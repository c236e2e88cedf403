"""Calibration data for static quantization: the caller's batches (tensors or arrays, one or more
inputs) as ONNX Runtime's ``CalibrationDataReader``, limited to a number of images."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from ...errors import ConfigError

_EMPTY = ("calibration on an empty split: no image reached the INT8 calibration; give it the "
          "training split's images (at least one)")


def _array(value: Any, what: str) -> np.ndarray:
    if torch.is_tensor(value):
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "fiub":
        raise ConfigError(f"calibration {what} is a {type(value).__name__}, not a tensor or a "
                          f"numeric array: give batches of input tensors (a tuple per batch for "
                          f"several inputs)")
    return np.ascontiguousarray(value, dtype=np.float32)


def _feeds(batch: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """One batch as ``{input name: float32 array}``. A tuple / list gives the inputs in order
    (what follows them, such as labels, is ignored); a mapping gives them by name."""
    if isinstance(batch, Mapping):
        missing = [n for n in names if n not in batch]
        if missing:
            raise ConfigError(f"a calibration batch has no input {missing[0]!r} (its keys: "
                              f"{', '.join(map(str, list(batch)[:6]))}): give the model's "
                              f"inputs {', '.join(names)}")
        return {n: _array(batch[n], f"input {n!r}") for n in names}
    parts = list(batch) if isinstance(batch, (tuple, list)) else [batch]
    if len(parts) < len(names):
        raise ConfigError(f"a calibration batch holds {len(parts)} tensor(s) where the model "
                          f"takes {len(names)} inputs ({', '.join(names)})")
    return {n: _array(p, f"input {n!r}") for n, p in zip(names, parts)}


def calibration_batches(data: Any, names: Sequence[str], limit: int) -> list[dict[str, np.ndarray]]:
    """The first ``limit`` images of ``data`` as feeds of the inputs ``names``. ``data``: one
    tensor (a batch), or an iterable of batches (a list, a generator, a DataLoader) each a
    tensor, a tuple (the inputs first, e.g. ``(images, labels)``) or a mapping by input name.
    No image at all is a one-line ConfigError ("calibration on an empty split")."""
    if data is None:
        raise ConfigError(_EMPTY)
    batches: Iterable[Any] = [data] if isinstance(data, (torch.Tensor, np.ndarray)) else data
    try:
        iterator = iter(batches)
    except TypeError:
        raise ConfigError(f"calibration data of type {type(data).__name__} is not a batch or "
                          f"an iterable of batches") from None
    out: list[dict[str, np.ndarray]] = []
    left = int(limit)
    for batch in iterator:
        feeds = _feeds(batch, names)
        first = feeds[names[0]]
        n = first.shape[0] if first.ndim else 1
        if n == 0:
            continue
        if n > left:
            feeds = {k: v[:left] for k, v in feeds.items()}
            n = left
        out.append(feeds)
        left -= n
        if left <= 0:
            break
    if not out:
        raise ConfigError(_EMPTY)
    return out


def image_count(batches: Sequence[Mapping[str, np.ndarray]]) -> int:
    """How many images ``batches`` (from :func:`calibration_batches`) hold."""
    return sum(next(iter(b.values())).shape[0] for b in batches)


def reader(batches: Sequence[Mapping[str, np.ndarray]]) -> Any:
    """An ONNX Runtime ``CalibrationDataReader`` over ``batches`` (from the first, each time)."""
    from onnxruntime.quantization import CalibrationDataReader

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = list(batches)
            self.position = 0

        def get_next(self) -> dict[str, np.ndarray] | None:
            if self.position >= len(self.items):
                return None
            self.position += 1
            return dict(self.items[self.position - 1])

        def __len__(self) -> int:
            return len(self.items)

        def set_range(self, start_index: int, end_index: int) -> None:
            self.items = list(batches)[start_index:end_index]
            self.position = 0

    return _Reader()
