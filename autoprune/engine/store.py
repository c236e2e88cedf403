"""The sensitivity file: a JSON schema, loading, validation and merging, written atomically
(:mod:`autoprune.engine.files`; PaddleSlim pickles are imported by
:mod:`autoprune.engine.paddleslim`).
(over 400 lines: one file format, its schema, validation, loading and merging.)

Layout (format version 1)::

    {"format": "autoprune-sensitivity", "version": 1,
     "model": {"arch": "resnet18", "fingerprint": "1a2b...", "groups": {"conv1": 64, ...},
               "weights_sha256": "..."},
     "metric": {"name": "top1", "baseline": 0.91, "higher_is_better": true},
     "criterion": "l1_norm", "created": "...", "updated": "...", "extra": {...},
     "sensitivities": {"conv1": {"0.10": 0.002, "0.20": 0.011, ...}, ...},
     "latency": {"conv1": {"0.10": {"ratio": 0.97, "latency_ms": 3.12}, ...}, ...}}

Ratio keys are written with two decimals; losses are ``(baseline - metric) / |baseline|`` (sign
flipped for lower-is-better metrics). Files are written to a temporary file and renamed, so a crash
at any moment leaves either the old or the new complete file.

``intervals`` is optional (points an adaptive analysis decided before seeing every image, see
:mod:`autoprune.engine.adaptive`): ``{group: {ratio: {"low", "high", "images", "of", "bound",
...}}}``, the loss interval and the images it rests on; such a point's entry in ``sensitivities``
is its ``high`` (the conservative end: every allocation reads it as at least that harmful).

``latency`` is optional (a table measured with ``sensitivity(..., latency=True)``): for each point
the pruned model's latency over the unpruned model's (``ratio``, timed in pairs) and
``latency_ms`` = ratio x ``extra.latency.baseline_ms``; ``extra.latency`` records where it was
timed (device, threads, batch, input size, torch, hardware). Files without it load as before.
"""
from __future__ import annotations

import datetime as _dt
import glob
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Union

from ..errors import SensitivityFileError
from .files import PathLike, write_text_atomic

FORMAT = "autoprune-sensitivity"
VERSION = 1
Sensitivities = dict[str, dict[float, float]]

_MODEL_KEYS = ("arch", "fingerprint", "groups", "weights_sha256")
_METRIC_KEYS = {"metric_name": "name", "baseline": "baseline",
                "higher_is_better": "higher_is_better"}


def ratio_key(ratio: float) -> float:
    """Ratios are stored rounded to 2 decimals."""
    return round(float(ratio), 2)


