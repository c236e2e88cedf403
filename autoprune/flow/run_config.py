"""The run's saved settings, ``save_dir/args.yaml``: what a run records (:func:`run_record`,
written atomically by :func:`save_run_config`) and how ``resume=True`` reads them back
(:func:`read_run_config`, :func:`resumed_settings`: a setting left out is taken from the file, a
recipe setting given with another value is refused in one line naming both values; a renamed run
folder is followed, :func:`follow_folder`)."""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError, ResumeMismatchError
from .fields import flat_fields, to_flat


RUN_CONFIG = "args.yaml"
INPUTS = ("model", "train_data", "eval_data", "data", "encoder")  # what a call names positionally


def plain(value: Any) -> tuple[Any, bool]:
    """``(value as YAML can hold it, True)``: paths as strings, tuples as lists, mappings and
    lists element-wise; ``(a description, False)`` for an object YAML cannot hold (a model, a
    Dataset, a callable)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value, True
    if isinstance(value, os.PathLike):
        return os.fspath(value), True
    if isinstance(value, (list, tuple)):
        items = [plain(v) for v in value]
        return [v for v, _ in items], all(ok for _, ok in items)
    if isinstance(value, Mapping):
        items = {str(k): plain(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, all(ok for _, ok in items.values())
    name = getattr(value, "__name__", None) or type(value).__name__
    return f"<{name}>", False


def run_record(task: str, inputs: Mapping[str, Any], flow: Any,
               own: Any = None) -> dict[str, Any]:
    """What ``args.yaml`` holds: the task, its inputs and every resolved setting (``own``: the
    task's settings, None when the flow was called without the task API); objects YAML cannot
    hold are described and listed under ``objects``."""
    from .._version import __version__

    record: dict[str, Any] = {"task": task}
    objects = []
    own_values = to_flat(own) if dataclasses.is_dataclass(own) else {}
    values = {**dict(inputs), **to_flat(flow), **own_values}
    for key, value in values.items():
        record[key], ok = plain(value)
        if not ok:
            objects.append(key)
    record["objects"] = objects
    record["autoprune"] = __version__
    return record


def save_run_config(save_dir: Path, record: Mapping[str, Any]) -> Path:
    """Write ``save_dir/args.yaml`` (atomically)."""
    import yaml

    from ..engine.files import write_text_atomic

    return write_text_atomic(Path(save_dir) / RUN_CONFIG,
                             yaml.safe_dump(dict(record), sort_keys=False))


def read_run_config(save_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The settings saved in ``save_dir/args.yaml`` (None when there is none); a damaged file is
    a one-line ConfigError."""
    import yaml

    path = Path(save_dir) / RUN_CONFIG
    if not path.is_file():
        return None
    try:
        record = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        why = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise ConfigError(f"{path} is damaged ({why}): restore it, or start over with "
                          f"resume=False") from None
    if not isinstance(record, dict) or not isinstance(record.get("task"), str):
        raise ConfigError(f"{path} is damaged (no 'task:' mapping of settings): restore it, or "
                          f"start over with resume=False")
    return record


def _same(a: Any, b: Any) -> bool:
    a, b = plain(a)[0], plain(b)[0]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return a == b


def free_settings(*classes: type) -> set[str]:
    """The settings a resumed run may change (devices, progress, workers...)."""
    return {s.name for cls in classes for s in flat_fields(cls) if s.metadata.get("free")}


def follow_folder(record: Mapping[str, Any], folder: str | os.PathLike) -> dict[str, Any]:
    """The ``args.yaml`` settings ``record`` of a run resumed in ``folder`` (its folder, maybe
    renamed or moved since): ``save_dir`` is ``folder``, and a setting that named a path inside
    the former save_dir names the same path inside ``folder``."""
    out, old = dict(record), record.get("save_dir")
    before = Path(os.path.normpath(old)).parts if isinstance(old, str) and old else ()
    for key, value in record.items():  # the paths written under the save_dir as written
        parts = Path(os.path.normpath(value)).parts if isinstance(value, str) and value else ()
        if before and parts[:len(before)] == before:
            out[key] = os.fspath(Path(folder, *parts[len(before):]))
    return out


def resumed_settings(task: str, given: Mapping[str, Any], stored: Mapping[str, Any] | None,
                     free: set[str], path: Path) -> dict[str, Any]:
    """The settings of a resumed run: ``given`` (what the call or config names) completed from
    ``stored`` (the run's ``args.yaml``); a setting given with another value than the run
    started with is a one-line ConfigError naming it and both values (``free`` ones may
    change)."""
    if stored is None:
        return dict(given)
    if stored.get("task") != task:
        raise ConfigError(f"{path} holds a {stored.get('task')} run, not {task}: resume it with "
                          f"autoprune.{stored.get('task')}.train or pick another save_dir")
    objects = set(stored.get("objects") or [])
    stored = follow_folder(stored, path.parent)  # a run folder renamed or moved: it follows
    for key, value in given.items():
        if key in free or key in objects or key not in stored or key == "save_dir":
            continue
        if not _same(value, stored[key]):
            raise ResumeMismatchError(
                f"resume=True with {key}={plain(value)[0]!r} but the run in {path.parent} started "
                f"with {key}={stored[key]!r}: resume with {key}={stored[key]!r} (or leave it out: "
                f"it is read from {path.name}), or start over with resume=False")
    missing = sorted(k for k in objects if k not in given)
    if missing:
        raise ConfigError(f"the run in {path.parent} was started with Python objects as "
                          f"{', '.join(missing)}: pass them again to resume it")
    out = {k: v for k, v in stored.items()
           if k not in ("task", "objects", "autoprune") and k not in objects}
    out.update(given)
    return out
