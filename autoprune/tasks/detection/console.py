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


@contextlib.contextmanager
def _no_cache_bar() -> Iterator[None]:
    """Without the bar Ultralytics' datasets draw while they decode images into memory
    (``cache="ram"``): it is created with ``disable=False`` (``LOCAL_RANK > 0``), so a silenced
    logger does not hide it as it does the validator's own bar."""
    module = importlib.import_module("ultralytics.data.base")
    original = getattr(module, "TQDM", None)
    if original is None:
        yield
        return

    def silent(*args, **kwargs):
        kwargs["disable"] = True
        return original(*args, **kwargs)

    module.TQDM = silent
    try:
        yield
    finally:
        module.TQDM = original


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
            with _no_cache_bar():
                yield
        finally:
            LOGGER.setLevel(level)


__all__ = ["quiet"]
