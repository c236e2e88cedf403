"""Checks of the task APIs' arguments, made before any time is spent training or measuring:
targets, save folder, inputs that the run would overwrite, sensitivity options."""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Mapping

from ..engine.distributed import process_rank
from ..errors import ConfigError
from . import config
from .config import check_numbers
from .config import sensitivity_mode as sens_mode  # noqa: F401 (re-exported)
from .layout import STAGE_FILES, STEP_PREFIX, training_stages
from ..engine.timing import Timing
from ..engine.latency_target import check_latency_target
from ..engine.sensitivity import check_analysis_options


def check_save_dir(save_dir: str | os.PathLike) -> Path:
    """Create ``save_dir`` and make sure it is writable (a clear error otherwise); under torchrun
    rank 0 alone, the one process that writes there."""
    path = Path(save_dir)
    if process_rank() != 0:
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".autoprune-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"save_dir {path} is not writable ({e.strerror}): choose another "
                          f"folder") from None
    return path


def check_outputs(folders: list[Path], files: list[Path]) -> None:
    """Refuse, before any work, an output path taken by the wrong kind of thing: a folder where a
    file is written (``report.json/``), or a file where a stage folder goes (rank 0 alone)."""
    if process_rank() != 0:
        return
    for folder in folders:
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{folder} is a file, and this run writes a folder there: move it "
                              f"away or pick another save_dir")
    for path in files:
        if path.is_dir():
            raise ConfigError(f"{path} is a folder, and this run writes a file there: move it "
                              f"away or pick another save_dir")


def written_by_run(path: Path, save_dir: Path, mode: str,
                   stage_files: tuple[str, ...] = ()) -> bool:
    """True when ``path``, given as ``pretrain_weights``, is a file that the run into
    ``save_dir`` writes or may replace: a ``best.pt`` / ``last.pt`` / ``train_state.pt`` or
    anything in the task's ``stage_files`` (detection's ``ultralytics/``) of a stage it trains
    (plain training ``baseline/``; pruning a given model ``pruned/`` and prune_steps'
    ``pruned_step<k>/``, see :mod:`autoprune.flow.layout`)."""
    stages = training_stages(save_dir, mode, pretrain_weights=path)
    src = path.resolve()
    for parent in src.parents:  # prune_steps' stages before the last
        if mode != "none" and parent.name.startswith(STEP_PREFIX) and \
                parent.parent == save_dir.resolve():
            stages.append(parent)
    for stage in (s.resolve() for s in stages):
        if src.parent == stage and src.name in STAGE_FILES:
            return True
        if any(src.is_relative_to(stage / name) for name in stage_files):
            return True
    return False


def names_a_missing_file(model: Any) -> bool:
    """A path object, or a string ending in .pt / .pth, that is not a file."""
    if isinstance(model, os.PathLike) or (isinstance(model, str) and
                                          model.lower().endswith((".pt", ".pth"))):
        return not Path(model).is_file()
    return False


def check_targets(eval_metric_loss: float | None, pruned_flops: float | None,
                  pruned_latency: float | None = None) -> float | None:
    """Refuse a target out of range, or two given; returns the eval_metric_loss to prune by
    (None with pruned_flops, 0.05 when no target is given; with ``pruned_latency`` the given
    eval_metric_loss, a cap on any group's loss, or None)."""
    if pruned_latency is not None:
        if pruned_flops is not None:
            raise ConfigError(f"pruned_flops={pruned_flops!r} and pruned_latency="
                              f"{pruned_latency!r} are both given: pass only one (a share of "
                              f"FLOPs or of measured latency to remove)")
        check_latency_target(pruned_latency)
        return None if eval_metric_loss is None else check_targets(eval_metric_loss, None)
    if eval_metric_loss is not None and pruned_flops is not None:
        raise ConfigError(f"eval_metric_loss={eval_metric_loss!r} and pruned_flops="
                          f"{pruned_flops!r} are both given: pass only one (a tolerated loss "
                          f"per group, or a share of FLOPs to remove)")
    if pruned_flops is None and eval_metric_loss is None:
        eval_metric_loss = 0.05
    if pruned_flops is not None:
        if isinstance(pruned_flops, bool) or not isinstance(pruned_flops, (int, float)) \
                or not 0 < pruned_flops < 1:
            raise ConfigError(f"pruned_flops={pruned_flops!r} is outside (0, 1): pass the "
                              f"fraction of FLOPs to remove, e.g. 0.4")
    elif eval_metric_loss is None or isinstance(eval_metric_loss, bool) \
            or not isinstance(eval_metric_loss, (int, float)) \
            or not math.isfinite(eval_metric_loss) or not 0 < eval_metric_loss < 1:
        raise ConfigError(f"eval_metric_loss={eval_metric_loss!r} is outside (0, 1): pass the "
                          f"tolerated relative loss, e.g. 0.05 for 5 %")
    return eval_metric_loss


ANALYSIS_OPTIONS = ("early_stop", "evaluation", "batch_variants", "prefix_cache", "fused_eval",
                    "eval_images", "latency", "adaptive", "target", "bound", "confidence", "plan")


def sensitivity_option_names() -> tuple[str, ...]:
    """What ``sensitivity_options`` takes: the analysis options, and the timing settings spelled
    as ``train()`` spells them (``latency_device``, ...: the fields of the flow's timing group)."""
    return (*ANALYSIS_OPTIONS, *(f"latency_{f.name}" for f in dataclasses.fields(_timing_class())))


def _timing_class() -> type:
    return config.group_class(config.FlowSettings, "latency")


def latency_timing(options: Mapping[str, Any]) -> Timing:
    """The :class:`Timing` that the ``latency_<field>`` keys of ``options`` spell."""
    fields = {f.name for f in dataclasses.fields(_timing_class())}
    return _timing_class()(**{k[len("latency_"):]: v for k, v in options.items()
                              if k.startswith("latency_") and k[len("latency_"):] in fields})


def check_sensitivity_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``sensitivity_options`` of a task API, checked (a ConfigError names an unknown one):
    keyword arguments of :func:`autoprune.sensitivity` (``latency=True`` and its settings time
    each point too), plus ``eval_images`` (measure on that many evaluation images only; training
    and the report keep the whole evaluation set)."""
    options = {k: v for k, v in dict(options or {}).items() if v is not None}
    known = sensitivity_option_names()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"unknown sensitivity option(s) {', '.join(map(repr, unknown))}: use "
                          f"{', '.join(known)}")
    check_analysis_options(**options)
    if options.get("latency"):
        latency_timing(options).check()
    n = options.get("eval_images")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"eval_images={n!r} must be a positive number of images such as 500")
    return options
