"""Detection and instance-segmentation data in the formats users have, as a YOLO ``data.yaml``.

:func:`prepare_yolo_data` takes a YOLO ``data.yaml`` as it is, and converts a COCO or a Pascal
VOC set once into a cache folder of our own (never next to the user's data)::

    <cache_dir>/images/<split>/<name>   symlinks to the user's images (hard links, else copies,
                                        where symlinks cannot be made)
    <cache_dir>/labels/<split>/<stem>.txt  YOLO labels (Ultralytics' label path of each link)
    <cache_dir>/data.yaml               path: <cache_dir>, train: images/train, val: images/val
    <cache_dir>/autoprune-data.json     written last: the record and the source's fingerprint

A rerun with an unchanged source (the content of its annotation and list files, and where its
images are found) reuses the cache; a changed source, images moved away, or a conversion that was
killed (no marker), converts again.

Rules (also in the README's "Your data"):

- **COCO**: a root holding ``annotations/instances_<split>.json`` (or the ``annotations`` folder,
  or one JSON file). The file whose split name holds "train" is the train split, the one holding
  "val" the val split; a single file serves as both. Given one JSON file, it is the val split (or
  the train split when its name holds "train") and the other split is its sibling
  ``instances_*train*.json`` / ``instances_*val*.json`` when there is one, else the same file.
  Images are found in ``<root>/<split>/``, ``<root>/images/<split>/``, ``<root>/images/``,
  ``<root>/`` (``file_name`` may hold sub-folders). Class ids: category ids sorted -> 0..N-1,
  names from ``categories``. Crowd annotations (``iscrowd: 1``) are skipped as Ultralytics'
  converter and COCO's evaluation do; boxes of zero width or height are skipped (both counted
  in ``record["skipped"]``). For
  ``task="segment"``: polygons (several parts are joined into one outline over zero-width
  bridges, as Ultralytics' ``merge_multi_segment`` does) and RLE masks (uncompressed or
  compressed, decoded here: all parts of the mask outlined and joined the same way); an object
  without a segmentation gets its box as polygon (as Ultralytics' converter does).
- **Pascal VOC**: a root with ``Annotations/*.xml``, ``JPEGImages/`` (``<id>.jpg``, ``.jpeg`` or
  ``.png``, else the XML's ``<filename>``) and ``ImageSets/Main/`` lists: train =
  ``train.txt``, else ``trainval.txt``; val = ``val.txt``, else ``test.txt``; one list serves
  as both. PaddleX's VOC lists work too: ``train_list.txt`` / ``val_list.txt`` of
  ``<image> <xml>`` lines (paths relative to the list's folder), or one such list file. Class
  names: ``class_names`` if given, else ``labels.txt`` (in the root, beside the list file, or in
  the root's parent), else the names in the order first seen (train list then val list, objects
  in file order). ``difficult`` objects are kept. Boxes are 1-based pixel indices (VOC devkit):
  pixels ``xmin..xmax`` cover ``[xmin - 1, xmax)``.
- Boxes and points may pass the image's border by up to one pixel (then clipped); more is an
  error.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import yaml

from ...datasets.formats import read_labels_txt
from ...engine.data import image_file
from ...engine.paths import confined
from ...engine.store import write_text_atomic
from ...errors import ConfigError, WriteError
from .data import label_path, read_data_yaml

FORMATS = ("yolo", "coco", "voc")
TASKS = ("detect", "segment")
VERSION = 1          # of the conversion: a new version converts cached sets again
MARKER = "autoprune-data.json"
TOLERANCE = 1.0      # pixels a box or point may pass the image border (then clipped)
VOC_SUFFIXES = (".jpg", ".jpeg", ".png", ".JPG", ".JPEG", ".PNG")


@dataclass
class DataSource:
    """A data set ready for Ultralytics: ``yaml`` is a YOLO data.yaml (the user's own, or one in
    the cache); ``record`` is what report.json and the cache keep about it."""

    yaml: Path
    format: str
    names: dict[int, str]
    splits: dict[str, int]
    source: str
    record: dict = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the run's log: ``coco, 2 splits, 10 classes, 64 train + 16 val images``."""
        counts = " + ".join(f"{n:,} {s} images" if i == len(self.splits) - 1 else f"{n:,} {s}"
                            for i, (s, n) in enumerate(self.splits.items()))
        return (f"{self.format}, {len(self.splits)} split{'s' * (len(self.splits) != 1)}, "
                f"{len(self.names)} classes, {counts}")


@dataclass
class _Image:
    """One image to write: the user's file, its name under ``images/<split>/``, its label lines."""

    path: Path
    name: str
    lines: list[str]


@dataclass
class _Plan:
    """What a source is made of, before it is read: its splits (each: what to read), the files
    whose content makes its fingerprint and where its images are found (``layout``: a moved
    image folder is another source)."""

    format: str
    splits: dict[str, Any]
    inputs: list[Path]
    extra: dict = field(default_factory=dict)
    layout: list[str] = field(default_factory=list)


