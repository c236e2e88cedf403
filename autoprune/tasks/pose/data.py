"""YOLO pose data sets: a detection ``data.yaml`` (read and checked by
:func:`~autoprune.tasks.detection.data.read_data_yaml`) with ``kpt_shape: [K, 2 | 3]`` (and
``flip_idx`` for flipped training images), whose label lines are ``class cx cy w h`` followed by
K keypoints ``x y`` or ``x y v``."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ..detection.data import checked_label_files

WRITER = "write_yolo_dataset(..., task='pose') writes them"


def _values(path: Path, n: int, line: str) -> list[float]:
    try:
        return [float(v) for v in line.split()]
    except ValueError:
        raise ConfigError(f"{path} line {n} ({line.strip()[:40]!r}) is not all numbers: each "
                          f"line is 'class cx cy w h' then the keypoints 'x y v'") from None


def check_pose_label_file(path: Path, nc: int) -> None:
    """The checks of a pose label file that need no keypoint shape (``read_data_yaml`` calls it
    per file): numbers, a class id in 0..nc-1, a box in [0, 1] followed by keypoints. The number
    of keypoint values is checked against ``kpt_shape`` by :func:`check_keypoints`."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: pose labels are lines 'class cx cy w h' "
                          f"then the keypoints 'x y v'") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        values = _values(path, n, line)
        where = f"{path} line {n} ({line.strip()[:40]!r})"
        if len(values) <= 5:
            what = "is a box without keypoints" if len(values) == 5 else \
                f"has {len(values)} values"
            raise ConfigError(f"{where} {what}: pose needs 'class cx cy w h' then the keypoints "
                              f"'x y v' per object ({WRITER})")
        c, *box = values[:5]
        if not 0 <= c < nc or c != int(c):
            raise ConfigError(f"{where} has class id {line.split()[0]} but {nc} classes are "
                              f"named (ids 0..{nc - 1}): fix the label or 'names:' in the "
                              f"data.yaml")
        if not all(-0.01 <= v <= 1.01 for v in box):
            raise ConfigError(f"{where} has a box outside [0, 1]: YOLO labels give positions and "
                              f"sizes as fractions of the image width and height")


def kpt_shape_of(cfg: dict[str, Any], data_yaml: Path) -> list[int]:
    """The data's ``kpt_shape`` ``[K, 2 | 3]``, its ``flip_idx`` and ``kpt_oks_sigmas`` (when
    given) checked; a one-line ConfigError naming the key otherwise."""
    shape = cfg.get("kpt_shape")
    if shape is None:
        raise ConfigError(f"{data_yaml} has no 'kpt_shape:': a pose data.yaml says how many "
                          f"keypoints each object has and their values, e.g. kpt_shape: [17, 3] "
                          f"(x, y, visibility) or [5, 2] (x, y)")
    if not (isinstance(shape, (list, tuple)) and len(shape) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in shape)
            and shape[0] >= 1 and shape[1] in (2, 3)):
        raise ConfigError(f"{data_yaml}: kpt_shape: {shape!r:.60} must be [keypoints, 2 or 3], "
                          f"e.g. [17, 3]")
    k = shape[0]
    flip = cfg.get("flip_idx")
    whole = isinstance(flip, (list, tuple)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in flip)
    if flip is not None and (not whole or sorted(flip) != list(range(k))):
        raise ConfigError(f"{data_yaml}: flip_idx: {flip!r:.60} must list each of the {k} "
                          f"keypoints' twin in a flipped image once (a permutation of "
                          f"0..{k - 1}), or be left out (no flipped training images)")
    if flip is not None:
        odd = next((i for i in range(k) if flip[flip[i]] != i), None)
        if odd is not None:
            raise ConfigError(f"{data_yaml}: flip_idx: {flip!r:.60} says keypoint {odd}'s twin "
                              f"is {flip[odd]}, but keypoint {flip[odd]}'s twin is "
                              f"{flip[flip[odd]]}: twins go in pairs (flip_idx[flip_idx[i]] == "
                              f"i; a keypoint on the axis is its own twin); fix flip_idx")
    sigmas = cfg.get("kpt_oks_sigmas")
    if sigmas is not None and (not isinstance(sigmas, (list, tuple)) or len(sigmas) != k or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in sigmas)):
        raise ConfigError(f"{data_yaml}: kpt_oks_sigmas must be {k} positive numbers (one per "
                          f"keypoint), or be left out (1/{k} each)")
    return [k, shape[1]]


def check_keypoints(data: dict[str, Any], kpt_shape: list[int]) -> None:
    """Refuse label lines (in the first ``LABELS_CHECKED`` label files of each split of a data
    set read by ``read_data_yaml``) that do not hold ``kpt_shape`` keypoints: ``5 + K * ndim``
    values, keypoint positions in [0, 1], visibilities not negative."""
    k, ndim = kpt_shape
    want = 5 + k * ndim
    for path, lines in checked_label_files(data):
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            values = _values(path, n, line)
            where = f"{path} line {n}"
            if len(values) != want:
                raise ConfigError(f"{where} has {len(values)} values but kpt_shape "
                                  f"{kpt_shape} in {data['yaml']} needs {want} ('class cx "
                                  f"cy w h' + {k} x {ndim}): fix the labels or kpt_shape")
            points = values[5:]
            xy = [v for i, v in enumerate(points) if i % ndim < 2]
            if not all(-0.01 <= v <= 1.01 for v in xy):
                raise ConfigError(f"{where} has a keypoint outside [0, 1]: keypoint "
                                  f"positions are fractions of the image width and height "
                                  f"(an unlabelled keypoint is '0 0 0')")
            if ndim == 3 and not all(math.isfinite(v) and v >= 0 for v in points[2::3]):
                raise ConfigError(f"{where} has a negative keypoint visibility: use 0 "
                                  f"(unlabelled), 1 (hidden) or 2 (visible)")
