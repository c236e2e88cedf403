"""One typed config: the flow's settings (:class:`FlowSettings`) and each task's own
(:class:`TaskSettings` subclasses, in the task packages), declared once as dataclass fields.

Python keywords, YAML keys and CLI flags are the same names, read from these fields; each field
carries its help text and whether a resumed run may change it (the field machinery, settings
groups included: :mod:`.fields`). A run saves its resolved settings as ``save_dir/args.yaml``
(:mod:`.run_config`: :func:`save_run_config`), and ``resume=True`` reads them back
(:func:`resumed_settings`). The names of both modules are public here too.
"""
from __future__ import annotations

import difflib
import math
import numbers
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, TypeVar

from ..engine.timing import Timing
from .fields import (Flat, flat_fields, from_flat, group, group_class,  # noqa: F401 - public
                     setting, to_flat)
from .precision import Int8Settings
from .run_config import (INPUTS, RUN_CONFIG, follow_folder, free_settings,  # noqa: F401
                         plain, read_run_config, resumed_settings, run_record, save_run_config)
from ..errors import ConfigError

DEFAULT_RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # engine.sensitivity's


@dataclass
class FlowSettings:
    """The settings of the task-agnostic flow (``autoprune.flow.run.train``), the same for every
    task; a task may change their defaults (detection trains 100 epochs)."""

    epochs: int = setting(10, "training epochs; after pruning, the retraining epochs", kind="int")
    save_dir: str = setting("output", "the run's folder (stages, reports, args.yaml)",
                            kind="path")
    pretrain_weights: str | None = setting(None, "a trained model to start from: an autoprune "
                                           "checkpoint or a state_dict file", kind="path",
                                           analysis=True)
    sensitivities_file: str | None = setting(None, "None: plain training; a path: measure or "
                                             "complete the sensitivities there; DEFAULT: the "
                                             "bundled profile", kind="path|DEFAULT")
    eval_metric_loss: float | None = setting(None, "tolerated relative metric loss per group "
                                             "(0.05 when no target is given)", kind="float")
    pruned_flops: float | None = setting(None, "share of FLOPs to remove, e.g. 0.4",
                                         kind="float")
    pruned_latency: float | None = setting(None, "share of measured latency to remove, e.g. "
                                           "0.4", kind="float")
    latency: Timing = group(Timing, "where latency is timed and targeted (latency_device, "
                            "latency_threads, ...: the fields of autoprune.Timing)",
                            prefix="latency_")
    int8: Int8Settings = group(Int8Settings, "INT8 in the deploy runtime (quantize, "
                               "calibration_images, calibration_method, int8_metric_loss)")
    pretrain_epochs: int | None = setting(None, "epochs of the base model (default: epochs)",
                                          kind="int")
    criterion: Any = setting("l1_norm", "which channels go: l1_norm, l2_norm, fpgm, bn_scale, "
                             "or (Python) a callable scoring a group's channels", kind="str",
                             analysis=True)
    round_to: int | None = setting(None, "keep multiples of this many channels", kind="int")
    ratios: tuple = setting(DEFAULT_RATIOS, "the ratios the sensitivities are measured at",
                            kind="list[float]", analysis=True)
    progress: bool = setting(True, "progress bars and logs", kind="bool", free=True,
                             analysis=True)
    sensitivity_options: dict | None = setting(None, "options of the analysis: early_stop, "
                                               "evaluation, batch_variants, eval_images, ...",
                                               kind="dict", analysis=True)
    resume: bool = setting(False, "continue the interrupted run in save_dir with its "
                           "args.yaml", kind="bool", free=True)
    distill: Any = setting(False, "retrain distilling the unpruned model: True, or {alpha, "
                           "temperature} (classification, segmentation)", kind="bool|dict")
    prune_steps: int = setting(1, "reach the target in this many prune-retrain steps",
                               kind="int")
    prune_schedule: Any = setting(None, "(Python) a callable (step, steps) -> the share of the "
                                  "channels to remove that is removed after that step; default "
                                  "geometric", kind="callable")
    seed: int = setting(0, "random seed", kind="int", analysis=True)

    def mode(self) -> str:
        """What the run does with sensitivities: ``none`` (plain training), ``default`` (the
        bundled profile), ``existing`` (a file to use, completed) or ``new`` (measured)."""
        return sensitivity_mode(self.sensitivities_file)


@dataclass
class TaskSettings:
    """What every task's adapter takes; a task subclasses it with its own fields and
    defaults, and may change the flow's defaults (``flow_defaults``, e.g. detection's 100
    epochs) and those of ``analyze_sensitivity`` (``analysis_defaults``)."""

    flow_defaults: ClassVar[dict[str, Any]] = {}
    analysis_defaults: ClassVar[dict[str, Any]] = {}

    device: str = setting("auto", "auto (a GPU when there is one), cpu, cuda, cuda:1",
                          kind="str", free=True)
    input_size: int | None = setting(None, "input size in pixels (task default)", kind="int")
    batch_size: int | None = setting(None, "images per training batch (task default)",
                                     kind="int")
    num_workers: int | None = setting(0, "data loader worker processes", kind="int", free=True)
    eval_limit: int | None = setting(None, "evaluate on this many images only", kind="int")
    sync_bn: bool = setting(False, "under torchrun on GPUs: BatchNorm over all ranks",
                            kind="bool", train_only=True)