# -- detecting ----------------------------------------------------------------------------------
def detect_format(path: str | os.PathLike) -> str:
    """``"yolo"``, ``"coco"`` or ``"voc"`` from what ``path`` holds; a one-line ConfigError when
    it is none of them."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"data path {p} does not exist: pass a YOLO data.yaml, a COCO root or "
                          f"JSON file, or a Pascal VOC root")
    if p.is_file():
        if p.suffix.lower() in (".yaml", ".yml"):
            return "yolo"
        if p.suffix.lower() == ".json":
            return "coco"
        if p.suffix.lower() == ".txt" and _is_voc_list(p):
            return "voc"
    else:
        if (p / "data.yaml").is_file():
            return "yolo"
        if _coco_jsons(p):
            return "coco"
        if (p / "Annotations").is_dir() and ((p / "ImageSets" / "Main").is_dir()
                                             or _paddlex_voc_lists(p)):
            return "voc"
    raise ConfigError(f"cannot tell the data format of {p}: pass a YOLO data.yaml, a COCO root "
                      f"(annotations/instances_<split>.json) or JSON file, or a Pascal VOC root "
                      f"(Annotations/, JPEGImages/, ImageSets/Main/*.txt), or name it with "
                      f"data_format='yolo'|'coco'|'voc'")


def _is_voc_list(path: Path) -> bool:
    """A PaddleX VOC list: its first line is ``<image> <annotation>.xml``."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in path.read_text(encoding="utf-8-sig").splitlines():
            if line.strip():
                return line.split()[-1].lower().endswith(".xml")
    return False


def _paddlex_voc_lists(root: Path) -> list[Path]:
    return [root / n for n in ("train_list.txt", "val_list.txt") if (root / n).is_file()]


def _coco_jsons(folder: Path) -> list[Path]:
    for d in (folder / "annotations", folder):
        found = sorted(d.glob("instances_*.json")) if d.is_dir() else []
        if found:
            return found
    return []


# -- the one entry point ------------------------------------------------------------------------
def cache_dir_for(save_dir: str | os.PathLike, path: str | os.PathLike,
                  task: str = "detect") -> Path:
    """``<save_dir>/data_cache/<name>-<hash>``: where a run converts the source ``path`` to."""
    p = Path(path).expanduser().resolve()
    key = hashlib.sha256(f"{p}\n{task}".encode()).hexdigest()[:12]
    name = re.sub(r"[^0-9A-Za-z_.-]+", "_", p.stem)[:40] or "data"
    return Path(save_dir) / "data_cache" / f"{name}-{key}"


def prepare_yolo_data(path: str | os.PathLike, *, data_format: str | None = None,
                      cache_dir: str | os.PathLike, task: str = "detect",
                      class_names: list[str] | None = None,
                      model_names: list[str] | None = None) -> DataSource:
    """The data at ``path`` as a YOLO data.yaml Ultralytics reads: a YOLO data.yaml as it is,
    a COCO or VOC set converted once into ``cache_dir`` (reused while the source is unchanged).

    data_format: ``"yolo"``, ``"coco"``, ``"voc"`` or None (detected). task: ``"detect"`` (boxes)
    or ``"segment"`` (polygons; COCO or YOLO-seg data). class_names: the VOC class order (else
    ``labels.txt``, else as first seen). model_names: the class names (in id order) of the model
    the data are used with (a checkpoint's): a COCO or VOC set's classes are mapped to them by
    name (each must be one of them); an empty list says the model's names are not known, and a
    VOC set without a class order (no ``class_names``, no ``labels.txt``) is then refused,
    naming the order it would take. Every problem of the source is a one-line ConfigError
    naming the file and the field or line.
    """
    if task not in TASKS:
        raise ConfigError(f"task={task!r} must be 'detect' (boxes) or 'segment' (polygons)")
    if data_format is not None and data_format not in FORMATS:
        raise ConfigError(f"data_format={data_format!r} must be one of {', '.join(FORMATS)} (or "
                          f"None to detect it)")
    src = Path(path).expanduser()
    fmt = data_format or detect_format(src)
    if not src.exists():
        raise ConfigError(f"data path {src} does not exist: check the path")
    if fmt == "yolo":
        return _yolo_source(src)
    if class_names is not None and (not class_names or len(set(map(str, class_names)))
                                    != len(class_names)):
        raise ConfigError(f"class_names={class_names!r} must list distinct names")
    if fmt == "voc" and task == "segment":
        raise ConfigError(f"{src} is a Pascal VOC set: its XML holds boxes only; instance "
                          f"segmentation needs COCO polygons/RLE or YOLO-seg labels")
    plan = _plan_coco(src) if fmt == "coco" else _plan_voc(src, class_names)
    order = [str(n) for n in model_names] if model_names else None
    if order is not None:
        plan.extra["class_names_from"] = "the model's names"
    elif model_names is not None and fmt == "voc" and class_names is None \
            and plan.splits["labels"] is None:
        seen = _read_voc(plan, None)[0]
        raise ConfigError(f"{src} names no class order (no labels.txt, no class_names) and the "
                          f"model records no class names: its classes as first seen are "
                          f"{', '.join(seen[:8])}{', …' if len(seen) > 8 else ''}, which need "
                          f"not be the model's ids; write the model's class names in "
                          f"labels.txt (one a line, in id order) or pass class_names")
    cache = Path(cache_dir)
    with _writing(cache):
        cache.mkdir(parents=True, exist_ok=True)
    fingerprint = _fingerprint(plan, src, task, order or class_names, cache)
    with _locked(cache):
        done = _read_marker(cache)
        if done is not None and done.get("fingerprint") == fingerprint \
                and (cache / "data.yaml").is_file() and _links_alive(cache):
            return _source_of(cache, done["record"])
        names, splits = (_read_coco(plan, task, order) if fmt == "coco"
                         else _read_voc(plan, order or class_names, order is not None))
        record = {"source": str(src), "format": fmt, "task": task,
                  "names": {i: n for i, n in enumerate(names)},
                  "splits": {s: len(v if isinstance(v, list) else splits[v])
                             for s, v in splits.items()},
                  "shared": {s: v for s, v in splits.items() if isinstance(v, str)},
                  **plan.extra}
        _write_cache(cache, names, splits, record, fingerprint)
    return _source_of(cache, record)


