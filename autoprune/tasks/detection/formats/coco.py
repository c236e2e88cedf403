"""COCO detection sets as YOLO labels.

A root holding ``annotations/instances_<split>.json`` (or the ``annotations`` folder, or one
JSON file). The file whose split name holds "train" is the train split, the one holding "val"
the val split; a single file serves as both. Given one JSON file, it is the val split (or the
train split when its name holds "train") and the other split is its sibling
``instances_*train*.json`` / ``instances_*val*.json`` when there is one, else the same file.
Images are found in ``<root>/<split>/``, ``<root>/images/<split>/``, ``<root>/images/``,
``<root>/`` (``file_name`` may hold sub-folders, confined to the root). Class ids: category ids
sorted -> 0..N-1, names from ``categories`` (or mapped by name to a model's). Crowd annotations
(``iscrowd: 1``) are skipped as Ultralytics' converter and COCO's evaluation do; boxes of zero
width or height are skipped (both counted in ``record["skipped"]``). Each other object is
written by the task's :class:`~.labels.LabelKind` (a box, unless the kind writes its own line).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ....engine.paths import confined
from ....errors import ConfigError
from .images import check_image_size
from .labels import LabelKind, box_line, check_unique, safe_name
from .source import LabelledImage, Plan


def coco_jsons(folder: Path) -> list[Path]:
    """The ``instances_*.json`` files of a COCO root (in ``annotations/``, else the folder)."""
    for d in (folder / "annotations", folder):
        found = sorted(d.glob("instances_*.json")) if d.is_dir() else []
        if found:
            return found
    return []


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


def plan_coco(src: Path) -> Plan:
    """Which JSON file is the train split and which the val split (see the module's rules)."""
    if src.is_file():
        own = _split_of(src).lower()
        siblings = [f for f in sorted(src.parent.glob("instances_*.json")) if f != src]
        if "train" in own:
            train, val = src, _pick(siblings, "val", src.parent) or src
        else:
            val, train = src, _pick(siblings, "train", src.parent) or src
    else:
        files = coco_jsons(src)
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
    return Plan("coco", splits, sorted({train, val}),
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


def number(value: Any) -> bool:
    """A finite int or float (not a bool): a coordinate as JSON can hold it."""
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


def read_coco(plan: Plan, kind: LabelKind, order: list[str] | None = None
              ) -> tuple[list[str], dict[str, list[LabelledImage] | str]]:
    """The class names and the images of each split, their lines written as ``kind`` writes
    them; ``order``: the model's class names, the categories mapped to them by name."""
    files: dict[str, Path] = plan.splits
    out: dict[str, list[LabelledImage] | str] = {}
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
        out[split] = _coco_split(data, path, _split_of(path), cats, kind, plan.extra, index)
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
            if not number(im.get(key)) or im[key] <= 0:
                raise ConfigError(f"{path}: images[{i}] (id {im['id']}) has '{key}': "
                                  f"{im.get(key)!r}, not a positive number of pixels")
        if not isinstance(im.get("file_name"), str) or not im["file_name"]:
            raise ConfigError(f"{path}: images[{i}] (id {im['id']}) has no 'file_name'")
        if im["id"] in out:
            raise ConfigError(f"{path}: images[{i}] repeats image id {im['id']}")
        out[im["id"]] = im
    return out


def _coco_split(data: dict, path: Path, split: str, cats: dict[Any, str], kind: LabelKind,
                record: dict, index: dict[Any, int] | None = None) -> list[LabelledImage]:
    """The images of one COCO file with their label lines (class ids from ``index``, by
    default the categories in id order; each line as ``kind`` writes it); counts what was
    skipped (crowd objects, boxes of no area) or stood in for (``box_as_polygon``: an object
    without a segmentation written as its box's outline, by a kind that writes outlines) in
    ``record``."""
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
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(map(number, bbox)) \
                or bbox[2] < 0 or bbox[3] < 0:
            raise ConfigError(f"{where} has bbox {str(bbox)[:60]}: a box is [x, y, width, "
                              f"height] in pixels, width and height >= 0")
        x, y, bw, bh = (float(v) for v in bbox)
        box = (x, y, x + bw, y + bh)
        line = box_line(index[a["category_id"]], box, w, h, f"{where} bbox {bbox}")
        if bw <= 0 or bh <= 0:
            counts["empty_box"] += 1  # Ultralytics' converter skips them too
            continue
        if kind.object_line is not None:
            line = kind.object_line(index[a["category_id"]], a, box, w, h, where, counts)
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
        out.append(LabelledImage(found, safe_name(im["file_name"]), lines[image_id]))
    check_unique(out, str(path))
    return out


__all__ = ["coco_jsons", "number", "plan_coco", "read_coco"]
