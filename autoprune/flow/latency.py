"""A latency target in the flow (``pruned_latency=``): the analysis is asked to time its points,
a DEFAULT profile's points are timed on this machine into a side file, the ratios come from
:func:`~autoprune.engine.latency_target.ratios_by_latency` (kept for a resumed run), and the report
states the target and the speed-up measured where the target named."""
from __future__ import annotations

import json
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch.nn as nn

from ..engine.distributed import broadcast, rank_and_world
from ..engine.int8.settings import INT8_ROUND_TO
from ..engine.latency import (Timing, latency_setting, measure_latencies, paired_reduction,
                              setting_differences)
from ..engine.latency_target import LatencyRatios, check_latency_target, ratios_by_latency
from ..engine.files import read_json, write_text_atomic
from ..engine.store import SensitivityRecord, read_record
from ..errors import ConfigError
from .contract import TaskAdapter
from .layout import RATIOS_FILE


@dataclass(frozen=True)
class LatencyTarget:
    """``pruned_latency`` and where it is measured (the run's one :class:`Timing`)."""

    value: float
    timing: Timing = Timing()

    @property
    def device(self) -> str:
        return self.timing.device

    def record(self) -> dict[str, Any]:
        """The target as files and the report keep it: ``value`` and the timing fields."""
        return {"value": self.value, **self.timing.kwargs()}


# round_to when latency is targeted in a deploy runtime and none is given: ONNX Runtime's fast
# (blocked) FP32 convolutions want channel counts in multiples of 8 (unaligned, a -30 % FLOPs
# mobilenetv3 ran 1.7x slower there); its INT8 kernels multiples of 16 (benchmarks/README,
# "INT8: channel alignment")
RUNTIME_ROUND_TO = {"fp32": 8, "int8": INT8_ROUND_TO}


def default_round_to(timing: Timing) -> int | None:
    """The ``round_to`` a latency target in ``timing``'s runtime and precision prunes with when
    none is given (None in torch eager)."""
    if timing.runtime == "torch":
        return None
    return RUNTIME_ROUND_TO[timing.precision]


def latency_target(pruned_latency: Any, timing: Timing = Timing()) -> LatencyTarget | None:
    """The checked latency target (None without ``pruned_latency``)."""
    if pruned_latency is None:
        return None
    value = check_latency_target(pruned_latency)
    device = timing.check()
    return LatencyTarget(value, dataclasses.replace(timing, device=device))


def timed_table(adapter: TaskAdapter, model: nn.Module, table: SensitivityRecord, path: Path,
                target: LatencyTarget, *, arch: str | None, criterion: Any,
                progress: bool = True, side_file: bool = False) -> SensitivityRecord:
    """``table``'s losses with each point's latency timed on this machine in ``target``'s
    setting, on the model as the task deploys it (:meth:`TaskAdapter.deploy_module`), kept in
    the file at ``path`` (resumable: a rerun times only the points still missing). A
    ``side_file`` (a DEFAULT profile's timings) timed for another model or setting is timed
    anew; the sensitivity file itself refuses another setting. Rank 0 times; every rank gets
    the record."""
    path = Path(path)
    deployed = adapter.deploy_module(model)
    example = adapter.example_inputs(deployed)
    if side_file and path.is_file() and rank_and_world()[0] == 0:
        stored = read_record(path)
        wanted = latency_setting(example, **target.timing.kwargs())
        if stored.model.get("fingerprint") != table.model.get("fingerprint") or \
                (stored.latency and setting_differences(stored.extra.get("latency"), wanted)):
            print(f"[autoprune] {path} was timed for another model or setting: timing anew",
                  flush=True)
            path.unlink()

    def measure() -> SensitivityRecord:
        return measure_latencies(deployed, example, table.sensitivities, path=path,
                                 criterion=criterion, arch=arch, progress=progress,
                                 ignored_layers=adapter.ignored_layers(deployed),
                                 timing=target.timing)

    record = _on_rank0(measure)
    record.metric = dict(table.metric)
    return record


