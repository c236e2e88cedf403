"""The sensitivity table of a run: a bundled DEFAULT profile, or a file measured (or completed)
on the adapter's evaluation data; a file made for another model or criterion is refused."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import torch.nn as nn

from ..engine.channels import criterion_name
from ..engine.groups import PruningGraph, group_fingerprint
from ..engine.sensitivity import DEFAULT_RATIOS, sensitivity
from ..engine.store import SensitivityRecord, check_fingerprint, read_record
from ..errors import ConfigError, SensitivityFileError
from .contract import TaskAdapter
from .defaults import find_profile
from .latency import LatencyTarget, timed_table
from .options import check_sensitivity_options, latency_timing, sens_mode


def check_sensitivities_file(adapter: TaskAdapter, model: nn.Module, sensitivities_file: Any,
                             arch: str | None, criterion: str = "l1_norm") -> Path:
    """Resolve ``sensitivities_file`` ("DEFAULT" or a path) and refuse a file or profile made for
    another model or with another ``criterion``, before any time is spent training or measuring."""
    return _checked(adapter, model, sensitivities_file, arch, criterion)[1]


def read_table(adapter: TaskAdapter, model: nn.Module, sensitivities_file: Any,
               arch: str | None, criterion: str = "l1_norm", *, say: bool = True
               ) -> tuple[SensitivityRecord, Path]:
    """The record of an existing file or the DEFAULT profile, checked as
    :func:`check_sensitivities_file` does, and its path; a DEFAULT profile measured on other
    labels (classes, keypoints) comes adopted (:func:`adopt_profile`; ``say``: in one line)."""
    record, path = _checked(adapter, model, sensitivities_file, arch, criterion)
    if record is None:
        return read_record(path), path
    adopted = record.extra.get("adopted")
    if adopted and say:
        widths = sorted({tuple(w) for w in adopted["groups"].values()})
        print(f"[autoprune] the DEFAULT profile for {arch} was measured on other labels, its "
              f"head's label branches "
              f"{', '.join(f'{a} channels wide (this model: {b})' for a, b in widths)}: "
              f"their losses are read ratio for ratio", flush=True)
    return record, path


def _checked(adapter: TaskAdapter, model: nn.Module, sensitivities_file: Any, arch: str | None,
             criterion: str) -> tuple[SensitivityRecord | None, Path]:
    mode = sens_mode(sensitivities_file)
    if mode == "default":
        if arch is None:
            raise ConfigError("sensitivities_file='DEFAULT' needs a model name (e.g. 'resnet18'), "
                              "not a model object of unknown architecture")
        path = find_profile(adapter.task, arch)
    else:
        path = Path(sensitivities_file)
    if mode not in ("default", "existing"):
        return None, path
    record = read_record(path)
    graph = PruningGraph(model, adapter.example_inputs(model), adapter.ignored_layers(model))
    if mode == "default" and record.model.get("fingerprint") != graph.fingerprint:
        record = adopt_profile(record, graph, adapter.label_width_groups(model))
        if record is None:
            raise SensitivityFileError(
                f"the DEFAULT profile for {arch} does not match this model's groups (another "
                f"width, num_classes or a patched layer?): pass sensitivities_file=<new path>")
    check_fingerprint(record, path, graph.fingerprint)
    if record.criterion != criterion_name(criterion):
        raise SensitivityFileError(f"{path} was measured with criterion {record.criterion!r}, "
                                   f"this run prunes by {criterion_name(criterion)!r}: pass "
                                   f"criterion="
                                   f"{record.criterion!r}, or measure a new file")
    return record, path


def adopt_profile(record: SensitivityRecord, graph: PruningGraph,
                  label_groups: set[str]) -> SensitivityRecord | None:
    """``record`` (a DEFAULT profile) for the model of ``graph`` when the two differ only in the
    channel counts of ``label_groups`` (a YOLO head's class branch, as wide as the number of
    classes up to 100; a pose head's keypoint branch): the same groups, members and every other
    count, checked by hashing the model's groups with the profile's counts there. Its losses
    are read as they are, ratio for ratio, and its model section becomes this model's
    (``extra.adopted``: the profile's fingerprint and each widened group's widths, profile's
    and model's); None when anything else differs."""
    stored = record.model.get("groups")
    if not label_groups or not isinstance(stored, Mapping):
        return None
    widths = {g.name: stored.get(g.name) for g in graph.groups if g.name in label_groups}
    if not widths or any(isinstance(w, bool) or not isinstance(w, int)
                         for w in widths.values()):
        return None
    if group_fingerprint(graph.groups, widths) != record.model.get("fingerprint"):
        return None
    channels = {g.name: g.channels for g in graph.groups}
    record.extra["adopted"] = {
        "fingerprint": record.model.get("fingerprint"),
        "groups": {name: [w, channels[name]] for name, w in sorted(widths.items())
                   if w != channels[name]}}
    record.model = {**record.model, "fingerprint": graph.fingerprint, "groups": channels}
    return record


def get_sensitivities(adapter: TaskAdapter, model: nn.Module, sensitivities_file: Any, *,
                      arch: str | None, criterion: str = "l1_norm",
                      ratios: Iterable[float] = DEFAULT_RATIOS, progress: bool = True,
                      options: Mapping[str, Any] | None = None,
                      target: Mapping[str, float] | None = None
                      ) -> tuple[SensitivityRecord, Path]:
    """The sensitivity record for ``model`` and its file: the DEFAULT profile, or a file
    completed on the adapter's evaluation data (only missing points are computed).
    ``target`` (``{"loss": 0.05}``, ``{"flops": 0.5}`` or ``{"latency": 0.4}``: the run's
    allocation target) tells an adaptive analysis (``options={"adaptive": True}``) where to
    measure, unless ``options`` names its own ``target``."""
    if sens_mode(sensitivities_file) == "default":
        return read_table(adapter, model, sensitivities_file, arch, criterion, say=progress)
    path = check_sensitivities_file(adapter, model, sensitivities_file, arch, criterion)
    options = check_sensitivity_options(options)
    subset = options.pop("eval_images", None)
    timing = {k: options.pop(k) for k in list(options) if k.startswith("latency")}
    if options.get("adaptive") and options.get("target") is None and target:
        options["target"] = dict(target)
    measure_on = adapter.with_eval_limit(subset) if subset else adapter
    sensitivity(model, adapter.example_inputs(model), TaskEval(measure_on), ratios=ratios,
                sensitivities_file=path, criterion=criterion,
                ignored_layers=adapter.ignored_layers(model),
                higher_is_better=adapter.higher_is_better, metric_name=adapter.metric,
                arch=arch, extra={"task": adapter.task, "eval_images": _eval_size(measure_on)},
                options=options, progress=progress)
    if options.get("plan"):  # a dry run: the estimate was printed, nothing was measured
        return (read_record(path) if path.is_file() else SensitivityRecord()), path
    # the record as written (every rank reads it after the analysis' last barrier)
    record = read_record(path)
    if timing.get("latency"):  # each point timed too, on the model as the task deploys it
        setting = LatencyTarget(0.0, latency_timing(timing))
        record = timed_table(adapter, model, record, path, setting, arch=arch,
                             criterion=criterion, progress=progress)
    return record, path


def allocation_target(targets: Any) -> dict[str, float]:
    """The target an adaptive analysis measures for, from a run's targets (``.loss``,
    ``.flops``, ``.latency`` with its ``.value``): ``{"latency": 0.4}``, ``{"flops": 0.5}`` or
    ``{"loss": 0.05}``."""
    latency = getattr(targets, "latency", None)
    if latency is not None:
        return {"latency": float(latency.value)}
    if getattr(targets, "flops", None) is not None:
        return {"flops": float(targets.flops)}
    return {"loss": float(getattr(targets, "loss", None) or 0.05)}


class TaskEval:
    """The adapter's metric as the analysis' eval function: ``eval(model)`` is
    ``adapter.evaluate(model)[adapter.metric]``; ``images`` how many it evaluates; and, where the
    adapter has one (``incremental_eval()``), an evaluation that reports image by image, for
    the adaptive analysis's early stop (:mod:`autoprune.engine.incremental`)."""

    def __init__(self, adapter: TaskAdapter):
        self.adapter, self.images = adapter, _eval_size(adapter)
        # its evaluation folds the BatchNorms itself, on a copy (engine/incremental.py)
        self.folds_batchnorm = bool(adapter.folds_batchnorm)
        steps = adapter.incremental_eval()  # None: the adapter reports the full set only
        if steps is not None:
            self.incremental = steps.incremental
            self.random_order = bool(getattr(steps, "random_order", False))
            self.resumable = bool(getattr(steps, "resumable", False))

    def __call__(self, model: nn.Module) -> float:
        return self.adapter.evaluate(model)[self.adapter.metric]


def _eval_size(adapter: TaskAdapter) -> int | None:
    """How many evaluation samples the sensitivities are measured on (recorded in the file)."""
    try:
        return len(adapter.eval_set)
    except TypeError:
        return None