def _yolo_source(src: Path) -> DataSource:
    data_yaml = src / "data.yaml" if src.is_dir() else src
    data = read_data_yaml(data_yaml, need_train=False)
    splits = {s: len(data[s]) for s in ("train", "val") if data.get(s)}
    record = {"source": str(src), "format": "yolo", "names": data["names"], "splits": splits}
    return DataSource(Path(data_yaml), "yolo", dict(data["names"]), splits, str(src), record)


def _source_of(cache: Path, record: dict) -> DataSource:
    names = {int(k): str(v) for k, v in record["names"].items()}
    record = {**record, "names": names}  # JSON keys are strings: the same record either way
    return DataSource(cache / "data.yaml", record["format"], names, dict(record["splits"]),
                      record["source"], record)


# -- the cache ----------------------------------------------------------------------------------
def _fingerprint(plan: _Plan, src: Path, task: str, class_names: list[str] | None,
                 cache: Path) -> str:
    """The conversion's settings, the source's and the cache's paths (data.yaml names the
    cache), where the images are found, and the content (sha256) of every annotation and list
    file: an annotation file edited in place with its mtime kept is converted again."""
    h = hashlib.sha256(json.dumps([VERSION, plan.format, task, class_names, str(src.resolve()),
                                   str(cache.resolve()), plan.layout]).encode())
    for p in plan.inputs:
        h.update(f"{p}\0".encode())
        try:
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            h.update(b"\0missing")
        h.update(b"\n")
    return h.hexdigest()


def _links_alive(cache: Path) -> bool:
    """Whether every image link of a converted cache still leads to a file (the user's images
    were not moved or deleted since)."""
    for folder, _, names in os.walk(cache / "images"):
        if not all(os.path.isfile(os.path.join(folder, n)) for n in names):
            return False
    return True


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A failed write into the cache (full disk, no permission) as a one-line WriteError."""
    try:
        yield
    except OSError as e:
        where = e.filename or path
        raise WriteError(f"could not write {where} ({e.strerror or e}): free some disk space or "
                         f"make {path} writable, or pass another save_dir") from None


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One conversion of a cache at a time (two ranks of a torchrun, two runs): an exclusive lock
    on ``<cache>/.lock`` where the system has ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    with open(cache / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_marker(cache: Path) -> dict | None:
    try:
        done = json.loads((cache / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) and isinstance(done.get("record"), dict) else None


def _link(target: Path, link: Path) -> str:
    """``link`` -> ``target``: a symlink, else a hard link, else a copy; returns which."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    for how, make in (("symlink", os.symlink), ("hardlink", os.link),
                      ("copy", shutil.copyfile)):
        try:
            make(target, tmp)
        except OSError:
            if how == "copy":
                raise
            continue
        os.replace(tmp, link)
        return how
    raise AssertionError("unreachable")


def _write_cache(cache: Path, names: list[str], splits: dict[str, list[_Image] | str],
                 record: dict, fingerprint: str) -> None:
    """Write the links, labels and data.yaml into ``cache`` (emptied first), then the marker.
    Each file goes through a temp file and a rename; everything is synced before the marker."""
    kinds, written = set(), []
    with _writing(cache):
        (cache / MARKER).unlink(missing_ok=True)
        (cache / "data.yaml").unlink(missing_ok=True)
        for sub in ("images", "labels"):
            shutil.rmtree(cache / sub, ignore_errors=True)
        for split, images in splits.items():
            for im in images if isinstance(images, list) else []:
                link = cache / "images" / split / im.name
                link.parent.mkdir(parents=True, exist_ok=True)
                kinds.add(_link(im.path.resolve(), link))
                label = label_path(link)
                label.parent.mkdir(parents=True, exist_ok=True)
                tmp = label.with_name(f".{label.name}.{os.getpid()}.tmp")
                tmp.write_text("".join(f"{line}\n" for line in im.lines))
                os.replace(tmp, label)
                written.append(label)
        _sync(written)
    record["images"] = "/".join(sorted(kinds)) or "none"
    entries = {s: f"images/{v if isinstance(v, str) else s}" for s, v in splits.items()}
    data = {"path": str(cache.resolve()), **entries,
            "names": {i: n for i, n in enumerate(names)}}
    write_text_atomic(cache / "data.yaml", yaml.safe_dump(data, sort_keys=False,
                                                          allow_unicode=True))
    write_text_atomic(cache / MARKER, json.dumps({"version": VERSION, "fingerprint": fingerprint,
                                                  "record": record}, indent=1))


def _sync(files: list[Path]) -> None:
    """Everything written reaches the disk before the marker does."""
    if hasattr(os, "sync"):
        os.sync()
        return
    for p in files:
        with open(p, "rb+") as f:
            os.fsync(f.fileno())


