"""YOLO data sets for the detection task: a ``data.yaml``, its images and label files, checked up
front so that Ultralytics never meets a label it would misread or drop."""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import yaml

from ...engine.data import walk_files
from ...engine.paths import confined
from ...errors import ConfigError

IMAGE_SUFFIXES = {".bmp", ".dng", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff", ".webp", ".pfm",
                  ".heic"}
LABELS_CHECKED = 5000  # label files per split whose class ids are checked up front


def _images_of(entry: Any, root: Path, split: str, data_yaml: Path) -> list[Path]:
    files: list[Path] = []
    for item in entry if isinstance(entry, (list, tuple)) else [entry]:
        path = Path(str(item))
        path = path if path.is_absolute() else root / path
        if path.is_dir():  # read as Ultralytics does (its glob follows symlinked folders)
            found, loops = walk_files(path)
            if loops:
                raise ConfigError(f"{loops[0]} (in the {split} images of {data_yaml}) links back "
                                  f"into a folder already read: Ultralytics would read those "
                                  f"images again and again; remove the link")
            files += [p for p in found if p.suffix.lower() in IMAGE_SUFFIXES]
        elif path.is_file() and path.suffix == ".txt":  # an image list: each line confined
            for n, line in enumerate(path.read_text().splitlines(), 1):
                line = line.strip()
                if line:
                    image = confined(line, root, base=path.parent, where=f"{path} line {n}")
                    files.append(image if Path(line).is_absolute() else image.resolve())
        else:
            raise ConfigError(f"the {split} images of {data_yaml} are missing ({path} does not "
                              f"exist): fix '{split}:' or 'path:' in the data.yaml")
    if not files:
        raise ConfigError(f"no images for {split} in {data_yaml} ({entry}): put .jpg/.png files "
                          f"there or fix '{split}:' in the data.yaml")
    return sorted(files)


def label_path(image: Path) -> Path:
    """Where Ultralytics looks for an image's labels (``.../images/...`` ->
    ``.../labels/....txt``)."""
    parts = str(image).rsplit(f"{os.sep}images{os.sep}", 1)
    return Path(f"{os.sep}labels{os.sep}".join(parts)).with_suffix(".txt")


def checked_label_files(data: dict[str, Any]) -> Iterator[tuple[Path, list[str]]]:
    """The label files (and their lines) checked up front: the first ``LABELS_CHECKED`` of each
    split of a data set read by :func:`read_data_yaml`; images without one are skipped."""
    for split in ("train", "val"):
        for image in (data.get(split) or [])[:LABELS_CHECKED]:
            path = label_path(image)
            if path.is_file():
                yield path, path.read_text(encoding="utf-8-sig").splitlines()


def first_box_line(lines: Iterable[str]) -> int | None:
    """The number of the first label line when it is an upright box ``class cx cy w h``, else
    None (a file holds one kind of label: a task of other labels refuses boxes by it)."""
    for n, line in enumerate(lines, 1):
        if len(line.split()) == 5:
            return n
        if line.strip():
            return None
    return None


