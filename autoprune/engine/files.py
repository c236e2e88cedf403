"""Atomic files: every file autoprune writes (sensitivity files, checkpoints, reports, ONNX
files, data caches) goes to a temp file next to it, is flushed to the disk and renamed over the
old one, so that a crash or Ctrl-C at any moment leaves the old file or the new one, complete;
a failed write (full disk, no permission) is one line naming the file; the files autoprune wrote
are read back with one-line errors when damaged."""
from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Union

from ..errors import ConfigError, WriteError

PathLike = Union[str, os.PathLike]


def file_mode() -> int:
    """The mode of an ordinary new file under this process's umask (mkstemp's files are 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: PathLike, write: Callable[[str], None]) -> Path:
    """Write ``path`` atomically: ``write(tmp)`` fills a temp file next to it (named after this
    process's id; temp files of ``path`` that a killed writer left are removed first, see
    :func:`remove_stale_temp_files`), which then replaces ``path``. On any failure the temp
    file is removed and ``path`` is left as it was; a failed write (full disk, no permission)
    is a one-line :class:`WriteError` naming ``path``."""
    path = Path(path)
    tmp = None
    try:
        try:
            remove_stale_temp_files(path)  # a killed writer's leftovers, of this very pattern
        except OSError:
            pass  # one that cannot be removed (another user's) is left
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                   dir=path.parent)
        os.close(fd)
        os.chmod(tmp, file_mode())  # an ordinary file, not mkstemp's owner-only 0600
        write(tmp)
        _fsync(tmp)  # the data is on the disk before the name points at it
        os.replace(tmp, path)
        _fsync(path.parent, folder=True)  # and so is the new name
    except BaseException as e:
        error = _write_error(path, e)  # before the temp file goes: a full disk is still full
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if error is None:
            raise
        raise error from None
    return path


def _fsync(path: PathLike, folder: bool = False) -> None:
    """Flush ``path`` (a file, or a folder's entries) to the disk; a folder that cannot be
    opened for it (some file systems) is left as it is."""
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if folder else 0))
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not folder:
            raise
    finally:
        os.close(fd)


def _write_error(path: Path, e: BaseException) -> WriteError | None:
    """The one-line error of a failed write of ``path``; None for an error that is not one
    (torch.save's stream writer reports a full disk as a RuntimeError, without errno)."""
    try:
        nearly_full = shutil.disk_usage(path.parent).free < 64 * 2 ** 20
    except OSError:
        nearly_full = False
    # torch.save and the ONNX writer report a full disk as a RuntimeError of their own
    torch_write = isinstance(e, RuntimeError) and ("inline_container" in str(e)
                                                   or "PytorchStreamWriter" in str(e)
                                                   or nearly_full)
    if not isinstance(e, OSError) and not torch_write:
        return None
    full = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))  # EDQUOT: over a disk quota
    if getattr(e, "errno", None) in full or (torch_write and nearly_full):
        why, fix = "no space left on the device", "free some disk space, or write elsewhere"
    else:
        why = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [""])[0][:200]
        fix = "check that the folder exists and is writable, or write elsewhere"
    return WriteError(f"could not write {path} ({why}): {fix}, then run again; an earlier "
                      f"{path.name} is left as it was")


def read_json(path: PathLike, fix: str) -> Any:
    """The JSON in a file autoprune wrote (``path``); a file that cannot be read or parsed
    (truncated by a crash, edited) is a one-line ConfigError naming it, followed by ``fix``."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        why = getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{path} is damaged or unreadable ({why[:120]}): {fix}") from None


def write_text_atomic(path: PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`), fsynced."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    return atomic_write(path, write)


def remove_stale_temp_files(path: PathLike) -> None:
    """Delete temp files that a killed writer of ``path`` left behind: those whose process (the
    id in their name) is gone. A live writer's temp file (another analysis of the same file) and
    the file itself are never touched."""
    path = Path(path)
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        parts = tmp.name[len(path.name) + 2:].split(".")  # pid, random, tmp (older: random, tmp)
        if len(parts) == 2 or len(parts) == 3 and not (parts[0].isdigit()
                                                       and _process_alive(int(parts[0]))):
            tmp.unlink(missing_ok=True)  # (more parts: another file's, e.g. a shard's)


def _process_alive(pid: int) -> bool:
    if os.name == "nt" or pid <= 0:  # os.kill(pid, 0) would end it on Windows: keep the file
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, another user's
        return True
    return True
