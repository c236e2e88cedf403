"""The public ``train`` / ``analyze_sensitivity`` / ``load_model`` of every task, built from its
registry entry and its settings dataclass (not written out four times): one call binds the
arguments, reads a resumed run's ``args.yaml``, splits the settings into the flow's and the
task's, builds the task's adapter and runs the flow.

``help(autoprune.classification.train)`` shows the whole signature (``__signature__``), each
setting with its type and default, and the docstring lists them with their help text.
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn

from ..engine.distributed import init_from_env
from .config import (RUN_CONFIG, FlowSettings, flat_fields, flow_analysis_names, free_settings,
                     names, read_run_config, renamed, resumed_settings, split_settings)
from ..errors import ConfigError
from .contract import TrainResult
from .registry import REQUIRED, Task


def _defaults(task: Task) -> dict[str, Any]:
    """Every name ``<task>.train`` takes with its default: the task's inputs (a required one:
    ``inspect.Parameter.empty``), the flow's settings (with the task's changes to their
    defaults) and the task's own settings."""
    settings = task.settings_class()
    defaults = {s.name: s.default for cls in (FlowSettings, settings) for s in flat_fields(cls)}
    defaults.update(settings.flow_defaults)
    # a required input but the model may come from a resumed run's args.yaml: checked later
    inputs = {k: v if k == "model" or v is not REQUIRED else None
              for k, v in task.inputs.items()}
    return {**inputs, **defaults, **dict.fromkeys(task.aliases)}


def _params(task: Task) -> list[inspect.Parameter]:
    """The signature of ``<task>.train``: its positional names, then every other input and
    setting, keyword-only, each with its default."""
    defaults = _defaults(task)
    kind = lambda name: inspect.Parameter.POSITIONAL_OR_KEYWORD if name in task.positional \
        else inspect.Parameter.KEYWORD_ONLY  # noqa: E731
    order = list(dict.fromkeys([*task.positional, *defaults]))
    return [inspect.Parameter(name, kind(name), default=defaults[name]) for name in order]


def settings_help(task: Task) -> str:
    """Each setting of ``task``: name, type, default and what it does (a docstring section)."""
    settings = task.settings_class()
    flow_defaults = settings.flow_defaults
    lines = []
    for cls in (settings, FlowSettings):
        for s in flat_fields(cls):
            default = flow_defaults.get(s.name, s.default)
            kind = s.metadata.get("kind") or "any"
            lines.append(f"    {s.name} ({kind}, default {default!r}): {s.metadata.get('help')}")
    return "\n".join(lines)


def make_train(task: Task, doc: str) -> Callable[..., TrainResult]:
    """``<task>.train``: ``doc`` (the task's own words) followed by the list of settings."""
    signature = inspect.Signature(_params(task), return_annotation=TrainResult)

    def train(*args: Any, **kwargs: Any) -> TrainResult:
        kwargs = renamed(kwargs, signature.parameters, task.name)  # imgsz= -> input_size=
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:  # a missing or unknown argument, in Python's words
            raise ConfigError(f"{task.name}.train(): {e}") from None
        return run_task(task, dict(bound.arguments))

    train.__signature__ = signature  # type: ignore[attr-defined]
    train.__doc__ = f"{doc.rstrip()}\n\n    Settings (keywords; YAML keys and CLI flags of " \
                    f"`autoprune train` have the same names):\n\n{settings_help(task)}\n"
    train.__name__ = train.__qualname__ = "train"
    train.__module__ = task.package
    return train


def run_task(task: Task, given: dict[str, Any]) -> TrainResult:
    """The one-call flow of ``task`` with the arguments ``given`` to its ``train`` (only those
    the caller named, so that a resumed run takes the rest from its ``args.yaml``)."""
    from .run import train as run_flow

    settings = task.settings_class()
    for alias, name in task.aliases.items():  # train_data= for detection's data=
        if alias in given:
            value = given.pop(alias)
            if given.get(name) is not None and value is not None and \
                    Path(str(given[name])) != Path(str(value)):
                raise ConfigError(f"pass the data once: {name}= or {alias}=, not both")
            given[name] = value if given.get(name) is None else given[name]
    if given.get("resume"):
        save_dir = Path(given.get("save_dir", FlowSettings.save_dir))
        stored = read_run_config(save_dir)
        given = resumed_settings(task.name, given, stored, free_settings(FlowSettings, settings),
                                 save_dir / RUN_CONFIG)
    inputs = {k: given.pop(k) for k in list(given) if k in task.inputs}
    missing = [k for k, d in task.inputs.items() if d is REQUIRED and inputs.get(k) is None]
    if missing:
        raise ConfigError(f"{task.name}.train() needs {missing[0]}= (e.g. "
                          f"{task.config_example})")
    flow_defaults = settings.flow_defaults
    given = {**flow_defaults, **given}
    flow, own = split_settings(given, settings, task.name)
    init_from_env(own.device)  # under torchrun (a script, the CLI): DDP training, the analysis
    torch.manual_seed(flow.seed)
    adapter_class = task.adapter_class()
    adapter_class.check_settings(own, flow)  # before any data is read
    adapter = adapter_class.from_settings(own, inputs, flow)
    return run_flow(adapter, inputs.get("model"), flow, inputs=inputs, settings=own)