def check_label_file(path: Path, nc: int) -> None:
    """Refuse a YOLO label file Ultralytics would misread or drop as corrupt, naming its line:
    rows are numbers, 'class cx cy w h' or a polygon 'class x1 y1 x2 y2 x3 y3 ...' (not both in
    one file), class ids 0..nc-1, coordinates fractions of the image in [0, 1] (Ultralytics'
    tolerance of 0.01 kept)."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: YOLO labels are lines 'class cx cy w h'") \
            from None
    kinds = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {n} ({line.strip()[:40]!r})"
        values = line.split()
        try:
            c, *coords = [float(v) for v in values]
        except ValueError:
            raise ConfigError(f"{where} is not all numbers: each line is 'class cx cy w h', a "
                              f"class id then coordinates in [0, 1]") from None
        if len(values) != 5 and (len(values) < 7 or len(values) % 2 == 0):
            raise ConfigError(f"{where} has {len(values)} values: each line is 'class cx cy w h' "
                              f"(5 values) or a polygon 'class x1 y1 x2 y2 x3 y3 ...'")
        kinds.add(len(values) == 5)
        if len(kinds) > 1:
            raise ConfigError(f"{where} mixes boxes and polygons in one file: write all the "
                              f"objects of an image the same way")
        if not 0 <= c < nc or c != int(c):  # NaN and inf fail the first test
            raise ConfigError(f"{where} has class id {values[0]} but {nc} classes are named (ids "
                              f"0..{nc - 1}): fix the label or 'names:' in the data.yaml")
        if not all(-0.01 <= v <= 1.01 for v in coords):  # NaN fails too
            raise ConfigError(f"{where} has coordinates outside [0, 1]: YOLO labels give "
                              f"positions and sizes as fractions of the image width and height")


def _class_names(cfg: dict[str, Any], data_yaml: Path) -> dict[int, str]:
    """``names:`` (a list, or a map of ids 0..N-1) as {id: name}, checked against ``nc:``."""
    names = cfg["names"]
    try:
        names = dict(enumerate(names)) if isinstance(names, (list, tuple)) else \
            {int(k): str(v) for k, v in names.items()}
    except (AttributeError, TypeError, ValueError):
        names = None
    if not names or sorted(names) != list(range(len(names))):
        raise ConfigError(f"{data_yaml}: 'names:' must list the class names ([cat, dog]) or map "
                          f"ids 0..N-1 to them ({{0: cat, 1: dog}})")
    nc = cfg.get("nc", len(names))
    if isinstance(nc, bool) or not isinstance(nc, (int, float)) or nc != len(names):
        raise ConfigError(f"{data_yaml} says nc: {nc!r} but lists {len(names)} names: write "
                          f"nc: {len(names)} or drop nc")
    return names


def read_data_yaml(path: str | os.PathLike, need_train: bool = True,
                   check_labels: Callable[[Path, int], None] = check_label_file,
                   ) -> dict[str, Any]:
    """Load and check a YOLO data.yaml: its class names and the images/labels of train and val
    (``cfg``: the whole YAML, for a sub-task's own keys).

    Raises a one-line ConfigError for a missing file, missing keys, ``names`` / ``nc`` that are
    not a class list and its length, missing images, an empty label folder or a malformed label
    line (``check_labels(path, nc)`` on the first ``LABELS_CHECKED`` label files of each split;
    a task with other label lines passes its own).
    """
    data_yaml = Path(path)
    if not data_yaml.is_file():
        raise ConfigError(f"no data.yaml at {data_yaml}: pass the path of a YOLO data.yaml "
                          f"(autoprune.datasets.write_yolo_dataset writes one)")
    try:
        cfg = yaml.safe_load(data_yaml.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{data_yaml} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict) or "names" not in cfg:
        raise ConfigError(f"{data_yaml} has no 'names:' (the class names): add names: {{0: cat, "
                          f"1: dog, ...}}")
    names = _class_names(cfg, data_yaml)
    root = Path(str(cfg.get("path") or data_yaml.parent)).expanduser()
    if not root.is_absolute() and not root.exists():
        root = data_yaml.parent / root
    out: dict[str, Any] = {"yaml": data_yaml.resolve(), "names": names, "nc": len(names),
                           "cfg": cfg}
    for split in ("train", "val"):
        if cfg.get(split) is None:
            if split == "val" or need_train:
                raise ConfigError(f"{data_yaml} has no '{split}:' entry: add the {split} image "
                                  f"folder (e.g. {split}: images/{split})")
            continue
        images = _images_of(cfg[split], root, split, data_yaml)
        labels = [label_path(p) for p in images]
        present = [p for p in labels if p.is_file()]
        if not present:
            raise ConfigError(f"no label files for the {split} images of {data_yaml} (looked in "
                              f"{labels[0].parent}): each image needs a .txt with one "
                              f"'class cx cy w h' line per object")
        for p in present[:LABELS_CHECKED]:
            check_labels(p, len(names))
        warn_arrays_beside(images, split)
        out[split] = images
    return out


def arrays_beside(images: Sequence[Path]) -> list[Path]:
    """The ``<image>.npy`` files that lie beside ``images`` (each folder listed once)."""
    listed: dict[Path, set[str]] = {}
    found = []
    for image in images:
        folder = image.parent
        if folder not in listed:
            try:
                listed[folder] = set(os.listdir(folder))
            except OSError:
                listed[folder] = set()
        if image.with_suffix(".npy").name in listed[folder]:
            found.append(image.with_suffix(".npy"))
    return found


def warn_arrays_beside(images: Sequence[Path], split: str) -> None:
    """Warn when ``.npy`` files are named like the images: Ultralytics' loader reads such a file
    *instead of* its image (its disk cache), rewrites it when its channels differ and deletes it
    when it does not load, in any cache mode; someone's own arrays there (depth maps, features)
    would be read as images and overwritten."""
    found = arrays_beside(images)
    if found:
        warnings.warn(f"{len(found)} {split} image(s) have a .npy file of the same name beside "
                      f"them (e.g. {found[0]}): Ultralytics reads it instead of the image and "
                      f"rewrites or deletes it; keep only its own cache files (cache='disk') there",
                      stacklevel=3)
