"""Classification data in the layouts users have: an ImageFolder, PaddleX / ImageNet file lists
and CSV files, read as :class:`FileListDataset` (ImageFolder's attributes and items).

- **PaddleX / ImageNet lists**: ``train_list.txt`` / ``val_list.txt`` of ``<relative path>
  <label id>`` lines (paths relative to the list's folder, the data set root in PaddleX's
  convention; a path may hold spaces: the label is the last field), class names in
  ``labels.txt`` beside the list (line k names class k; required). Pass the list file, or the
  root and a ``split`` ("train" reads ``train_list.txt``, "val" ``val_list.txt``).
- **CSV**: ``<path>,<label>`` rows, paths relative to the CSV's folder. A first row whose first
  cell is not an image path (no image suffix) is a header; a header naming columns ``path`` /
  ``image`` / ``file`` / ``filename`` and ``label`` / ``class`` / ``category`` may list them in
  any order among others. A label is a class name or an id: with a ``labels.txt`` beside the
  CSV, names and ids refer to it; without one, ids (all labels whole numbers) name classes
  ``0..max`` and names are sorted. Those classes are taken over the CSV and its sibling
  (``train.csv`` <-> ``val.csv``), so both splits get the same class list. Pass the CSV, or the
  root holding ``train.csv`` / ``val.csv`` and a ``split``.
- Every missing image, unknown label, malformed line or empty list is a one-line ConfigError
  naming the file and line; a damaged image is named when it is read
  (:func:`autoprune.engine.data.load_image`).
"""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Callable

from torch.utils.data import Dataset

from ...datasets.formats import check_format_and_split, read_labels_txt
from ...engine.data import load_image
from ...engine.paths import confined
from ...errors import ConfigError

FORMATS = ("imagefolder", "paddlex", "csv")
IMAGE_SUFFIXES = {".bmp", ".jpeg", ".jpg", ".pgm", ".png", ".ppm", ".tif", ".tiff", ".webp"}
PATH_COLUMNS = ("path", "image", "file", "filename", "image_path", "file_name")
LABEL_COLUMNS = ("label", "class", "category", "class_name", "label_id")


class FileListDataset(Dataset):
    """Images listed with their labels, read like torchvision's ``ImageFolder``: ``classes``,
    ``class_to_idx``, ``samples`` (path, label), ``targets``; an item is ``(transform(image),
    label)`` with the image loaded as RGB."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], *,
                 transform: Callable | None = None, source: str = "",
                 loader: Callable[[Any], Any] = load_image):
        self.samples = [(str(p), int(c)) for p, c in samples]
        self.imgs = self.samples
        self.targets = [c for _, c in self.samples]
        self.classes = list(classes)
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.transform, self.loader, self.source = transform, loader, source

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        path, label = self.samples[i]
        image = self.loader(path)
        return (self.transform(image) if self.transform is not None else image), label


def detect_format(path: str | os.PathLike) -> str:
    """``"imagefolder"``, ``"paddlex"`` or ``"csv"`` from what ``path`` holds; a one-line
    ConfigError when it is none of them."""
    p = Path(path)
    if p.is_file():
        if p.suffix.lower() == ".csv":
            return "csv"
        if p.suffix.lower() == ".txt":
            return "paddlex"
    elif p.is_dir():
        if any((p / f"{s}_list.txt").is_file() for s in ("train", "val")):
            return "paddlex"
        if any((p / f"{s}.csv").is_file() for s in ("train", "val")):
            return "csv"
        if any(d.is_dir() and not d.name.startswith(".") for d in p.iterdir()):
            return "imagefolder"
    else:
        raise ConfigError(f"data path {p} does not exist: pass an ImageFolder root, a PaddleX "
                          f"list (train_list.txt) or its folder, or a CSV of path,label rows")
    raise ConfigError(f"cannot tell the data format of {p}: pass an ImageFolder root "
                      f"(<root>/<class>/<image>), a PaddleX list (train_list.txt + labels.txt) or "
                      f"its folder, or a CSV of path,label rows, or name it with "
                      f"data_format='imagefolder'|'paddlex'|'csv'")


def read_classification_data(path: str | os.PathLike, *, transform: Callable | None,
                             data_format: str | None = None,
                             split: str = "train") -> Dataset:
    """The data at ``path`` as a Dataset of ``(transform(image), label)``: a
    :class:`FileListDataset` for PaddleX lists and CSV files (the file, or the root and
    ``split``: "train" or "val"), torchvision's ``ImageFolder`` for an ImageFolder root."""
    check_format_and_split(data_format, split, FORMATS)
    p = Path(path).expanduser()
    fmt = data_format or detect_format(p)
    if fmt == "imagefolder":
        from torchvision import datasets
        try:
            return datasets.ImageFolder(str(p), transform=transform, loader=load_image)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise ConfigError(f"{p} holds no images in class sub-folders ({e}): expected "
                              f"<root>/<class>/<image>.jpg") from None
    if fmt == "paddlex":
        file = p if p.is_file() else p / f"{split}_list.txt"
        samples, classes = read_paddlex_list(file)
    else:
        file = p if p.is_file() else p / f"{split}.csv"
        samples, classes = read_csv_list(file)
    return FileListDataset(samples, classes, transform=transform, source=str(file))


def _existing(file: Path, kind: str) -> None:
    if not file.is_file():
        raise ConfigError(f"no {kind} at {file}: check the path (PaddleX lists: train_list.txt / "
                          f"val_list.txt beside labels.txt; CSV: train.csv / val.csv)")