def now() -> str:
    """The current UTC time, ISO 8601 to the second (the files' timestamps)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class SensitivityRecord:
    """A sensitivity file in memory: the points plus what they were measured on."""

    sensitivities: Sensitivities = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    metric: dict[str, Any] = field(default_factory=lambda: {"name": "metric", "baseline": None,
                                                            "higher_is_better": True})
    criterion: str = "l1_norm"
    extra: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=now)

    latency: dict[str, dict[float, float]] = field(default_factory=dict)  # pruned / unpruned
    # points decided before every image was seen: {group: {ratio: {"low", "high", ...}}}
    intervals: dict[str, dict[float, dict[str, Any]]] = field(default_factory=dict)

    def set_point(self, group: str, ratio: float, loss: float) -> None:
        """Record a point measured on every image (an interval it had is dropped)."""
        self.sensitivities.setdefault(group, {})[ratio_key(ratio)] = float(loss)
        points = self.intervals.get(group)
        if points is not None:
            points.pop(ratio_key(ratio), None)
            if not points:
                del self.intervals[group]

    def set_interval(self, group: str, ratio: float, interval: Mapping[str, Any]) -> None:
        """Record a point decided on part of the images: its loss interval (``low``, ``high``)
        and how it was bounded; the table holds ``high``."""
        self.sensitivities.setdefault(group, {})[ratio_key(ratio)] = float(interval["high"])
        self.intervals.setdefault(group, {})[ratio_key(ratio)] = dict(interval)

    def is_interval(self, group: str, ratio: float) -> bool:
        """True for a point decided on part of the images (see :meth:`set_interval`)."""
        return ratio_key(ratio) in self.intervals.get(group, {})

    def has_point(self, group: str, ratio: float) -> bool:
        return ratio_key(ratio) in self.sensitivities.get(group, {})

    def set_latency(self, group: str, ratio: float, relative: float) -> None:
        """Record a point's latency as a fraction of the unpruned model's (timed in pairs)."""
        self.latency.setdefault(group, {})[ratio_key(ratio)] = float(relative)

    def has_latency(self, group: str, ratio: float) -> bool:
        return ratio_key(ratio) in self.latency.get(group, {})

    def latency_ms(self) -> dict[str, dict[float, float]]:
        """``{group: {ratio: ms}}``: each point's relative latency x the baseline latency."""
        base = (self.extra.get("latency") or {}).get("baseline_ms")
        if not isinstance(base, (int, float)) or isinstance(base, bool):
            return {}
        return {g: {r: v * base for r, v in pts.items()} for g, pts in self.latency.items()}

    def to_json(self) -> dict[str, Any]:
        out = {
            "format": FORMAT, "version": VERSION,
            "model": self.model, "metric": self.metric, "criterion": self.criterion,
            "created": self.created, "updated": now(), "extra": self.extra,
            "sensitivities": {g: {f"{r:.2f}": loss for r, loss in sorted(points.items())}
                              for g, points in self.sensitivities.items()},
        }
        if self.intervals:
            out["intervals"] = {g: {f"{r:.2f}": info for r, info in sorted(points.items())}
                                for g, points in self.intervals.items()}
        if self.latency:
            ms = self.latency_ms()
            out["latency"] = {g: {f"{r:.2f}": {"ratio": v, "latency_ms": ms.get(g, {}).get(r)}
                                  for r, v in sorted(points.items())}
                              for g, points in self.latency.items()}
        return out


class SensitivityTable(dict):
    """``{group: {ratio: loss}}`` as ``sensitivity(..., latency=True)`` returns it; ``.record``
    is the whole :class:`SensitivityRecord` (metadata and latencies)."""

    record: SensitivityRecord


