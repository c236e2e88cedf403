"""The analysis's file: opened or resumed and checked against this model, its weights, criterion
and evaluation (shards a killed distributed run left merged in), the points still missing, and the
session's end: its counts added, every rank's points merged, the points timed when asked."""
from __future__ import annotations

import hashlib
import numbers
import os
from typing import Any, Callable, Mapping

import torch
import torch.nn as nn

from ..errors import SensitivityFileError
from .channels import criterion_name
from .distributed import barrier, gather, rank_and_world
from .files import remove_stale_temp_files
from .groups import PruningGraph
from .store import (Sensitivities, SensitivityRecord, SensitivityTable, absorb_shards,
                    check_fingerprint, merge_points, read_record, shard_path, write_record)


def weights_sha256(model: nn.Module) -> str:
    """A hash of every parameter and buffer (names, shapes and bytes)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def open_record(path, graph: PruningGraph, *, arch, criterion, higher_is_better,
                metric_name, weights: str, extra: Mapping[str, Any]) -> SensitivityRecord:
    """The record to fill: the file at ``path`` if it exists (checked against this model), else new.

    Points that a killed distributed run left in shard files are merged in (and saved), once each
    shard is checked to come from an analysis of this model, weights and evaluation.
    """
    groups = {g.name: g.channels for g in graph.groups}
    model_meta = {"arch": arch, "fingerprint": graph.fingerprint, "groups": groups}
    if path is not None:
        remove_stale_temp_files(path)
    if path is None or not os.path.exists(path):
        record = SensitivityRecord(model=model_meta, criterion=criterion_name(criterion),
                                   metric={"name": metric_name, "baseline": None,
                                           "higher_is_better": higher_is_better})
    else:
        record = read_record(path)
        check_fingerprint(record, path, graph.fingerprint)
        if record.criterion != criterion_name(criterion):
            raise SensitivityFileError(f"{path} was measured with criterion {record.criterion!r}: "
                                       f"pass criterion={record.criterion!r} or a new file path")
        if bool(record.metric.get("higher_is_better", True)) != bool(higher_is_better):
            raise SensitivityFileError(f"{path} was measured with higher_is_better="
                                       f"{record.metric.get('higher_is_better')}: pass the same, "
                                       f"or a new file path")
        record.model = {**record.model, **model_meta, "arch": record.model.get("arch") or arch}
    if path is not None:
        def check(shard_file, shard: SensitivityRecord) -> None:
            _check_shard(shard_file, shard, fingerprint=graph.fingerprint, criterion=criterion,
                         higher_is_better=higher_is_better, weights=weights, extra=extra)

        shards = absorb_shards(record, path, check)
        if shards:
            write_record(record, path)
            for shard_file in shards:
                shard_file.unlink(missing_ok=True)
    return record


def _check_shard(shard_file, shard: SensitivityRecord, *, fingerprint: str, criterion: str,
                 higher_is_better: bool, weights: str, extra: Mapping[str, Any]) -> None:
    """Refuse a shard file that another analysis (model, weights, criterion, evaluation) left."""
    stored_weights, images = shard.model.get("weights_sha256"), shard.extra.get("eval_images")
    if shard.model.get("fingerprint") and shard.model["fingerprint"] != fingerprint:
        differs = f"group fingerprint {shard.model['fingerprint']}, this model has {fingerprint}"
    elif shard.criterion != criterion_name(criterion):
        differs = f"criterion {shard.criterion!r}, this run uses {criterion_name(criterion)!r}"
    elif bool(shard.metric.get("higher_is_better", True)) != bool(higher_is_better):
        differs = f"higher_is_better={shard.metric.get('higher_is_better')}, this run " \
                  f"{higher_is_better}"
    elif stored_weights and weights and stored_weights != weights:
        differs = "other weights of this model"
    elif images is not None and extra.get("eval_images") is not None and \
            images != extra.get("eval_images"):
        differs = f"{images} evaluation images, this run has {extra.get('eval_images')}"
    else:
        return
    raise SensitivityFileError(f"{shard_file} was left by another analysis ({differs}): delete "
                               f"{shard_file} to start over")


def stopped_early(record: SensitivityRecord, group: str, ratio: float, cap: float | None) -> bool:
    """True when a smaller ratio of ``group`` already lost more than ``cap``."""
    if cap is None:
        return False
    return any(r < ratio and loss > cap for r, loss in record.sensitivities.get(group, {}).items())


def check_weights(record: SensitivityRecord, weights: str, path) -> None:
    """Record ``weights`` (their hash) in the file; a file with points of other weights is
    refused, one with only their baseline has it measured again."""
    stored = record.model.get("weights_sha256")
    if stored and stored != weights:
        if record.sensitivities:
            raise SensitivityFileError(
                f"{path} was measured on other weights of this model: finishing it would mix "
                f"two models; pass a new file path (or delete the old one)")
        record.metric["baseline"] = None  # only a baseline of the other weights: measure anew
    record.model["weights_sha256"] = weights


def check_same_evaluation(record: SensitivityRecord, extra: Mapping[str, Any],
                          path: Any) -> None:
    """Refuse to add points to a file measured on another number of evaluation images (its
    baseline and points would not compare with the new ones); a file with no points yet only
    has its baseline measured again."""
    before, now = record.extra.get("eval_images"), extra.get("eval_images")
    if before is None or now is None or before == now:
        return
    if not record.sensitivities:
        record.metric["baseline"] = None  # only a baseline of the other images: measure anew
    else:
        raise SensitivityFileError(
            f"{path} was measured on {before} evaluation images, this run has {now}: finishing "
            f"it would mix two evaluations; use the same eval_limit / eval_images, or a new file")


def missing_points(record: SensitivityRecord, names: list[str], ratios: list[float],
                   early_stop: float | None) -> list[tuple[str, float]]:
    """The points still to measure: not in ``record`` (or only as an adaptive analysis's
    interval: a full analysis measures it on every image), and not skipped by an early stop."""
    return [(n, r) for n in names for r in ratios
            if (not record.has_point(n, r) or record.is_interval(n, r))
            and not stopped_early(record, n, r, early_stop)]


# what each session and rank adds up in ``extra["evaluation"]``
COUNTERS = ("images_evaluated", "evaluations", "decided_early")


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def add_counts(before: Any, now: dict[str, Any]) -> dict[str, Any]:
    """This session's ``extra["evaluation"]`` added to the stored one: point counts summed,
    unmaskable groups joined, the other keys this session's."""
    if not isinstance(before, Mapping):
        return now
    out = {**before, **now}
    old, new = before.get("points"), now.get("points")
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out["points"] = {**old, **{k: old[k] + v if _number(old.get(k)) and _number(v) else v
                                   for k, v in new.items()}}
    old, new = before.get("unmaskable_groups"), now.get("unmaskable_groups")
    if isinstance(old, list) and isinstance(new, list):
        out["unmaskable_groups"] = old + [g for g in new if g not in old]
    for key in COUNTERS:  # counted over every session and rank
        if _number(before.get(key)) and _number(now.get(key)):
            out[key] = before[key] + now[key]
    return out


