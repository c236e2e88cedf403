"""Ultralytics' offline set-up: importing this module sets the environment *before* Ultralytics is
imported (FIELD_NOTES): ``YOLO_OFFLINE=1``, ``YOLO_AUTOINSTALL=False``, a writable
``YOLO_CONFIG_DIR`` holding matplotlib's DejaVuSans as ``Arial.ttf`` / ``Arial.Unicode.ttf`` so
``check_font`` never downloads, and Ultralytics' analytics off. Nothing here opens a network
connection. Every module of the package that imports Ultralytics imports this one first.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import matplotlib

FONTS = ("Arial.ttf", "Arial.Unicode.ttf")


def _writable_dir(*candidates: Path) -> Path:
    for path in candidates:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".autoprune-write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
            return path
        except OSError:
            continue
    raise OSError("no writable folder for Ultralytics settings: set YOLO_CONFIG_DIR")


def _place_fonts(folder: Path) -> None:
    """Copy matplotlib's DejaVuSans to ``folder`` as the fonts Ultralytics would download."""
    missing = [name for name in FONTS if not (folder / name).is_file()]
    if not missing:
        return
    source = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    folder.mkdir(parents=True, exist_ok=True)
    for name in missing:
        with contextlib.suppress(OSError):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            os.close(fd)
            shutil.copyfile(source, tmp)
            os.replace(tmp, folder / name)


# the user's own YOLO_OFFLINE (None: not set), before autoprune sets it for Ultralytics' import:
# weights the user names are fetched unless this says offline
USER_YOLO_OFFLINE = os.environ.get("YOLO_OFFLINE")


def setup_offline() -> Path:
    """Set the offline environment for Ultralytics (idempotent); returns its settings folder."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_AUTOINSTALL", "False")
    if not os.environ.get("YOLO_CONFIG_DIR"):
        home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        os.environ["YOLO_CONFIG_DIR"] = str(_writable_dir(
            home / "autoprune", Path(tempfile.gettempdir()) / f"autoprune-{os.getuid()}"))
    user_dir = Path(os.environ["YOLO_CONFIG_DIR"]).expanduser() / "Ultralytics"
    _place_fonts(user_dir)
    return user_dir


setup_offline()

import ultralytics  # noqa: E402,F401  (after the offline environment is set)

from ultralytics.utils import USER_CONFIG_DIR  # noqa: E402

_place_fonts(Path(USER_CONFIG_DIR))  # Ultralytics may have been imported before us, elsewhere
with contextlib.suppress(Exception):  # analytics: never on for autoprune runs
    from ultralytics.utils.events import events

    events.enabled = False


__all__ = ["FONTS", "USER_YOLO_OFFLINE", "setup_offline"]