def write_record(record: SensitivityRecord, path: PathLike) -> Path:
    """Write ``record`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record.to_json(), indent=1, allow_nan=False)
    return write_text_atomic(path, text)


def parse_points(path: Path, raw: Any) -> Sensitivities:
    if not isinstance(raw, Mapping):
        raise SensitivityFileError(f"{path}: 'sensitivities' must map group names to "
                                   f"{{ratio: loss}}; the file is damaged")
    sens: Sensitivities = {}
    for group, points in raw.items():
        if not isinstance(points, Mapping):
            raise SensitivityFileError(f"{path}: group {group!r} must hold {{ratio: loss}}, "
                                       f"not {type(points).__name__}; the file is damaged")
        parsed = {}
        for r, loss in points.items():
            try:
                ratio, value = float(r), float(loss)
            except (TypeError, ValueError):
                raise SensitivityFileError(f"{path}: group {group!r} has a non-numeric point "
                                           f"{r!r}: {loss!r}; the file is damaged") from None
            if not 0.0 < ratio < 1.0 or not math.isfinite(value):
                raise SensitivityFileError(f"{path}: group {group!r} has an invalid point "
                                           f"{r!r}: {loss!r} (ratios lie in (0, 1), "
                                           f"losses are finite)")
            parsed[ratio_key(ratio)] = value
        sens[str(group)] = dict(sorted(parsed.items()))
    return sens


def parse_latency(path: Path, raw: Any) -> dict[str, dict[float, float]]:
    """The ``latency`` section: ``{group: {ratio: {"ratio": pruned / unpruned, ...}}}`` read as
    ``{group: {ratio: pruned / unpruned}}`` (each a finite positive number)."""
    if not isinstance(raw, Mapping):
        raise SensitivityFileError(f"{path}: 'latency' must map group names to points; the file "
                                   f"is damaged (delete the 'latency' section to measure it anew)")
    out: dict[str, dict[float, float]] = {}
    for group, points in raw.items():
        for r, point in (points.items() if isinstance(points, Mapping) else [(None, None)]):
            value = point.get("ratio") if isinstance(point, Mapping) else None
            try:
                ratio, value = float(r), float(value)
            except (TypeError, ValueError):
                ratio = value = math.nan
            if not 0.0 < ratio < 1.0 or not math.isfinite(value) or value <= 0:
                raise SensitivityFileError(f"{path}: group {group!r} has an invalid latency point "
                                           f"{r!r}: {point!r:.60}; the file is damaged (delete "
                                           f"the 'latency' section to measure it anew)")
            out.setdefault(str(group), {})[ratio_key(ratio)] = value
    return out


def parse_intervals(path: Path, raw: Any) -> dict[str, dict[float, dict[str, Any]]]:
    """The ``intervals`` section: per point a mapping with finite ``low`` <= ``high``."""
    out: dict[str, dict[float, dict[str, Any]]] = {}
    for group, points in (raw.items() if isinstance(raw, Mapping) else [(None, None)]):
        for r, info in (points.items() if isinstance(points, Mapping) else [(None, None)]):
            try:
                ratio, low, high = float(r), float(info["low"]), float(info["high"])
            except (TypeError, ValueError, KeyError):
                ratio = low = high = math.nan
            if not 0.0 < ratio < 1.0 or not math.isfinite(low) or not math.isfinite(high) \
                    or low > high:
                raise SensitivityFileError(f"{path}: 'intervals' has an invalid point "
                                           f"{group!r} {r!r}; the file is damaged (delete the "
                                           f"'intervals' section and the points it names)")
            # a bounded evaluation's running state is handed on in memory only (an estimate's
            # pilot, engine/adaptive_pilot.py), never taken from a file
            out.setdefault(str(group), {})[ratio_key(ratio)] = \
                {k: v for k, v in info.items() if k != "state"}
    return out


class _NotJSON(ValueError):
    """A NaN or Infinity in a file: Python's json reads them, but a record holding one could
    not be written back (``allow_nan=False``), so a file holding one is refused as it is read."""


def _not_json(constant: str) -> Any:
    raise _NotJSON(constant)


def read_record(path: PathLike) -> SensitivityRecord:
    """Load and validate a sensitivity file (JSON only; never unpickles)."""
    path = Path(path)
    if not path.is_file():
        raise SensitivityFileError(f"no sensitivity file at {path}: check the path, or compute one "
                                   f"with autoprune.sensitivity(..., sensitivities_file=...)")
    try:
        data = json.loads(path.read_text(), parse_constant=_not_json)
    except _NotJSON as e:
        raise SensitivityFileError(f"{path} holds {e}, which JSON does not allow and autoprune "
                                   f"never writes: the file is damaged (restore a copy, or "
                                   f"delete it to measure it again)") from None
    except UnicodeDecodeError:
        raise SensitivityFileError(f"{path} is not a JSON sensitivity file (binary content; a "
                                   f"PaddleSlim pickle? convert it with import_paddleslim(..., "
                                   f"allow_pickle=True))") from None
    except json.JSONDecodeError as e:
        raise SensitivityFileError(f"{path} is corrupt or truncated ({e.msg} at line {e.lineno}): "
                                   f"delete it to start over, or restore a copy") from None
    except RecursionError:  # e.g. [[[[...]]]] 100,000 deep
        raise SensitivityFileError(f"{path} is not a sensitivity file (JSON nested too deeply "
                                   f"to read): pass a file written by autoprune") from None
    return record_from_json(data, path)


_TEXT, _WHOLE, _MAP, _LIST = (str,), (int,), (Mapping,), (list,)
# the shape of the fields consumers read (section, key, the kinds it may hold besides None)
FIELD_KINDS = (("model", "arch", _TEXT), ("model", "fingerprint", _TEXT),
               ("model", "groups", _MAP), ("model", "weights_sha256", _TEXT),
               ("metric", "name", _TEXT), ("metric", "higher_is_better", (bool,)),
               ("extra", "latency", _MAP), ("extra", "how", _MAP),
               ("extra", "evaluation", _MAP), ("extra", "eval_images", _WHOLE),
               ("extra", "non_finite_points", _LIST), ("extra", "date", _TEXT))
LATENCY_KINDS = {"device": _TEXT, "runtime": _TEXT, "precision": _TEXT, "threads": _WHOLE,
                 "batch": _WHOLE, "baseline_ms": (int, float)}


def check_fields(data: Mapping[str, Any], path: Path) -> None:
    """Refuse a file whose fields that consumers read hold another kind of value (a string
    where ``extra.latency`` holds a mapping, ...): one SensitivityFileError here, where the file
    is read, instead of an AttributeError in whichever consumer reads it first."""
    found = [(f"{section}.{key}", data[section][key], kinds)
             for section, key, kinds in FIELD_KINDS
             if isinstance(data.get(section), Mapping) and key in data[section]]
    latency = (data.get("extra") or {}).get("latency")
    if isinstance(latency, Mapping):
        found += [(f"extra.latency.{k}", latency[k], kinds) for k, kinds in LATENCY_KINDS.items()
                  if k in latency]
    for name, value, kinds in found:
        bad = value is not None and (not isinstance(value, kinds) or (
            isinstance(value, bool) and bool not in kinds) or (
            name == "extra.latency.baseline_ms" and not (math.isfinite(value) and value > 0)))
        if bad:
            raise SensitivityFileError(f"{path}: field {name!r} holds {value!r:.40}, not "
                                       f"{_kind_words(kinds)}; the file is damaged (restore a "
                                       f"copy, or delete it to measure it again)")


def _kind_words(kinds: tuple[type, ...]) -> str:
    words = {str: "a string", int: "a whole number", float: "a number", bool: "true or false",
             Mapping: "a mapping", list: "a list"}
    return " or ".join(words.get(k, k.__name__) for k in kinds)


def record_from_json(data: Any, path: PathLike = "<memory>") -> SensitivityRecord:
    """Validate the JSON form of a sensitivity file and build the record."""
    path = Path(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SensitivityFileError(f"{path} is not an autoprune sensitivity file (no "
                                   f"\"format\": \"{FORMAT}\" field)")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise SensitivityFileError(f"{path} has format version {version!r}; this autoprune reads "
                                   f"version {VERSION}: upgrade autoprune")
    for key, kind in (("model", dict), ("metric", dict), ("extra", dict), ("criterion", str)):
        if key in data and not isinstance(data[key], kind):
            raise SensitivityFileError(f"{path}: field {key!r} must be a {kind.__name__}; "
                                       f"the file is damaged")
    check_fields(data, path)
    record = SensitivityRecord(
        sensitivities=parse_points(path, data.get("sensitivities", {})),
        model=data.get("model", {}), criterion=data.get("criterion", "l1_norm"),
        extra=data.get("extra", {}), created=data.get("created") or now(),
        latency=parse_latency(path, data["latency"]) if "latency" in data else {},
        intervals=parse_intervals(path, data["intervals"]) if "intervals" in data else {})
    record.metric.update(data.get("metric", {}))
    baseline = record.metric.get("baseline")
    if baseline is not None and (isinstance(baseline, bool)
                                 or not isinstance(baseline, (int, float))
                                 or not math.isfinite(baseline) or baseline == 0):
        raise SensitivityFileError(f"{path}: metric baseline {baseline!r} is not a finite non-zero "
                                   f"number; the file is damaged (delete it to start over)")
    return record


def shard_path(path: PathLike, rank: int) -> Path:
    """Where rank ``rank`` of a distributed analysis keeps its own points."""
    path = Path(path)
    return path.with_name(f"{path.name}.rank{rank}.json")


def absorb_shards(record: SensitivityRecord, path: PathLike,
                  check: Callable[[Path, SensitivityRecord], None] | None = None) -> list[Path]:
    """Merge the points of shard files left next to ``path`` (by a distributed run) into
    ``record``; returns the shard files read (delete them once ``record`` is written).
    ``check(shard_file, shard_record)`` sees every shard before any is merged (it raises to
    refuse one)."""
    path = Path(path)
    shards = sorted(path.parent.glob(f"{glob.escape(path.name)}.rank*.json"))
    records = [(shard, read_record(shard)) for shard in shards]
    if check is not None:
        for shard, shard_record in records:
            check(shard, shard_record)
    for _, shard_record in records:
        merge_points(record, shard_record)
    return shards


def merge_points(record: SensitivityRecord, other: SensitivityRecord) -> None:
    """``other``'s points into ``record``: the later wins, but an interval (a point decided on
    part of the images) never replaces a point measured on every image, nor one on more images."""
    for group, points in other.sensitivities.items():
        for ratio, loss in points.items():
            if not other.is_interval(group, ratio):
                record.set_point(group, ratio, loss)
                continue
            new = other.intervals[group][ratio_key(ratio)]
            if record.has_point(group, ratio):
                if not record.is_interval(group, ratio):
                    continue
                if record.intervals[group][ratio_key(ratio)].get("images", 0) > \
                        new.get("images", 0):
                    continue
            record.set_interval(group, ratio, new)


def check_fingerprint(record: SensitivityRecord, path: PathLike, fingerprint: str) -> None:
    """Refuse a record whose group fingerprint differs from the model's ``fingerprint``."""
    stored = record.model.get("fingerprint")
    if stored and stored != fingerprint:
        raise SensitivityFileError(
            f"{path} was made for another model (group fingerprint {stored}, this model has "
            f"{fingerprint}; arch {record.model.get('arch')!r}): pass a new file path")