def note_non_finite(extra: dict[str, Any], points: list[str]) -> None:
    """Note in ``extra["non_finite_points"]`` the points whose metric was NaN or infinite."""
    noted = extra.get("non_finite_points")
    noted = list(noted) if isinstance(noted, list) else []
    new = [p for p in points if p not in noted]
    if new:
        extra["non_finite_points"] = noted + new


def table_of(record: SensitivityRecord, names: list[str], ratios: list[float]) -> Sensitivities:
    return {n: {r: record.sensitivities[n][r] for r in ratios
                if r in record.sensitivities.get(n, {})} for n in names}


def finish(record: SensitivityRecord, summary: dict[str, Any] | None, path: Any,
           names: list[str], ratios: list[float], *,
           time_points: Callable[[SensitivityRecord], None] | None = None,
           own: SensitivityRecord | None = None, non_finite: list[str] = ()) -> Sensitivities:
    """This session's counts into the file, every rank's points merged (rank 0 writes the file
    and removes the shards), the points timed by ``time_points`` (rank 0) when the analysis
    times them; the table of ``names`` x ``ratios`` (a :class:`SensitivityTable` holding the
    record when timed)."""
    rank, world = rank_and_world()
    own = own if own is not None else SensitivityRecord(extra=record.extra)
    target = path if rank == 0 else (shard_path(path, rank) if path is not None else None)
    if summary:
        record.extra["evaluation"] = add_counts(record.extra.get("evaluation"), summary)
        if target is not None:
            write_record(record if rank == 0 else own, target)

    if world > 1:
        for r, (points, intervals, counts, bad) in enumerate(
                gather((own.sensitivities, own.intervals, summary, list(non_finite)))):
            merge_points(record, SensitivityRecord(sensitivities=points, intervals=intervals))
            if r != rank and counts:  # this rank's own counts are in already
                record.extra["evaluation"] = add_counts(record.extra.get("evaluation"), counts)
            note_non_finite(record.extra, bad)
        if rank == 0 and path is not None:
            write_record(record, path)
            for r in range(1, world):
                shard_path(path, r).unlink(missing_ok=True)
        barrier()
    if time_points is not None and rank == 0:
        time_points(record)
    if time_points is not None and world > 1:
        barrier()
    table = table_of(record, names, ratios)
    if time_points is None:
        return table
    timed = SensitivityTable(table)
    timed.record = record
    return timed
