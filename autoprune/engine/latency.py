"""Measured latency of a sensitivity table: each point timed on a real, temporary prune of the
model, paired with the unpruned one (:class:`~autoprune.engine.timer.PairedTimer`), recorded with
the setting it was timed in (a table timed in another setting is refused), resumable and
mergeable. The timer and the setting live in :mod:`autoprune.engine.timer`; the names are public
here too.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping

import torch.nn as nn

from ..errors import ConfigError, SensitivityFileError
from .groups import PruningGraph
from .progress import progress_bar
from .points import pruned_temporarily
from .store import SensitivityRecord, check_fingerprint, read_record, write_record
from .timer import (SAME_SETTING, SETTING_DEFAULTS, PairedTimer,  # noqa: F401 - public here
                    describe, hardware_name, input_shape, latency_setting, paired_reduction,
                    setting_differences, setting_value, timed_inputs)
from .timing import (PRECISIONS, Timing, check_latency_options,  # noqa: F401 - public here too
                     check_precision)


def check_latency_table(record: SensitivityRecord, wanted: Mapping[str, Any], path: Any) -> None:
    """Refuse a table whose latencies were timed in another setting than ``wanted`` (or that
    holds none), naming what differs: its milliseconds say nothing about this device."""
    stored = record.extra.get("latency")
    if not record.latency or not isinstance(stored, Mapping):
        raise SensitivityFileError(f"{path} holds no latency measurements: measure them with "
                                   f"sensitivity(..., latency=True) (CLI: autoprune sensitivity "
                                   f"--latency)")
    differs = setting_differences(stored, wanted)
    if differs:
        raise SensitivityFileError(f"{path} was timed in another setting ({differs}): measure "
                                   f"the latencies again with these settings, into a new file")


def latency_points(record: SensitivityRecord, names: Iterable[str],
                   ratios: Iterable[float]) -> list[tuple[str, float]]:
    """The points of ``names`` x ``ratios`` that have a loss but no latency yet."""
    ratios = list(ratios)
    return [(n, r) for n in names for r in ratios
            if record.has_point(n, r) and not record.has_latency(n, r)]


def measure_point_latencies(model: nn.Module, example_inputs: Any, graph: PruningGraph,
                            record: SensitivityRecord, points: list[tuple[str, float]], *,
                            criterion: str, timing: Timing = Timing(), path: Any = None,
                            write: Callable[[SensitivityRecord], Any] | None = None,
                            progress: bool = True) -> None:
    """Time each of ``points`` (group, ratio) on a real, temporary prune of ``model``, paired with
    the unpruned model, as ``timing`` says, into ``record`` (``record.latency`` and
    ``record.extra["latency"]``); ``write(record)`` after each. A record timed in another
    setting (or runtime) is refused.
    In a runtime other than torch each point's pruned model is exported once (a ratio that
    removes the same channels as one already timed is neither exported nor timed again)."""
    if not points:
        return
    # 9 rounds a point: with 5, single points of mobilenetv3 at 224 px were off by up to 10
    # points, and the allocation picks exactly the over-measured ones
    timer = PairedTimer(model, example_inputs, rounds=9, **timing.kwargs())
    stored = record.extra.get("latency")
    if record.latency and setting_differences(stored, timer.setting):
        check_latency_table(record, timer.setting, path or "the sensitivity file")
    bar = progress_bar(total=len(points), desc="latency", unit="pt",
                       enabled=bool(progress and points))
    seen: dict[tuple[str, tuple[int, ...]], float] = {}
    try:
        for name, ratio in points:
            bar.set_postfix_str(name)
            group = graph.group(name)
            idxs = graph.channels_to_remove(group, ratio, criterion)
            key = (name, tuple(sorted(idxs)))
            if not idxs:
                relative = 1.0
            elif key in seen:  # the same channels as a smaller ratio: the same model
                relative = seen[key]
            else:
                with pruned_temporarily(graph, group, idxs):
                    relative = timer.compare(model)
            seen[key] = relative
            record.set_latency(name, ratio, relative)
            record.extra["latency"] = {**timer.setting, "baseline_ms": timer.baseline_ms}
            bar.update()
            if write is not None:
                write(record)
    finally:
        bar.close()


def measure_latencies(model: nn.Module, example_inputs: Any,
                      table: Mapping[str, Mapping[float, float]], *, path: Any = None,
                      criterion: str = "l1_norm", timing: Timing | Mapping[str, Any] | None = None,
                      ignored_layers: Iterable[Any] = (), arch: str | None = None,
                      progress: bool = True, **former: Any) -> SensitivityRecord:
    """Time every point of ``table`` (``{group: {ratio: loss}}``, e.g. a DEFAULT profile) on this
    machine as ``timing`` says (a :class:`Timing` or a dict of its fields; ``device=``,
    ``runtime=``... as keywords still work): a record holding ``table``'s losses and the
    latencies, kept in the file at ``path`` (resumable: a rerun times only the points still
    missing)."""
    timing = Timing.of(timing, **former)
    graph = PruningGraph(model, example_inputs, ignored_layers)
    graph.check_names(table)
    if path is not None and os.path.exists(path):
        record = read_record(path)
        check_fingerprint(record, path, graph.fingerprint)
        if record.criterion != criterion:
            raise SensitivityFileError(f"{path} was timed with criterion {record.criterion!r}: "
                                       f"pass criterion={record.criterion!r} or delete it")
    else:
        record = SensitivityRecord(model={"arch": arch or type(model).__name__,
                                          "fingerprint": graph.fingerprint,
                                          "groups": {g.name: g.channels for g in graph.groups}},
                                   criterion=criterion)
    record.sensitivities = {g: dict(points) for g, points in table.items()}
    ratios = sorted({r for points in table.values() for r in points})
    write = (lambda rec: write_record(rec, path)) if path is not None else None
    measure_point_latencies(model, example_inputs, graph, record,
                            latency_points(record, list(table), ratios), criterion=criterion,
                            timing=timing, path=path,
                            write=write, progress=progress)
    if write is not None:
        write(record)
    return record


def merge_records(paths: Iterable[Any]) -> SensitivityRecord:
    """Sensitivity files merged, latencies included: losses and latencies are unions where a later
    file wins a shared point; the first file's metadata is kept. Files of another model, or timed
    in another setting, are refused."""
    merged: SensitivityRecord | None = None
    for path in paths:
        record = read_record(path)
        if merged is None:
            merged = record
            continue
        fp = merged.model.get("fingerprint")
        if fp and record.model.get("fingerprint") not in (None, fp):
            raise SensitivityFileError(f"cannot merge {path}: it was made for another model "
                                       f"(fingerprint {record.model.get('fingerprint')} != {fp})")
        for group, points in record.sensitivities.items():
            for ratio, loss in points.items():
                merged.set_point(group, ratio, loss)
        if record.latency:
            if merged.latency:
                differs = setting_differences(merged.extra.get("latency"),
                                              record.extra.get("latency") or {})
                if differs:
                    raise SensitivityFileError(f"cannot merge {path}: its latencies were timed "
                                               f"in another setting ({differs})")
            else:
                merged.extra["latency"] = record.extra.get("latency")
            for group, points in record.latency.items():
                for ratio, relative in points.items():
                    merged.set_latency(group, ratio, relative)
    if merged is None:
        raise ConfigError("no sensitivity files to merge: pass at least one")
    return merged