# -- shared helpers -----------------------------------------------------------------------------
def _safe_name(name: str) -> str:
    """An image's name under ``images/<split>/``: its relative path, or its file name when the
    path is absolute or climbs out (``..``)."""
    p = Path(str(name).replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return p.name
    return p.as_posix()


def _check_unique(images: list[_Image], where: str) -> None:
    seen: dict[str, str] = {}
    for im in images:
        key = str(Path(im.name).with_suffix("")).lower()
        if key in seen:
            raise ConfigError(f"{where}: images {seen[key]!r} and {im.name!r} share a name (their "
                              f"labels would be one file): rename one of them")
        seen[key] = im.name


def _box_line(c: int, box: tuple[float, float, float, float], w: float, h: float,
              where: str) -> str:
    """``class cx cy bw bh`` of a box x0 y0 x1 y1 in pixels, checked against the image."""
    x0, y0, x1, y1 = box
    if x0 < -TOLERANCE or y0 < -TOLERANCE or x1 > w + TOLERANCE or y1 > h + TOLERANCE:
        raise ConfigError(f"{where} lies outside the {w:g}x{h:g} image (x {x0:g}..{x1:g}, y "
                          f"{y0:g}..{y1:g}): fix the box or the image size")
    x0, x1 = min(max(x0, 0.0), w), min(max(x1, 0.0), w)
    y0, y1 = min(max(y0, 0.0), h), min(max(y1, 0.0), h)
    return (f"{c} {(x0 + x1) / 2 / w:.6f} {(y0 + y1) / 2 / h:.6f} {(x1 - x0) / w:.6f} "
            f"{(y1 - y0) / h:.6f}")


def _polygon_line(c: int, points: np.ndarray, w: float, h: float, where: str) -> str:
    """``class x1 y1 x2 y2 ...`` of a polygon (N, 2) in pixels, checked against the image."""
    if len(points) < 3:
        raise ConfigError(f"{where} is a polygon of {len(points)} point(s): a polygon needs at "
                          f"least 3 points (6 numbers)")
    lo, hi = points.min(0), points.max(0)
    if lo.min() < -TOLERANCE or hi[0] > w + TOLERANCE or hi[1] > h + TOLERANCE:
        raise ConfigError(f"{where} has points outside the {w:g}x{h:g} image (x {lo[0]:g}.."
                          f"{hi[0]:g}, y {lo[1]:g}..{hi[1]:g}): fix the polygon or the image "
                          f"size")
    xy = np.clip(points / np.array([w, h]), 0.0, 1.0)
    return f"{c} " + " ".join(f"{v:.6f}" for v in xy.reshape(-1))


def _area(points: np.ndarray) -> float:
    x, y = points[:, 0], points[:, 1]
    return abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))) / 2


def join_parts(parts: list[np.ndarray]) -> np.ndarray:
    """Several outlines (each (N, 2)) as one polygon: the largest first, then each other part
    visited over a zero-width bridge from the closest point of the outline so far (as
    :func:`autoprune.datasets.scenes.polygon` and Ultralytics' ``merge_multi_segment``)."""
    parts = sorted(parts, key=lambda p: -_area(p))
    outline = parts[0]
    for part in parts[1:]:
        gaps = np.linalg.norm(outline[:, None] - part[None], axis=2)
        i, j = np.unravel_index(int(gaps.argmin()), gaps.shape)
        outline = np.concatenate([outline[:i + 1], part[j:], part[:j + 1], outline[i:]])
    return outline


# -- COCO ---------------------------------------------------------------------------------------
def _split_of(json_file: Path) -> str:
    return json_file.stem[len("instances_"):] if json_file.stem.startswith("instances_") \
        else json_file.stem


def _pick(files: list[Path], word: str, where: Path) -> Path | None:
    """The one file whose split name holds ``word`` ("train" or "val"; a "trainval" file counts
    only where no other one does)."""
    found = [f for f in files if word in _split_of(f).lower()]
    other = "val" if word == "train" else "train"
    if len(found) > 1 and len([f for f in found if other not in _split_of(f).lower()]) == 1:
        found = [f for f in found if other not in _split_of(f).lower()]
    if len(found) > 1:
        raise ConfigError(f"{where} holds several {word} annotation files "
                          f"({', '.join(f.name for f in found)}): pass the JSON file to use")
    return found[0] if found else None


def _plan_coco(src: Path) -> _Plan:
    """Which JSON file is the train split and which the val split (see the module's rules)."""
    if src.is_file():
        own = _split_of(src).lower()
        siblings = [f for f in sorted(src.parent.glob("instances_*.json")) if f != src]
        if "train" in own:
            train, val = src, _pick(siblings, "val", src.parent) or src
        else:
            val, train = src, _pick(siblings, "train", src.parent) or src
    else:
        files = _coco_jsons(src)
        if not files:
            raise ConfigError(f"{src} holds no COCO annotations (annotations/instances_<split>"
                              f".json): pass a COCO root or the JSON file")
        if len(files) == 1:
            train = val = files[0]
        else:
            train, val = _pick(files, "train", src), _pick(files, "val", src)
            if train is None and val is None:
                raise ConfigError(f"{src} holds {len(files)} annotation files but none is named "
                                  f"train or val ({', '.join(f.name for f in files)}): pass "
                                  f"the JSON file to use")
            train, val = train or val, val or train
    splits = {"train": train, "val": val}
    layout = [f"{s}: {d}" for s, f in splits.items() for d in _coco_folders(f, _split_of(f))
              if d.is_dir()]
    return _Plan("coco", splits, sorted({train, val}),
                 {"files": {s: str(f) for s, f in splits.items()}}, layout)


