"""What a conversion reads and returns: :class:`DataSource` (the data set as Ultralytics reads
it), :class:`Plan` (a source before it is read) and :class:`LabelledImage` (one image to write)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
class LabelledImage:
    """One image to write: the user's file, its name under ``images/<split>/``, its label lines."""

    path: Path
    name: str
    lines: list[str]


@dataclass
class Plan:
    """What a source is made of, before it is read: its splits (each: what to read), the files
    whose content makes its fingerprint and where its images are found (``layout``: a moved
    image folder is another source)."""

    format: str
    splits: dict[str, Any]
    inputs: list[Path]
    extra: dict = field(default_factory=dict)
    layout: list[str] = field(default_factory=list)


__all__ = ["DataSource", "LabelledImage", "Plan"]
