"""Progress: a tqdm bar on a terminal (with its ETA); in a log file or a pipe, a plain line per
finished part (a group of the sensitivity analysis, a whole bar), with the ETA at the rate so far,
instead of a bar redrawn at every update, which would keep every frame in the log."""
from __future__ import annotations

import sys
import time
from typing import Any, Iterable, TextIO

from tqdm.auto import tqdm


def interactive(stream: TextIO | None = None) -> bool:
    """True when ``stream`` (default: stderr, where the bars go) is a terminal, or in a
    notebook."""
    if "ipykernel" in sys.modules:  # a notebook: tqdm.auto draws a widget, updated in place
        return True
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or not a real stream
        return False


class PlainProgress:
    """What a bar says, as plain lines: one when the part named by ``set_postfix_str`` changes
    (the previous part is done) and one when it closes. The same calls as a tqdm bar."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None,
                 desc: str = "", unit: str = "it", stream: TextIO | None = None):
        self.iterable, self.desc, self.unit = iterable, desc, unit
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__")
                                                      else None)
        self.n, self.part, self.closed = 0, None, False
        self.stream = stream
        self.start = time.monotonic()

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def _line(self, what: str) -> None:
        total = f"/{self.total}" if self.total is not None else ""
        elapsed = time.monotonic() - self.start
        left = remaining(elapsed, self.n, self.total)
        eta = f", ETA {duration(left)}" if left is not None and not self.closed else ""
        print(f"{self.desc}: {self.n}{total} {self.unit} {what} ({elapsed:.0f} s{eta})",
              file=self.stream if self.stream is not None else sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        if self.part is not None and text != self.part:
            self._line(f"after {self.part}")
        self.part = text

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._line("done")


def remaining(elapsed: float, done: float, total: float | None) -> float | None:
    """Seconds left at the rate so far (None before any progress or without a total)."""
    if total is None or done <= 0 or done >= total:
        return None
    return elapsed / done * (total - done)


def duration(seconds: float) -> str:
    """``1 h 05 min``, ``4 min 10 s`` or ``12 s``."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{seconds:.0f} s"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 epoch``, ``2 epochs``, ``1,234 images``, ``3 batches`` (``plural``: the noun's own
    plural where it is not ``noun + "s"``): a count and its noun in agreement (a count that is
    not a whole number, e.g. read from a damaged file, is shown as it is)."""
    shown = f"{count:,}" if isinstance(count, int) else str(count)
    return f"{shown} {noun if count == 1 else plural or noun + 's'}"


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", enabled: bool = True, lines: bool = True, **tqdm_options: Any):
    """A tqdm bar when stderr is a terminal; otherwise a :class:`PlainProgress` (``lines=False``:
    nothing, for a caller that prints its own line per part, e.g. per epoch). ``enabled=False``:
    nothing at all."""
    if enabled and interactive():
        return tqdm(iterable, total=total, desc=desc, unit=unit, dynamic_ncols=True,
                    **tqdm_options)
    if enabled and lines:
        return PlainProgress(iterable, total=total, desc=desc, unit=unit)
    return tqdm(iterable, total=total, disable=True)