def load_sensitivities(path: PathLike) -> Sensitivities:
    """The ``{group: {ratio: loss}}`` table of a sensitivity file."""
    return read_record(path).sensitivities


def save_sensitivities(sens: Mapping[str, Mapping[float, float]], path: PathLike,
                       **metadata: Any) -> Path:
    """Write ``sens`` as a sensitivity file (atomically).

    Known metadata keys: ``arch``, ``fingerprint``, ``groups``, ``weights_sha256`` (model),
    ``metric_name``, ``baseline``, ``higher_is_better`` (metric), ``criterion``; any other key is
    kept under ``extra``.
    """
    record = SensitivityRecord()
    for group, points in sens.items():
        for ratio, loss in points.items():
            record.set_point(group, ratio, loss)
    record.sensitivities = parse_points(Path(path), record.sensitivities)
    for key, value in metadata.items():
        if key in _MODEL_KEYS:
            record.model[key] = value
        elif key in _METRIC_KEYS:
            record.metric[_METRIC_KEYS[key]] = value
        elif key == "criterion":
            record.criterion = value
        else:
            record.extra[key] = value
    return write_record(record, path)


def merge_sensitivities(items: Iterable[Union[PathLike, Mapping[str, Mapping[float, float]]]]
                        ) -> Sensitivities:
    """Union of several tables or files; where two give the same (group, ratio), the later wins.

    Files made for models with different group structures (fingerprints) are refused.
    """
    merged: Sensitivities = {}
    fingerprint = None
    for item in items:
        if isinstance(item, Mapping):
            table = item
        else:
            record = read_record(item)
            fp = record.model.get("fingerprint")
            if fp and fingerprint and fp != fingerprint:
                raise SensitivityFileError(f"cannot merge {item}: it was made for another model "
                                           f"(fingerprint {fp} != {fingerprint})")
            fingerprint = fingerprint or fp
            table = record.sensitivities
        for group, points in table.items():
            merged.setdefault(group, {}).update({ratio_key(r): float(v) for r, v in points.items()})
    return {g: dict(sorted(p.items())) for g, p in merged.items()}
