"""What Ultralytics prints: its logger silenced on demand, its progress bars drawn once when they
end where stdout is no terminal."""
from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from typing import Iterator

from ...engine.progress import interactive
from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)

from ultralytics.utils import LOGGER  # noqa: E402


@contextlib.contextmanager
def _plain_progress() -> Iterator[None]:
    """Ultralytics' bars, in a log file or a pipe: drawn once, when done (as on a CI console),
    instead of a frame every 0.1 s kept in the log."""
    module = importlib.import_module("ultralytics.utils.tqdm")
    original = getattr(module, "is_noninteractive_console", None)
    if original is None or interactive(sys.stdout):  # where Ultralytics' bars go
        yield
        return
    module.is_noninteractive_console = lambda: True
    try:
        yield
    finally:
        module.is_noninteractive_console = original


def _cache_bar_follows_logger() -> None:
    """Ultralytics' datasets draw a bar while they decode images into memory (``cache="ram"``),
    created with ``disable=False`` (``LOCAL_RANK > 0``), so a silenced logger did not hide it
    as it hides the validator's own bar: from here on it is drawn only while the logger speaks
    (installed once, not swapped per block: validations run in worker threads too)."""
    module = importlib.import_module("ultralytics.data.base")
    original = getattr(module, "TQDM", None)
    if original is None or getattr(original, "follows_logger", False):
        return

    def bar(*args, **kwargs):
        if LOGGER.getEffectiveLevel() > logging.INFO:
            kwargs["disable"] = True
        return original(*args, **kwargs)

    bar.follows_logger = True
    module.TQDM = bar


_cache_bar_follows_logger()


@contextlib.contextmanager
def quiet(enabled: bool = True) -> Iterator[None]:
    """Silence Ultralytics' logger (warnings stay) and its image-caching bar for the duration
    of the block; its progress bars are drawn once when they end if stdout is not a
    terminal."""
    with _plain_progress():
        if not enabled:
            yield
            return
        level = LOGGER.level
        LOGGER.setLevel(logging.WARNING)
        try:
            yield
        finally:
            LOGGER.setLevel(level)


__all__ = ["quiet"]
