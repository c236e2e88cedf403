"""Pascal VOC detection sets as YOLO boxes.

A root with ``Annotations/*.xml``, ``JPEGImages/`` (``<id>.jpg``, ``.jpeg`` or ``.png``, else the
XML's ``<filename>``) and ``ImageSets/Main/`` lists: train = ``train.txt``, else
``trainval.txt``; val = ``val.txt``, else ``test.txt``; one list serves as both. PaddleX's VOC
lists work too (:mod:`.paddlex`): ``train_list.txt`` / ``val_list.txt`` of ``<image> <xml>``
lines, or one such list file. Class names: ``class_names`` if given, else ``labels.txt`` (in the
root, beside the list file, or in the root's parent), else the names in the order first seen
(train list then val list, objects in file order). ``difficult`` objects are kept. Boxes are
1-based pixel indices (VOC devkit): pixels ``xmin..xmax`` cover ``[xmin - 1, xmax)``.
"""
from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from ....datasets.formats import read_labels_txt
from ....engine.paths import confined
from ....errors import ConfigError
from .images import check_image_size, image_size
from .labels import box_line, check_unique, safe_name
from .paddlex import list_lines, paddlex_voc_lists, voc_items_paddlex
from .source import LabelledImage, Plan

VOC_SUFFIXES = (".jpg", ".jpeg", ".png", ".JPG", ".JPEG", ".PNG")


def _voc_items_imagesets(root: Path, list_file: Path) -> list[tuple[Path | None, Path, str]]:
    """(image or None: found from the id, xml, where) of each id of an ImageSets list."""
    items = []
    for n, line in list_lines(list_file):
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
    lists = paddlex_voc_lists(src)
    if not lists:
        raise ConfigError(f"{src} is not a Pascal VOC root: it needs ImageSets/Main/<split>.txt "
                          f"lists (or PaddleX's train_list.txt / val_list.txt)")
    found = {p.name.split("_")[0]: p for p in lists}
    return src, {"train": found.get("train", lists[0]), "val": found.get("val", lists[0])}, \
        "paddlex"


def _labels_txt(*folders: Path) -> Path | None:
    return next((f / "labels.txt" for f in folders if (f / "labels.txt").is_file()), None)


def plan_voc(src: Path, class_names: list[str] | None) -> Plan:
    """What a VOC source holds: its lists, each list's items and the class-name file."""
    root, lists, kind = _voc_lists(src)
    read = (lambda f: _voc_items_imagesets(root, f)) if kind == "imagesets" else voc_items_paddlex
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
    return Plan("voc", {"lists": lists, "items": splits, "labels": labels}, inputs, extra,
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


def read_voc(plan: Plan, class_names: list[str] | None, of_model: bool = False
             ) -> tuple[list[str], dict[str, list[LabelledImage] | str]]:
    """The class names and the images of each split; ``class_names`` (the model's names when
    ``of_model``) fixes the class ids, else ``labels.txt``, else the names as first seen."""
    labels: Path | None = plan.splits["labels"]
    names = list(map(str, class_names)) if class_names is not None else \
        read_labels_txt(labels) if labels is not None else None
    fixed = names is not None
    names = names or []
    index = {n: k for k, n in enumerate(names)}
    out: dict[str, list[LabelledImage] | str] = {}
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
                lines.append(box_line(index[name], (x0 - 1, y0 - 1, x1, y1), w, h,
                                      f"{at} ({name!r}) box ({x0:g}, {y0:g}, {x1:g}, {y1:g})"))
                objects += 1
            images.append(LabelledImage(image, safe_name(image.name), lines))
        if objects == 0:
            raise ConfigError(f"{list_file}: its images hold no objects (empty split): annotate "
                              f"objects or pass another list")
        check_unique(images, str(list_file))
        out[split], done[list_file] = images, split
    return names, out


__all__ = ["VOC_SUFFIXES", "plan_voc", "read_voc"]