def sensitivity_mode(sensitivities_file: Any) -> str:
    """``none``, ``default``, ``existing`` or ``new`` (see :meth:`FlowSettings.mode`)."""
    if sensitivities_file is None:
        return "none"
    if isinstance(sensitivities_file, str) and sensitivities_file.upper() == "DEFAULT":
        return "default"
    return "existing" if Path(sensitivities_file).exists() else "new"


def flow_analysis_names() -> list[str]:
    """The flow settings ``<task>.analyze_sensitivity`` takes (marked ``analysis`` on their
    fields), in order."""
    return [s.name for s in flat_fields(FlowSettings) if s.metadata.get("analysis")]


def names(cls: type, analysis: bool = False) -> list[str]:
    """The setting names of a settings dataclass as users spell them, in order (a group's
    fields with its prefix; ``analysis``: those ``analyze_sensitivity`` takes)."""
    return [s.name for s in flat_fields(cls)
            if not (analysis and s.metadata.get("train_only"))]


# --- old names, accepted with a warning (one table, as timm's register_model_deprecations) --------
DEPRECATED = {"imgsz": "input_size", "batch": "batch_size", "workers": "num_workers"}


def renamed(given: Mapping[str, Any], known: Iterable[str], task: str) -> dict[str, Any]:
    """``given`` with each deprecated name of :data:`DEPRECATED` replaced by its new one (a
    FutureWarning; both given with different values: a ConfigError)."""
    out = dict(given)
    known = set(known)
    for old, new in DEPRECATED.items():
        if old not in out or new not in known:
            continue
        value = out.pop(old)
        if value is None:
            continue
        if out.get(new) is not None and out[new] != value:
            raise ConfigError(f"{old}={value} and {new}={out[new]} name the same setting: pass "
                              f"{new}= only")
        warnings.warn(f"{old}= is deprecated: use {new}= (autoprune's name in every task)",
                      FutureWarning, stacklevel=3)
        out[new] = value
    return out


def split_settings(given: Mapping[str, Any], task_class: type, task: str
                   ) -> tuple[FlowSettings, Any]:
    """``(FlowSettings, task settings)`` from the keywords of ``<task>.train``; an unknown name
    is a one-line ConfigError listing the task's settings."""
    flow_names, task_names = set(names(FlowSettings)), set(names(task_class))
    given = renamed(given, flow_names | task_names, task)
    check_known(given, flow_names | task_names, task)
    flow = from_flat(FlowSettings, {k: v for k, v in given.items() if k in flow_names})
    own = from_flat(task_class, {k: v for k, v in given.items() if k in task_names})
    return flow, own


def check_known(given: Iterable[str], known: Iterable[str], where: str) -> None:
    """The one unknown-setting check (the task APIs, the adapters, the CLI's YAML and flags): a
    name of ``given`` that ``known`` lacks is a one-line ConfigError (:func:`unknown_settings`)."""
    known = set(known)
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(unknown_settings(unknown, known, where))


def unknown_settings(unknown: list[str], known: Iterable[str], where: str) -> str:
    """The one-line message for the ``unknown`` setting names ``where`` (a task) does not take,
    with the known name closest to the first, if any is close."""
    known = sorted(known)
    close = difflib.get_close_matches(unknown[0], known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown setting(s) {', '.join(unknown)} for {where}{hint}: it takes {', '.join(known)}"


S = TypeVar("S", bound=TaskSettings)


def settings_of(cls: type[S], settings: S | None, given: Mapping[str, Any], task: str) -> S:
    """The settings a task adapter is made with: ``settings`` (a ``cls``) as passed, or a
    ``cls`` of the setting keywords ``given`` (the old names of :data:`DEPRECATED` taken with a
    FutureWarning). ``settings`` and keywords together, or an unknown keyword, are a one-line
    ConfigError."""
    if settings is not None:
        if given:
            also = ", ".join(f"{k}=" for k in sorted(given))
            raise ConfigError(f"the {task} adapter got settings= and {also}: pass the settings "
                              f"once, in settings= or as keywords")
        if not isinstance(settings, cls):
            raise ConfigError(f"settings= of the {task} adapter must be a {cls.__name__}, not "
                              f"{type(settings).__name__}")
        return settings
    known = names(cls)
    given = renamed(given, known, task)
    check_known(given, known, f"the {task} adapter")
    return from_flat(cls, given)


# --- checks made once, before any work ---------------------------------------------------------
def check_numbers(*, whole: bool = False, low: float | None = 0, above: bool = False,
                  **settings: Any) -> None:
    """Refuse a setting that is not a number (a YAML ``batch_size: big``), not a whole one when
    ``whole``, or below ``low`` (or at it, when ``above``), naming its key; None passes."""
    kind = numbers.Integral if whole else numbers.Real
    for key, value in settings.items():
        if value is None:
            continue
        ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
        if ok and low is not None:
            ok = value > low if above else value >= low
        if not ok:
            bound = "" if low is None else f", {'above' if above else 'at least'} {low}"
            raise ConfigError(f"{key}={value!r} must be {'a whole' if whole else 'a'} "
                              f"number{bound}: fix it in the call or the config")


def check_flags(**flags: Any) -> None:
    """Refuse a switch that is not True or False (a YAML ``resume: yes please``)."""
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{key}={value!r:.40} must be true or false")
