"""Paths read from a data file (a COCO ``file_name``, a VOC or PaddleX list line, a CSV row, a
YOLO image list) kept inside the data set they belong to: :func:`confined` resolves one against
its data root, symlinks followed, and refuses a path that leads out of it (``..``, an absolute
path elsewhere, a link to ``/etc/passwd``), so a data set from a stranger can only make autoprune
read files of that data set."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError


def resolved(path: str | os.PathLike) -> Path:
    """``path`` made absolute with every symlink followed (a path that does not exist yet as
    far as it goes)."""
    return Path(os.path.realpath(os.fspath(path)))


def confined(entry: str | os.PathLike, root: str | os.PathLike, *,
             base: str | os.PathLike | None = None, where: str) -> Path:
    """``entry``, a path read from a data file (relative to ``base``, by default ``root``; or
    absolute), as a path inside the data root ``root``. A path that resolves outside ``root``
    (symlinks resolved), or is no path at all, is a one-line ConfigError naming ``where`` (the
    file and line or field it was read from) and the entry. The path is returned as written
    (joined to ``base``), not resolved, so the names it shows stay the user's."""
    text = os.fspath(entry)
    path = Path(text) if Path(text).is_absolute() else Path(base if base is not None else root) \
        / text
    try:
        inside = resolved(root)
        target = resolved(path)
    except (OSError, ValueError, RuntimeError) as e:  # an embedded NUL, a symlink loop
        raise ConfigError(f"{where}: {text!r} is not a usable path ({type(e).__name__}): fix the "
                          f"entry") from None
    if target != inside and inside not in target.parents:
        raise ConfigError(f"{where}: {text!r} leads outside the data root {root} (it resolves "
                          f"to {target}, symlinks followed): a data file may only name files "
                          f"inside its data set; move the file into {root} or fix the entry")
    return path


__all__ = ["confined", "resolved"]