def latency_ratios(adapter: TaskAdapter, model: nn.Module, record: SensitivityRecord,
                   target: LatencyTarget, save_dir: Path | None, *, round_to: int | None,
                   criterion: str, max_loss: float | None, resume: bool = False) -> LatencyRatios:
    """:func:`ratios_by_latency` timed by rank 0 alone; the ratios are written to
    ``save_dir/latency_ratios.json`` (none when ``save_dir`` is None) and a resumed run with the
    same target reuses them (timing again could choose other shapes than the interrupted
    retraining has)."""
    path = Path(save_dir) / RATIOS_FILE if save_dir is not None else None
    asked = {"target": target.record(), "round_to": round_to, "criterion": criterion,
             "max_loss": max_loss}
    if resume and path is not None and path.is_file():
        saved = read_json(path, "delete it and run again without resume (the ratios are then "
                                "chosen anew), or restore a copy")
        saved_target = {**Timing().kwargs(), **(saved.get("target") or {})}  # older files
        if {**{k: saved.get(k) for k in asked}, "target": saved_target} == asked:
            try:
                return _restore(saved)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ConfigError(f"{path} is damaged (its ratios or figures cannot be read): "
                                  f"delete it and run again without resume, or restore a "
                                  f"copy") from None

    def choose() -> LatencyRatios:
        deployed = adapter.deploy_module(model)  # timed as the task deploys it
        chosen = ratios_by_latency(deployed, adapter.example_inputs(deployed), record,
                                   target.value, round_to=round_to,
                                   ignored_layers=adapter.ignored_layers(deployed),
                                   criterion=criterion, max_loss=max_loss, timing=target.timing)
        if path is not None:
            write_text_atomic(path, json.dumps({**asked, **figures_of(chosen),
                                                "ratios": dict(chosen)}, indent=1))
        return chosen

    return _on_rank0(choose)


def figures_of(chosen: LatencyRatios) -> dict[str, Any]:
    """What the allocation measured (before retraining), for the report."""
    return {"table_saving": chosen.table_saving, "achieved": chosen.achieved,
            "baseline_ms": chosen.baseline_ms, "pruned_ms": chosen.pruned_ms,
            "loss": chosen.loss, "setting": chosen.setting,
            "method": getattr(chosen, "method", "greedy"),
            "candidates": getattr(chosen, "candidates", {})}


def _restore(saved: dict[str, Any]) -> LatencyRatios:
    chosen = LatencyRatios({str(k): float(v) for k, v in saved["ratios"].items()})
    for key in ("table_saving", "achieved", "baseline_ms", "pruned_ms", "loss"):
        setattr(chosen, key, saved.get(key, saved.get("predicted")))  # its old name
    chosen.target, chosen.setting = saved["target"]["value"], saved["setting"]
    chosen.method = saved.get("method", "greedy")  # files written before there were two
    chosen.candidates = saved.get("candidates", {})
    return chosen


def target_fields(*, eval_metric_loss: float | None, pruned_flops: float | None,
                  target: LatencyTarget | None, baseline: nn.Module, pruned: nn.Module,
                  example_inputs: Any, chosen: Any = None,
                  cpu: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report's ``target`` (``{kind: latency|flops|loss, value}``, with where latency is
    measured) and ``latency_reduction``, timed in pairs where the target names (for a FLOPs or
    loss target: on the CPU, or ``cpu``, a :func:`paired_reduction` already taken there)."""
    if target is not None:
        entry = {"kind": "latency", **target.record()}
        if eval_metric_loss is not None:
            entry["max_loss_per_group"] = eval_metric_loss
    elif pruned_flops is not None:
        entry = {"kind": "flops", "value": pruned_flops}
    else:
        entry = {"kind": "loss", "value": eval_metric_loss}
    if target is None and cpu is not None:
        measured = dict(cpu)
    else:
        timing = target.timing if target is not None else Timing()
        measured = paired_reduction(baseline, pruned, example_inputs, **timing.kwargs())
        measured.update(measured.pop("setting"))
    out = {"target": entry, "latency_reduction": measured.pop("reduction"),
           "latency_measured": measured}
    if isinstance(chosen, LatencyRatios):
        out["latency_allocation"] = figures_of(chosen)
    return out


def check_unused_settings(pruned_latency: Any, timing: Timing, *,
                          switch: str = "pruned_latency", cli: bool = False) -> None:
    """Refuse latency settings given without a latency target (they would be ignored):
    ``timing``'s fields that differ from their defaults; ``switch`` names what turns timing on
    (``--latency`` for `autoprune sensitivity`), ``cli`` names the settings as flags."""
    if pruned_latency is not None:
        return
    for field, value in timing.changed().items():
        name = f"latency_{field}"
        shown = "--" + name.replace("_", "-") if cli else name
        turn_on = switch if cli else f"{switch} (e.g. 0.4)"
        raise ConfigError(f"{shown}={value!r} is given without {switch}: set {turn_on} or "
                          f"leave {shown} out")


def _on_rank0(fn):
    """``fn()`` run by rank 0 alone, its result sent to every rank."""
    return broadcast(fn() if rank_and_world()[0] == 0 else None)