def _load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e.msg} at line {e.lineno} column "
                          f"{e.colno}): fix or re-export the annotation file") from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise ConfigError(f"{path} is not a COCO JSON file ({type(e).__name__}): pass the "
                          f"instances_<split>.json of a COCO export") from None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and bool(np.isfinite(value))


def _categories(data: dict, path: Path) -> dict[Any, str]:
    cats = data.get("categories")
    if not isinstance(cats, list) or not cats:
        raise ConfigError(f"{path} has no 'categories' list (the class names): a COCO file lists "
                          f"[{{\"id\": 1, \"name\": \"cat\"}}, ...]")
    out: dict[Any, str] = {}
    for i, c in enumerate(cats):
        if not isinstance(c, dict) or not isinstance(c.get("id"), int) \
                or isinstance(c.get("id"), bool) or not isinstance(c.get("name"), str):
            raise ConfigError(f"{path}: categories[{i}] needs an integer 'id' and a 'name' "
                              f"(got {str(c)[:60]})")
        if c["id"] in out:
            raise ConfigError(f"{path}: categories[{i}] repeats category id {c['id']}")
        twin = next((k for k, n in out.items() if n == c["name"]), None)
        if twin is not None:
            raise ConfigError(f"{path}: categories[{i}] (id {c['id']}) repeats the name "
                              f"{c['name']!r} of category id {twin}: two classes of one name "
                              f"cannot be told apart; merge them or rename one")
        out[c["id"]] = c["name"]
    return dict(sorted(out.items()))


def _coco_root(json_file: Path) -> Path:
    """The COCO root of an annotation file: the folder above ``annotations/``, else its own."""
    return json_file.parent.parent if json_file.parent.name == "annotations" else json_file.parent


def _coco_folders(json_file: Path, split: str) -> list[Path]:
    roots = [json_file.parent.parent, json_file.parent] if json_file.parent.name == "annotations" \
        else [json_file.parent]
    return [d for r in roots for d in (r / split, r / "images" / split, r / "images", r)]


class _Finder:
    """Finds each image of a COCO split among the candidate folders (the last hit tried first),
    inside the data root ``root`` (:func:`~autoprune.engine.paths.confined`)."""

    def __init__(self, folders: list[Path], root: Path):
        self.folders, self.hit, self.root = folders, folders[0], root

    def __call__(self, name: str, where: str) -> Path | None:
        p = Path(name)
        for folder in [None] if p.is_absolute() else [self.hit, *self.folders]:
            candidate = p if folder is None else folder / p
            if candidate.is_file():
                confined(name, self.root, base=folder, where=where)
                self.hit = folder or self.hit
                return candidate
        return None