def make_load_model(task: Task) -> Callable[..., nn.Module]:
    """``<task>.load_model(path, base_model=None)``."""
    def load_model(path: str | os.PathLike, base_model: nn.Module | None = None) -> nn.Module:
        """Load a checkpoint written by ``train`` (pruned or not), weights-only, in eval mode."""
        from .checkpoints import adapter_for_checkpoint, load_model as load

        return load(path, adapter_for_checkpoint(path, task=task.name, progress=False)[0],
                    base_model=base_model)

    load_model.__module__ = task.package
    return load_model


ANALYSIS = tuple(flow_analysis_names())
"""The flow settings ``<task>.analyze_sensitivity`` takes (besides the task's own): those whose
field is marked ``analysis``."""


def make_analyze(task: Task, data_name: str, doc: str) -> Callable[..., Any]:
    """``<task>.analyze_sensitivity(model_or_checkpoint, <data_name>, save_file, **settings)``:
    ``doc`` followed by the settings it takes."""
    settings = task.settings_class()
    defaults = _defaults(task)
    defaults.update(settings.analysis_defaults)
    params = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for name in ("model_or_checkpoint", data_name, "save_file")]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name])
               for name in [*ANALYSIS, *names(settings, analysis=True)]]
    signature = inspect.Signature(params)

    def analyze_sensitivity(*args: Any, **kwargs: Any) -> dict[str, dict[float, float]]:
        kwargs = renamed(kwargs, signature.parameters, task.name)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ConfigError(f"{task.name}.analyze_sensitivity(): {e}") from None
        given = dict(bound.arguments)
        model, data = given.pop("model_or_checkpoint"), given.pop(data_name)
        return analyze_task(task, model, data, given.pop("save_file"), given)

    analyze_sensitivity.__signature__ = signature  # type: ignore[attr-defined]
    analyze_sensitivity.__doc__ = doc
    analyze_sensitivity.__module__ = task.package
    return analyze_sensitivity


def analyze_task(task: Task, model: Any, data: Any, save_file: Any,
                 given: dict[str, Any]) -> dict[str, dict[float, float]]:
    """Measure the sensitivities of ``model`` (a checkpoint, a name plus ``pretrain_weights``, or
    a model object) on ``data`` into ``save_file``; the settings a checkpoint fixes (classes,
    input size, build arguments) come from it unless given."""
    from .checkpoints import checkpoint_meta
    from .analysis_step import analyze_sensitivity

    settings_class = task.settings_class()
    given = renamed(given, [*ANALYSIS, *names(settings_class, analysis=True)], task.name)
    flow = {k: given.pop(k) for k in ANALYSIS if k in given}
    given = {**settings_class.analysis_defaults, **given}
    unknown = sorted(set(given) - set(names(settings_class, analysis=True)))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)} for {task.name}."
                          f"analyze_sensitivity: it takes "
                          f"{', '.join(sorted([*ANALYSIS, *names(settings_class, True)]))}")
    adapter_class = task.adapter_class()
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file() and \
            adapter_class.is_own_checkpoint(model):
        meta = checkpoint_meta(model)
        fixed = {"input_size": meta.get("input_size"), **adapter_class.checkpoint_settings(meta)}
        names_of = set(names(settings_class))
        given = {**{k: v for k, v in fixed.items() if k in names_of and v is not None},
                 **{k: v for k, v in given.items() if v is not None or k not in fixed}}
    own = settings_class(**given)
    steering = FlowSettings(**{k: v for k, v in flow.items() if k in ("progress", "seed")},
                            save_dir=str(Path(save_file).parent))  # where a data cache goes
    init_from_env()
    torch.manual_seed(steering.seed)
    adapter = adapter_class.from_settings(own, {"eval_data": data}, steering)
    model = adapter.analysis_model(model)
    return analyze_sensitivity(adapter, model, save_file,
                               **{k: v for k, v in flow.items() if k != "seed"})
