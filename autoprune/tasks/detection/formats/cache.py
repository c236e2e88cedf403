"""The conversion cache: where a run converts a source to (:func:`cache_dir_for`), the source's
fingerprint (a cache is reused while it is unchanged), one conversion of a cache at a time
(a lock), and the cache written (image links, label files, data.yaml, then the marker)::

    <cache_dir>/images/<split>/<name>   symlinks to the user's images (hard links, else copies,
                                        where symlinks cannot be made)
    <cache_dir>/labels/<split>/<stem>.txt  YOLO labels (Ultralytics' label path of each link)
    <cache_dir>/data.yaml               path: <cache_dir>, train: images/train, val: images/val
    <cache_dir>/autoprune-data.json     written last: the record and the source's fingerprint
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import yaml

from ....engine.files import write_text_atomic
from ....errors import WriteError
from ..data import label_path
from .source import LabelledImage, Plan

VERSION = 1          # of the conversion: a new version converts cached sets again
MARKER = "autoprune-data.json"


def cache_dir_for(save_dir: str | os.PathLike, path: str | os.PathLike,
                  task: str = "detect") -> Path:
    """``<save_dir>/data_cache/<name>-<hash>``: where a run converts the source ``path`` to."""
    p = Path(path).expanduser().resolve()
    key = hashlib.sha256(f"{p}\n{task}".encode()).hexdigest()[:12]
    name = re.sub(r"[^0-9A-Za-z_.-]+", "_", p.stem)[:40] or "data"
    return Path(save_dir) / "data_cache" / f"{name}-{key}"


def fingerprint(plan: Plan, src: Path, task: str, class_names: list[str] | None,
                 cache: Path) -> str:
    """The conversion's settings, the source's and the cache's paths (data.yaml names the
    cache), where the images are found, and the content (sha256) of every annotation and list
    file: an annotation file edited in place with its mtime kept is converted again."""
    h = hashlib.sha256(json.dumps([VERSION, plan.format, task, class_names, str(src.resolve()),
                                   str(cache.resolve()), plan.layout]).encode())
    for p in plan.inputs:
        h.update(f"{p}\0".encode())
        try:
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            h.update(b"\0missing")
        h.update(b"\n")
    return h.hexdigest()


def links_alive(cache: Path) -> bool:
    """Whether every image link of a converted cache still leads to a file (the user's images
    were not moved or deleted since)."""
    for folder, _, names in os.walk(cache / "images"):
        if not all(os.path.isfile(os.path.join(folder, n)) for n in names):
            return False
    return True


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A failed write into the cache (full disk, no permission) as a one-line WriteError."""
    try:
        yield
    except OSError as e:
        where = e.filename or path
        raise WriteError(f"could not write {where} ({e.strerror or e}): free some disk space or "
                         f"make {path} writable, or pass another save_dir") from None


@contextlib.contextmanager
def locked(cache: Path) -> Iterator[None]:
    """One conversion of a cache at a time (two ranks of a torchrun, two runs): an exclusive lock
    on ``<cache>/.lock`` where the system has ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        yield
        return
    with open(cache / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_marker(cache: Path) -> dict | None:
    try:
        done = json.loads((cache / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) and isinstance(done.get("record"), dict) else None


def _link(target: Path, link: Path) -> str:
    """``link`` -> ``target``: a symlink, else a hard link, else a copy; returns which."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    for how, make in (("symlink", os.symlink), ("hardlink", os.link),
                      ("copy", shutil.copyfile)):
        try:
            make(target, tmp)
        except OSError:
            if how == "copy":
                raise
            continue
        os.replace(tmp, link)
        return how
    raise AssertionError("unreachable")


def write_cache(cache: Path, names: list[str], splits: dict[str, list[LabelledImage] | str],
                 record: dict, fingerprint: str) -> None:
    """Write the links, labels and data.yaml into ``cache`` (emptied first), then the marker.
    Each file goes through a temp file and a rename; everything is synced before the marker."""
    kinds, written = set(), []
    with writing(cache):
        (cache / MARKER).unlink(missing_ok=True)
        (cache / "data.yaml").unlink(missing_ok=True)
        for sub in ("images", "labels"):
            shutil.rmtree(cache / sub, ignore_errors=True)
        for split, images in splits.items():
            for im in images if isinstance(images, list) else []:
                link = cache / "images" / split / im.name
                link.parent.mkdir(parents=True, exist_ok=True)
                kinds.add(_link(im.path.resolve(), link))
                label = label_path(link)
                label.parent.mkdir(parents=True, exist_ok=True)
                tmp = label.with_name(f".{label.name}.{os.getpid()}.tmp")
                tmp.write_text("".join(f"{line}\n" for line in im.lines))
                os.replace(tmp, label)
                written.append(label)
        _sync(written)
    record["images"] = "/".join(sorted(kinds)) or "none"
    entries = {s: f"images/{v if isinstance(v, str) else s}" for s, v in splits.items()}
    data = {"path": str(cache.resolve()), **entries,
            "names": {i: n for i, n in enumerate(names)}}
    write_text_atomic(cache / "data.yaml", yaml.safe_dump(data, sort_keys=False,
                                                          allow_unicode=True))
    write_text_atomic(cache / MARKER, json.dumps({"version": VERSION, "fingerprint": fingerprint,
                                                  "record": record}, indent=1))


def _sync(files: list[Path]) -> None:
    """Everything written reaches the disk before the marker does."""
    if hasattr(os, "sync"):
        os.sync()
        return
    for p in files:
        with open(p, "rb+") as f:
            os.fsync(f.fileno())


__all__ = ["MARKER", "VERSION", "cache_dir_for", "fingerprint", "links_alive", "locked",
           "read_marker", "write_cache", "writing"]