def image_size(path: Path) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((width, height) as stored, as displayed)`` of an image, from its header only (the
    second swaps the sides when its EXIF orientation turns it by 90 degrees)."""
    from PIL import Image

    with image_file(path), Image.open(path) as im:
        w, h = im.size
        turned = im.getexif().get(0x0112) in (5, 6, 7, 8)
    return (w, h), ((h, w) if turned else (w, h))


def check_image_size(path: Path, w: float, h: float, where: str, fix: str) -> None:
    """Refuse an annotation's image size (``w`` x ``h``) other than the image file's: its
    labels would be scaled wrong."""
    stored, shown = image_size(path)
    if (w, h) not in (stored, shown):
        raise ConfigError(f"{where} gives the image size {w:g}x{h:g} but {path} is "
                          f"{stored[0]}x{stored[1]} pixels: its boxes would be scaled wrong; "
                          f"{fix}")


def _read_coco(plan: _Plan, task: str, order: list[str] | None = None
               ) -> tuple[list[str], dict[str, list[_Image] | str]]:
    """The class names and the images of each split; ``order``: the model's class names, the
    categories mapped to them by name."""
    files: dict[str, Path] = plan.splits
    out: dict[str, list[_Image] | str] = {}
    names = None
    done: dict[Path, str] = {}
    for split in ("val", "train"):  # val first: a single file is written once, as val
        path = files[split]
        if path in done:
            out[split] = done[path]  # the same images as that split
            continue
        data = _load_json(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path} is not a COCO annotation file (a JSON object with "
                              f"'images', 'annotations', 'categories')")
        cats = _categories(data, path)
        if names is None:
            names, first = cats, path
        elif cats != names:
            raise ConfigError(f"{path} and {first} list different categories: train and val "
                              f"must share one category list")
        index = None if order is None else _model_ids(cats, order, path)
        out[split] = _coco_split(data, path, _split_of(path), cats, task, plan.extra, index)
        done[path] = split
    assert names is not None
    return order or list(names.values()), {s: out[s] for s in ("train", "val")}


def _model_ids(cats: dict[Any, str], order: list[str], path: Path) -> dict[Any, int]:
    """Each category id's class id in the model's ``order`` of names."""
    unknown = [n for n in cats.values() if n not in order]
    if unknown:
        raise ConfigError(f"{path}: category {unknown[0]!r} is not a class of the model "
                          f"({', '.join(order[:8])}{', …' if len(order) > 8 else ''}): evaluate "
                          f"it on data of its classes, or train a model on these")
    return {cid: order.index(name) for cid, name in cats.items()}


def _coco_images(data: dict, path: Path) -> dict[Any, dict]:
    images = data.get("images")
    if not isinstance(images, list):
        raise ConfigError(f"{path} has no 'images' list: a COCO file lists its images")
    if not images:
        raise ConfigError(f"{path} lists no images (empty split): add images or pass another "
                          f"annotation file")
    out: dict[Any, dict] = {}
    for i, im in enumerate(images):
        if not isinstance(im, dict) or "id" not in im:
            raise ConfigError(f"{path}: images[{i}] has no 'id'")
        for key in ("width", "height"):
            if not _number(im.get(key)) or im[key] <= 0:
                raise ConfigError(f"{path}: images[{i}] (id {im['id']}) has '{key}': "
                                  f"{im.get(key)!r}, not a positive number of pixels")
        if not isinstance(im.get("file_name"), str) or not im["file_name"]:
            raise ConfigError(f"{path}: images[{i}] (id {im['id']}) has no 'file_name'")
        if im["id"] in out:
            raise ConfigError(f"{path}: images[{i}] repeats image id {im['id']}")
        out[im["id"]] = im
    return out


def _coco_split(data: dict, path: Path, split: str, cats: dict[Any, str], task: str,
                record: dict, index: dict[Any, int] | None = None) -> list[_Image]:
    """The images of one COCO file with their label lines (class ids from ``index``, by
    default the categories in id order); counts what was skipped (crowd objects, boxes of no
    area) or stood in for (a box for a missing polygon) in ``record``."""
    counts = record.setdefault("skipped", {"crowd": 0, "empty_box": 0, "box_as_polygon": 0})
    images = _coco_images(data, path)
    index = index if index is not None else {cid: k for k, cid in enumerate(cats)}
    anns = data.get("annotations")
    if not isinstance(anns, list):
        raise ConfigError(f"{path} has no 'annotations' list: pass an instances_<split>.json "
                          f"(image_info files hold no objects)")
    lines: dict[Any, list[str]] = {i: [] for i in images}
    objects = 0
    for i, a in enumerate(anns):
        where = f"{path}: annotations[{i}] (id {a.get('id') if isinstance(a, dict) else '?'})"
        if not isinstance(a, dict):
            raise ConfigError(f"{where} is not an object")
        if a.get("image_id") not in images:
            raise ConfigError(f"{where} is for image_id {a.get('image_id')!r}, which 'images' "
                              f"does not list: add the image or drop the annotation")
        if a.get("category_id") not in index:
            raise ConfigError(f"{where} has category_id {a.get('category_id')!r}, not one of "
                              f"the categories ({', '.join(map(str, list(cats)[:10]))}): fix "
                              f"the id or add the category")
        if a.get("iscrowd"):
            counts["crowd"] += 1
            continue
        im = images[a["image_id"]]
        w, h = float(im["width"]), float(im["height"])
        bbox = a.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(map(_number, bbox)) \
                or bbox[2] < 0 or bbox[3] < 0:
            raise ConfigError(f"{where} has bbox {str(bbox)[:60]}: a box is [x, y, width, "
                              f"height] in pixels, width and height >= 0")
        x, y, bw, bh = (float(v) for v in bbox)
        box = (x, y, x + bw, y + bh)
        line = _box_line(index[a["category_id"]], box, w, h, f"{where} bbox {bbox}")
        if bw <= 0 or bh <= 0:
            counts["empty_box"] += 1  # Ultralytics' converter skips them too
            continue
        if task == "segment":
            counts["box_as_polygon"] += not a.get("segmentation")
            outline = _coco_outline(a.get("segmentation"), box, w, h, where)
            line = _polygon_line(index[a["category_id"]], outline, w, h,
                                 f"{where} segmentation")
        lines[a["image_id"]].append(line)
        objects += 1
    if objects == 0:
        raise ConfigError(f"{path} holds no objects (no annotation that is not a crowd): the "
                          f"{split} split is empty")
    finder = _Finder(_coco_folders(path, split), _coco_root(path))
    out = []
    for image_id, im in images.items():
        where = f"{path}: image id {image_id}"
        found = finder(im["file_name"], where)
        if found is None:
            raise ConfigError(f"{path}: image {im['file_name']!r} (id {image_id}) is missing: "
                              f"looked in {', '.join(str(d) for d in finder.folders[:3])}; put "
                              f"the images there")
        check_image_size(found, float(im["width"]), float(im["height"]), where,
                         "fix its 'width' and 'height' in the annotation file")
        out.append(_Image(found, _safe_name(im["file_name"]), lines[image_id]))
    _check_unique(out, str(path))
    return out


def _coco_outline(seg: Any, box: tuple[float, ...], w: float, h: float, where: str) -> np.ndarray:
    """The object's outline (N, 2) in pixels from COCO polygons or an RLE mask; its box when it
    has no segmentation."""
    if isinstance(seg, dict):
        mask = decode_rle(seg, int(h), int(w), where)
        if not mask.any():
            raise ConfigError(f"{where}: its RLE segmentation is an empty mask: fix or drop it")
        from ...datasets.scenes import polygon
        return polygon(mask) + 0.5  # pixel (i, j) covers [j, j + 1): its centre is at + 0.5
    if not seg:
        x0, y0, x1, y1 = box
        return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
    if not isinstance(seg, list) or not all(isinstance(p, list) for p in seg):
        raise ConfigError(f"{where} has segmentation {str(seg)[:60]}: COCO gives a list of "
                          f"polygons [[x1, y1, x2, y2, ...]] or an RLE {{'size', 'counts'}}")
    parts = []
    for k, p in enumerate(seg):
        if not all(map(_number, p)) or len(p) % 2:
            raise ConfigError(f"{where} segmentation[{k}] is not a list of x, y pairs")
        if len(p) < 6:
            raise ConfigError(f"{where} segmentation[{k}] is a polygon of {len(p) // 2} "
                              f"point(s): a polygon needs at least 3 points (6 numbers)")
        parts.append(np.asarray(p, np.float64).reshape(-1, 2))
    return join_parts(parts)


def rle_counts(counts: str) -> list[int]:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``)."""
    out: list[int] = []
    p = 0
    while p < len(counts):
        x, k, more = 0, 0, True
        while more:
            if p >= len(counts):
                raise ValueError("truncated")
            c = ord(counts[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(out) > 2:
            x += out[-2]
        out.append(x)
    return out


def decode_rle(rle: dict, h: int, w: int, where: str) -> np.ndarray:
    """A COCO RLE (counts as a list of run lengths or a compressed string) as a boolean (H, W)
    mask, checked against the image's size."""
    size, counts = rle.get("size"), rle.get("counts")
    if not isinstance(size, list) or len(size) != 2 or list(size) != [h, w]:
        raise ConfigError(f"{where}: its RLE size {size!r} is not the image's [height, width] "
                          f"[{h}, {w}]")
    try:
        runs = rle_counts(counts) if isinstance(counts, str) else \
            [int(c) for c in counts] if isinstance(counts, list) else None
    except (ValueError, TypeError):
        runs = None
    if runs is None or any(r < 0 for r in runs) or sum(runs) != h * w:
        raise ConfigError(f"{where}: its RLE 'counts' do not describe a {h}x{w} mask (damaged "
                          f"or for another size)")
    values = np.zeros(len(runs), bool)
    values[1::2] = True
    return np.repeat(values, runs).reshape((h, w), order="F")


# -- Pascal VOC ---------------------------------------------------------------------------------
def _list_lines(path: Path) -> list[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: a list holds one image id per line") \
            from None
    lines = [(n, ln.strip()) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not lines:
        raise ConfigError(f"{path} is empty (no images in this split): list the images, one per "
                          f"line")
    return lines


def _voc_items_imagesets(root: Path, list_file: Path) -> list[tuple[Path | None, Path, str]]:
    """(image or None: found from the id, xml, where) of each id of an ImageSets list."""
    items = []
    for n, line in _list_lines(list_file):
        image_id = line.split()[0]
        where = f"{list_file} line {n} ({image_id!r})"
        xml = confined(f"Annotations/{image_id}.xml", root, where=where)
        if not xml.is_file():
            raise ConfigError(f"{where}: its annotation {xml} is missing: add it or drop the id")
        image = next((root / "JPEGImages" / f"{image_id}{s}" for s in VOC_SUFFIXES
                      if (root / "JPEGImages" / f"{image_id}{s}").is_file()), None)
        if image is not None:
            confined(image.relative_to(root), root, where=where)
        items.append((image, xml, where))
    return items


def _voc_items_paddlex(list_file: Path) -> list[tuple[Path | None, Path, str]]:
    items = []
    for n, line in _list_lines(list_file):
        where = f"{list_file} line {n} ({line[:60]!r})"
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError(f"{where} is not '<image path> <annotation path>.xml': PaddleX's "
                              f"VOC lists hold two paths per line")
        image, xml = (confined(p, list_file.parent, where=where) for p in parts)
        if not xml.is_file():
            raise ConfigError(f"{where}: its annotation {xml} is missing: add it or fix the line")
        if not image.is_file():
            raise ConfigError(f"{where}: its image {image} is missing: add it or fix the line")
        items.append((image, xml, where))
    return items


def _voc_lists(src: Path) -> tuple[Path, dict[str, Path], str]:
    """(root, {train/val: list file}, kind) of a VOC source (see the module's rules)."""
    if src.is_file():
        root, kind = src.parent, "paddlex"
        own = "train" if "train" in src.name.lower() else "val"
        other = "val" if own == "train" else "train"
        sibling = src.parent / f"{other}_list.txt"
        return root, {own: src, other: sibling if sibling.is_file() else src}, kind
    main = src / "ImageSets" / "Main"
    if main.is_dir():
        pick = lambda *names: next((main / n for n in names if (main / n).is_file()), None)
        train, val = pick("train.txt", "trainval.txt"), pick("val.txt", "test.txt")
        if train is None and val is None:
            raise ConfigError(f"{main} holds none of train.txt, trainval.txt, val.txt, test.txt: "
                              f"list the image ids of each split there")
        return src, {"train": train or val, "val": val or train}, "imagesets"
    lists = _paddlex_voc_lists(src)
    if not lists:
        raise ConfigError(f"{src} is not a Pascal VOC root: it needs ImageSets/Main/<split>.txt "
                          f"lists (or PaddleX's train_list.txt / val_list.txt)")
    found = {p.name.split("_")[0]: p for p in lists}
    return src, {"train": found.get("train", lists[0]), "val": found.get("val", lists[0])}, \
        "paddlex"


def _labels_txt(*folders: Path) -> Path | None:
    return next((f / "labels.txt" for f in folders if (f / "labels.txt").is_file()), None)


def _plan_voc(src: Path, class_names: list[str] | None) -> _Plan:
    root, lists, kind = _voc_lists(src)
    read = (lambda f: _voc_items_imagesets(root, f)) if kind == "imagesets" else _voc_items_paddlex
    splits = {s: read(f) for s, f in lists.items()}
    labels = None if class_names is not None else _labels_txt(root, src.parent if src.is_file()
                                                              else root.parent)
    inputs = sorted({*lists.values(), *(x for items in splits.values() for _, x, _ in items)})
    if labels is not None:
        inputs.append(labels)
    extra = {"lists": {s: str(f) for s, f in lists.items()},
             "class_names_from": "class_names" if class_names is not None else
             str(labels) if labels is not None else "first seen"}
    layout = [str(image) for items in splits.values() for image, _, _ in items]
    return _Plan("voc", {"lists": lists, "items": splits, "labels": labels}, inputs, extra,
                 layout)


def _text(node: ET.Element, tag: str, where: str) -> str:
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        raise ConfigError(f"{where} has no <{tag}>: each object needs <name> and <bndbox> with "
                          f"<xmin> <ymin> <xmax> <ymax>")
    return child.text.strip()


def _float(node: ET.Element, tag: str, where: str) -> float:
    text = _text(node, tag, where)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise ConfigError(f"{where} has <{tag}>{text[:20]}</{tag}>, not a number")
    return value


def _parse_xml(xml: Path) -> ET.Element:
    try:
        return ET.parse(xml).getroot()
    except ET.ParseError as e:
        line, col = e.position
        raise ConfigError(f"{xml} is not valid XML ({str(e).split(':')[0]} at line {line} "
                          f"column {col}): fix or re-export the annotation") from None


def _voc_size(tree: ET.Element, xml: Path, image: Path) -> tuple[float, float]:
    """The image's size: its ``<size>``, checked against the image file's; the file's own
    when the XML gives none."""
    size, w, h = tree.find("size"), 0.0, 0.0
    with contextlib.suppress(AttributeError, TypeError, ValueError):
        w, h = float(size.find("width").text), float(size.find("height").text)
    if w > 0 and h > 0:  # (NaN is not)
        check_image_size(image, w, h, f"{xml} <size>", "fix <width> and <height> there")
        return w, h
    stored, _ = image_size(image)  # no <size>: the image's own
    return float(stored[0]), float(stored[1])


def _read_voc(plan: _Plan, class_names: list[str] | None, of_model: bool = False
              ) -> tuple[list[str], dict[str, list[_Image] | str]]:
    """The class names and the images of each split; ``class_names`` (the model's names when
    ``of_model``) fixes the class ids, else ``labels.txt``, else the names as first seen."""
    labels: Path | None = plan.splits["labels"]
    names = list(map(str, class_names)) if class_names is not None else \
        read_labels_txt(labels) if labels is not None else None
    fixed = names is not None
    names = names or []
    index = {n: k for k, n in enumerate(names)}
    out: dict[str, list[_Image] | str] = {}
    done: dict[Path, str] = {}
    for split in ("train", "val"):  # first seen: train first
        list_file = plan.splits["lists"][split]
        if list_file in done:
            out[split] = done[list_file]  # the same images as that split
            continue
        images, objects = [], 0
        for image, xml, where in plan.splits["items"][split]:
            tree = _parse_xml(xml)
            if image is None:
                filename = (tree.findtext("filename") or "").strip()
                image = xml.parent.parent / "JPEGImages" / filename
                if not filename or not image.is_file():
                    raise ConfigError(f"{where}: its image is missing (looked for JPEGImages/"
                                      f"{xml.stem}.jpg/.jpeg/.png and <filename> {filename!r}): "
                                      f"add the image")
                confined(f"JPEGImages/{filename}", xml.parent.parent,
                         where=f"{xml} <filename>")
            w, h = _voc_size(tree, xml, image)
            lines = []
            for k, obj in enumerate(tree.iter("object"), 1):
                at = f"{xml} object {k}"
                name = _text(obj, "name", at)
                if name not in index:
                    if fixed:
                        source = "the model" if of_model else "class_names" \
                            if class_names is not None else str(labels)
                        raise ConfigError(f"{at} is a {name!r}, a class {source} does not name "
                                          f"({', '.join(names[:8])}): add it there or fix the "
                                          f"annotation")
                    index[name] = len(names)
                    names.append(name)
                box = obj.find("bndbox")
                if box is None:
                    raise ConfigError(f"{at} ({name!r}) has no <bndbox>")
                x0, y0, x1, y1 = (_float(box, t, f"{at} ({name!r})")
                                  for t in ("xmin", "ymin", "xmax", "ymax"))
                if x1 < x0 or y1 < y0:
                    raise ConfigError(f"{at} ({name!r}) has xmax < xmin or ymax < ymin "
                                      f"({x0:g}, {y0:g}, {x1:g}, {y1:g}): fix the box")
                lines.append(_box_line(index[name], (x0 - 1, y0 - 1, x1, y1), w, h,
                                       f"{at} ({name!r}) box ({x0:g}, {y0:g}, {x1:g}, {y1:g})"))
                objects += 1
            images.append(_Image(image, _safe_name(image.name), lines))
        if objects == 0:
            raise ConfigError(f"{list_file}: its images hold no objects (empty split): annotate "
                              f"objects or pass another list")
        _check_unique(images, str(list_file))
        out[split], done[list_file] = images, split
    return names, out


__all__ = ["DataSource", "FORMATS", "cache_dir_for", "decode_rle", "detect_format", "join_parts",
           "prepare_yolo_data", "rle_counts"]
