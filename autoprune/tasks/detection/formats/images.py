"""An image's size from its header, and an annotation's stated size checked against it."""
from __future__ import annotations

from pathlib import Path

from ....engine.data import image_file
from ....errors import ConfigError


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


__all__ = ["check_image_size", "image_size"]
