"""From a sensitivity table and a target to per-group ratios, written once for the flow and for
``autoprune prune``: a tolerated loss, a share of FLOPs or a share of measured latency (a DEFAULT
profile's points are timed on this machine first)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch.nn as nn

from ..engine.allocate import ratios_by_flops, ratios_by_loss
from ..engine.latency import Timing
from ..engine.store import SensitivityRecord
from .contract import TaskAdapter
from .latency import LatencyTarget, latency_ratios, latency_target, timed_table
from .layout import SIDE_FILE
from .options import check_targets
from .report import analysis_summary
from .sensitivities import allocation_target


@dataclass(frozen=True)
class Targets:
    """What the ratios are chosen for: a tolerated loss per group, a share of FLOPs, or a
    share of measured latency (with ``loss`` then a cap on any group's loss, or None)."""

    loss: float | None = None
    flops: float | None = None
    latency: LatencyTarget | None = None

    @classmethod
    def of(cls, eval_metric_loss: Any, pruned_flops: Any, pruned_latency: Any,
           timing: Timing = Timing()) -> "Targets":
        """The checked targets (one-line ConfigErrors; 0.05 loss when none is given), a latency
        target timed as ``timing`` says."""
        loss = check_targets(eval_metric_loss, pruned_flops, pruned_latency)
        return cls(loss, pruned_flops, latency_target(pruned_latency, timing))

    def describe(self) -> str:
        """The target in words, for logs."""
        if self.latency is not None:
            return f"-{self.latency.value:.0%} latency on {self.latency.device}"
        if self.flops is not None:
            return f"-{self.flops:.0%} FLOPs"
        return f"eval_metric_loss {self.loss}"


def table_for(adapter: TaskAdapter, model: nn.Module, record: SensitivityRecord, path: Path, *,
              targets: Targets, default_profile: bool, save_dir: Path, arch: str | None,
              criterion: Any, progress: bool = True) -> SensitivityRecord:
    """The table the ratios are chosen from: ``record`` as it is, or for a latency target its
    points timed on this machine in the target's setting, on the model as the task deploys it
    (a DEFAULT profile's into ``save_dir/sensitivities_latency.json``, a measured file's into
    itself)."""
    if targets.latency is None:
        return record
    where = Path(save_dir) / SIDE_FILE if default_profile else path
    return timed_table(adapter, model, record, where, targets.latency, arch=arch,
                       criterion=criterion, progress=progress, side_file=default_profile)


def choose_ratios(adapter: TaskAdapter, model: nn.Module, record: SensitivityRecord,
                  targets: Targets, *, round_to: int | None, criterion: Any,
                  save_dir: Path | None = None, resume: bool = False) -> Mapping[str, float]:
    """Per-group ratios meeting ``targets`` on ``record`` (see :class:`Targets`). A latency target
    is measured (kept in ``save_dir/latency_ratios.json`` for a resumed run when ``save_dir`` is
    given); a FLOPs target is met within a point by pruned copies."""
    if targets.latency is not None:
        return latency_ratios(adapter, model, record, targets.latency, save_dir,
                              round_to=round_to, criterion=criterion, max_loss=targets.loss,
                              resume=resume)
    if targets.flops is not None:
        return ratios_by_flops(model, adapter.example_inputs(model), record.sensitivities,
                               targets.flops, round_to=round_to,
                               ignored_layers=adapter.ignored_layers(model))
    return ratios_by_loss(record.sensitivities, targets.loss)


def other_target_note(record: SensitivityRecord, targets: Targets, path: Any) -> str:
    """A line where ``record`` was measured adaptively for another target than ``targets``
    (empty otherwise): it holds the points that target needed, so the ratios read for this one
    may differ from a full analysis's (a loss target's come out no larger); the command that
    completes the file for this target."""
    summary = analysis_summary(record.extra)
    measured = summary.get("adaptive_target") if summary else None
    if not measured:
        return ""
    (kind, value), = measured.items()
    (want, level), = allocation_target(targets).items()
    if kind == want and abs(float(value) - level) < 1e-9:
        return ""
    return (f"[autoprune] note: {path} was measured adaptively for {kind}={value:g} (only the "
            f"points that target needs): read for {want}={level:g}, its ratios may differ from "
            f"a full analysis's; `autoprune sensitivity CHECKPOINT DATA {path} --adaptive "
            f"--target {want}={level:g}` completes it for this target")
