"""List files: PaddleX's VOC lists (``train_list.txt`` / ``val_list.txt`` of ``<image> <xml>``
lines, paths relative to the list's folder, each confined to it) and the reading of a list
file's lines, which Pascal VOC's ``ImageSets/Main`` lists share."""
from __future__ import annotations

import contextlib
from pathlib import Path

from ....engine.paths import confined
from ....errors import ConfigError


def is_voc_list(path: Path) -> bool:
    """A PaddleX VOC list: its first line is ``<image> <annotation>.xml``."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in path.read_text(encoding="utf-8-sig").splitlines():
            if line.strip():
                return line.split()[-1].lower().endswith(".xml")
    return False


def paddlex_voc_lists(root: Path) -> list[Path]:
    """PaddleX's VOC lists of a root (``train_list.txt``, ``val_list.txt``) that exist."""
    return [root / n for n in ("train_list.txt", "val_list.txt") if (root / n).is_file()]


def list_lines(path: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of each non-blank line of a list file (an empty one refused)."""
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


def voc_items_paddlex(list_file: Path) -> list[tuple[Path | None, Path, str]]:
    """(image, xml, where) of each line of a PaddleX VOC list, both paths confined to the
    list's folder and present."""
    items = []
    for n, line in list_lines(list_file):
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


__all__ = ["is_voc_list", "list_lines", "paddlex_voc_lists", "voc_items_paddlex"]
