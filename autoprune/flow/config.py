"""One typed config: the flow's settings (:class:`FlowSettings`) and each task's own
(:class:`TaskSettings` subclasses, in the task packages), declared once as dataclass fields.

Python keywords, YAML keys and CLI flags are the same names, read from these fields; each field
carries its help text and whether a resumed run may change it. A run saves its resolved settings
as ``save_dir/args.yaml`` (:func:`save_run_config`), and ``resume=True`` reads them back
(:func:`resumed_settings`): a setting left out is taken from the file, a recipe setting given with
another value is refused in one line naming both values.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping, TypeVar

from ..engine.timing import Timing
from .precision import Int8Settings
from ..errors import ConfigError, ResumeMismatchError

DEFAULT_RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # engine.sensitivity's


def setting(default: Any = None, help: str = "", *, kind: str = "", free: bool = False,
            train_only: bool = False, analysis: bool = False,
            factory: Callable[[], Any] | None = None) -> Any:
    """A settings field: its default, help text and type in words (``kind``, for the CLI); a
    ``free`` setting may differ when a run is resumed (devices, progress bars, loader workers);
    a task's ``train_only`` one is not taken by ``analyze_sensitivity`` (learning rate,
    optimizer...); a flow setting is taken by it only when ``analysis``."""
    meta = {"help": help, "kind": kind, "free": free, "train_only": train_only,
            "analysis": analysis}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def group(cls: type, help: str, *, prefix: str = "") -> Any:
    """A settings group: one dataclass (the engine's :class:`~autoprune.engine.latency.Timing`,
    ...) held as one field, whose own fields are spelled ``<prefix><field>`` as keywords, YAML
    keys and CLI flags (``latency_threads``); each keeps its own default, help text and type, so
    a field added to the group's class reaches all of them."""
    return field(default_factory=cls, metadata={"help": help, "group": cls, "prefix": prefix})


class Flat:
    """One setting as users spell it: a plain field of a settings class, or a field of one of
    its groups (``group`` names the group field, ``None`` for a plain one)."""

    __slots__ = ("name", "field", "group")

    def __init__(self, name: str, field_: dataclasses.Field, group_: str | None = None):
        self.name, self.field, self.group = name, field_, group_

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.field.metadata

    @property
    def default(self) -> Any:
        f = self.field
        return f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING  # type: ignore
            else None)


def flat_fields(cls: type) -> list[Flat]:
    """The settings of ``cls`` as users spell them, in order: its plain fields, and for each
    group field (:func:`group`) the group's fields with the group's prefix."""
    out = []
    for f in dataclasses.fields(cls):
        inner = f.metadata.get("group")
        if inner is None:
            out.append(Flat(f.name, f))
        else:
            out += [Flat(f.metadata["prefix"] + g.name, g, f.name)
                    for g in dataclasses.fields(inner)]
    return out


def group_class(cls: type, name: str) -> type:
    """The class of the settings group ``name`` of ``cls`` (``group_class(FlowSettings,
    "latency")`` is :class:`~autoprune.engine.timing.Timing`): the one place that says which
    fields the group has."""
    for f in dataclasses.fields(cls):
        if f.name == name and f.metadata.get("group") is not None:
            return f.metadata["group"]
    raise KeyError(f"{cls.__name__} has no settings group {name!r}")


def from_flat(cls: type, values: Mapping[str, Any]) -> Any:
    """A ``cls`` from settings spelled flat (``latency_threads=1`` sets ``latency.threads``);
    names ``cls`` does not know are a TypeError, as the dataclass would give."""
    spelled = {s.name: s for s in flat_fields(cls)}
    unknown = sorted(set(values) - set(spelled))
    if unknown:
        raise TypeError(f"{cls.__name__} got an unexpected setting {unknown[0]!r}")
    plain_values: dict[str, Any] = {}
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        s = spelled[name]
        if s.group is None:
            plain_values[name] = value
        else:
            grouped.setdefault(s.group, {})[s.field.name] = value
    group_classes = {f.name: f.metadata.get("group") for f in dataclasses.fields(cls)}
    for name, inner in grouped.items():
        plain_values[name] = group_classes[name](**inner)
    return cls(**plain_values)


def to_flat(settings: Any) -> dict[str, Any]:
    """The settings of a dataclass instance spelled flat (the inverse of :func:`from_flat`)."""
    out = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.metadata.get("group") is not None and dataclasses.is_dataclass(value):
            prefix = f.metadata["prefix"]
            out.update({prefix + g.name: getattr(value, g.name)
                        for g in dataclasses.fields(value)})
        else:
            out[f.name] = value
    return out


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


# --- the run's saved settings (args.yaml) ------------------------------------------------------
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


def run_record(task: str, inputs: Mapping[str, Any], flow: FlowSettings,
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

    from ..engine.store import write_text_atomic

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
