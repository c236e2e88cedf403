"""Commands' output files: is a path the same file as an input, what kind of file already lies
there, and the refusal to overwrite an input or a file of another kind."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..errors import ConfigError
from .store import FORMAT, PathLike


def same_file(a: PathLike, b: PathLike) -> bool:
    """True when ``a`` and ``b`` name one file: the same path, a symlink or a hard link."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def file_kind(path: PathLike) -> str:
    """What an existing file holds, as a phrase: "a checkpoint", "a sensitivity file", "an ONNX
    model" (told by its name), or "another kind of file"."""
    path = Path(path)
    if path.is_dir():
        return "a folder"
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        head = b""
    if head.startswith(b"PK\x03\x04") and b"data.pkl" in head:  # torch.save's zip archive
        return "a checkpoint"
    if f'"{FORMAT}"'.encode() in head:
        return "a sensitivity file"
    return "an ONNX model" if path.suffix.lower() == ".onnx" else "another kind of file"


def check_output(output: PathLike, inputs: Iterable[PathLike], writes: str,
                 overwrite: bool | None = False) -> Path:
    """Refuse to let a command write ``output`` (it writes ``writes``, a phrase of
    :func:`file_kind`) over one of its ``inputs`` (compared as files: hard links too) or over an
    existing file of another kind, unless ``overwrite``; ``overwrite=None``: the command has no
    ``--overwrite``. A file of the same kind (an earlier output) may be replaced."""
    output = Path(output)
    if overwrite or not output.exists():
        return output
    fix = "choose another path" + ("" if overwrite is None else ", or pass --overwrite to "
                                                                 "replace it")
    for item in inputs:
        if same_file(output, item):
            raise ConfigError(f"output {output} is also the input {item}: {fix}")
    found = file_kind(output)
    if found != writes:
        raise ConfigError(f"output {output} already holds {found} and this command writes "
                          f"{writes}: {fix}")
    return output
