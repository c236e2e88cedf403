"""Where a model's starting weights came from (:class:`Provenance`): the hub id, tag or file and
the file's sha256, recorded in checkpoints and ``report.json``."""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

SOURCES = ("timm", "torchvision", "smp", "ultralytics", "file")


@dataclass
class Provenance:
    """Where starting weights came from; ``asdict(p)`` is what checkpoints and report.json hold.

    ``source``: one of :data:`SOURCES`; ``id``: hub id (``timm/resnet18.a1_in1k``), torchvision
    enum name (``ResNet18_Weights.IMAGENET1K_V1``), Ultralytics asset (``yolov8n.pt``) or the
    path given; ``tag``: the weights' tag or name; ``url``: where it is fetched from, when known;
    ``file``: the local file read; ``sha256``: of that file."""

    source: str
    id: str
    tag: str | None = None
    url: str | None = None
    file: str | None = None
    sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Provenance":
        """The provenance recorded in a checkpoint or report (unknown keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def describe(self) -> str:
        """One line for ``autoprune show`` / report.md."""
        where = f" ({self.url})" if self.url else ""
        digest = f", sha256 {self.sha256[:12]}" if self.sha256 else ""
        return f"{self.source} {self.id}{where}: {self.file}{digest}"


# -- files ---------------------------------------------------------------------------------------
def sha256_of(path: str | os.PathLike) -> str:
    """The sha256 of a file (read in 1 MiB chunks; symlinks followed)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_provenance(path: str | os.PathLike, source: str = "file", id: str | None = None,
                    tag: str | None = None, url: str | None = None) -> Provenance:
    """The provenance of a local weights file (a user's ``pretrain_weights``, by default)."""
    path = Path(path)
    return Provenance(source=source, id=id or str(path), tag=tag, url=url,
                      file=os.path.abspath(path), sha256=sha256_of(path))