def _image(folder: Path, text: str, where: str) -> str:
    """The image a list line names (relative to ``folder``, the data root), kept inside it."""
    p = confined(text, folder, where=where)
    if not p.is_file():
        raise ConfigError(f"{where}: image {p} is missing: add it or fix the line")
    return str(p)


def read_paddlex_list(file: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """(samples, classes) of a PaddleX / ImageNet list and the ``labels.txt`` beside it."""
    _existing(file, "file list")
    if not (file.parent / "labels.txt").is_file():
        raise ConfigError(f"no labels.txt beside {file}: write the class names there, one a "
                          f"line, line k naming class k")
    classes = read_labels_txt(file.parent / "labels.txt")
    try:
        lines = file.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"{file} is not a text file: a list holds '<path> <label id>' lines") \
            from None
    samples = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{file} line {n} ({line.strip()[:50]!r})"
        parts = line.strip().rsplit(None, 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ConfigError(f"{where} is not '<image path> <label id>': each line gives a path "
                              f"relative to {file.parent} and a whole-number class id")
        label = int(parts[1])
        if not 0 <= label < len(classes):
            raise ConfigError(f"{where} has label {label} but labels.txt names {len(classes)} "
                              f"classes (ids 0..{len(classes) - 1}): fix the id or labels.txt")
        samples.append((_image(file.parent, parts[0], where), label))
    if not samples:
        raise ConfigError(f"{file} lists no images (empty split): add '<path> <label id>' lines")
    return samples, classes


def _csv_rows(file: Path) -> list[tuple[int, str, str]]:
    """(line number, path, label) of each data row of a CSV (header handled)."""
    _existing(file, "CSV file")
    try:
        with open(file, newline="", encoding="utf-8-sig") as f:
            rows = [(n, row) for n, row in enumerate(csv.reader(f), 1)
                    if any(c.strip() for c in row)]
    except (UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{file} cannot be read as CSV ({type(e).__name__}: {e}): write "
                          f"'path,label' rows") from None
    if not rows:
        raise ConfigError(f"{file} is empty (no images in this split): add 'path,label' rows")
    cols = (0, 1)
    first = [c.strip() for c in rows[0][1]]
    if Path(first[0]).suffix.lower() not in IMAGE_SUFFIXES:  # a header
        lower = [c.lower() for c in first]
        named = [next((lower.index(c) for c in names if c in lower), None)
                 for names in (PATH_COLUMNS, LABEL_COLUMNS)]
        cols = tuple(named) if None not in named else cols
        rows = rows[1:]
    out = []
    for n, row in rows:
        if len(row) <= max(cols) or (cols == (0, 1) and len(row) != 2):
            raise ConfigError(f"{file} line {n} ({','.join(row)[:50]!r}) is not 'path,label': "
                              f"each row gives an image path and its class (name or id)")
        path, label = row[cols[0]].strip(), row[cols[1]].strip()
        if not path or not label:
            raise ConfigError(f"{file} line {n} has an empty path or label")
        out.append((n, path, label))
    if not out:
        raise ConfigError(f"{file} holds a header but no rows (empty split): add 'path,label' "
                          f"rows")
    return out


def _is_id(label: str) -> bool:
    return label.isdigit()


def _one_kind(file: Path, rows: list[tuple[int, str, str]]) -> None:
    """Refuse a CSV (without labels.txt) whose labels mix class ids and class names."""
    kinds = {_is_id(label): (n, label) for n, _, label in rows}
    if len(kinds) == 2:
        (n_id, an_id), (n_name, a_name) = kinds[True], kinds[False]
        raise ConfigError(f"{file} mixes class ids and class names (line {n_id}: {an_id!r}, line "
                          f"{n_name}: {a_name!r}) and no labels.txt maps one to the other: use "
                          f"one kind, or write labels.txt beside it (line k names class k)")


def read_csv_list(file: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """(samples, classes) of a CSV of ``path,label`` rows (see the module's rules)."""
    rows = _csv_rows(file)
    labels_txt = file.parent / "labels.txt"
    if labels_txt.is_file():
        classes = read_labels_txt(labels_txt)
    else:
        every = [label for _, _, label in rows]
        _one_kind(file, rows)
        other = {"train.csv": "val.csv", "val.csv": "train.csv"}.get(file.name)
        if other and (file.parent / other).is_file():
            theirs = _csv_rows(file.parent / other)
            _one_kind(file.parent / other, theirs)
            if bool(rows and _is_id(rows[0][2])) != bool(theirs and _is_id(theirs[0][2])):
                ids, names = (file, file.parent / other) if _is_id(rows[0][2]) else \
                    (file.parent / other, file)
                raise ConfigError(f"{ids} labels its classes by id but {names} by name (no "
                                  f"labels.txt maps one to the other): they would count as "
                                  f"different classes; use one kind in both, or write "
                                  f"labels.txt beside them (line k names class k)")
            every += [label for _, _, label in theirs]
        if all(map(_is_id, every)):
            classes = [str(i) for i in range(max(int(x) for x in every) + 1)]
        else:
            classes = sorted(set(every))
    index = {name: i for i, name in enumerate(classes)}
    samples = []
    for n, path, label in rows:
        where = f"{file} line {n}"
        if label in index:
            c = index[label]
        elif _is_id(label) and int(label) < len(classes):
            c = int(label)
        else:
            raise ConfigError(f"{where} has label {label!r}, not a class of "
                              f"{labels_txt if labels_txt.is_file() else 'this data'} "
                              f"({len(classes)} classes: {', '.join(classes[:5])}...): fix the "
                              f"label or labels.txt")
        samples.append((_image(file.parent, path, where), c))
    return samples, classes


__all__ = ["FORMATS", "FileListDataset", "detect_format", "read_classification_data",
           "read_csv_list", "read_paddlex_list"]
