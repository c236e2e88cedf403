"""autoprune: sensitivity-driven structured channel pruning for PyTorch CNNs.

The core works on any ``nn.Module`` plus an evaluation function (PaddleSlim-style)::

    groups = autoprune.prunable_groups(model, example)
    sens = autoprune.sensitivity(model, example, eval_fn, sensitivities_file="sens.json")
    ratios = autoprune.ratios_by_loss(sens, 0.05)  # or ratios_by_flops(model, example, sens, 0.4)
    # or, with sensitivity(..., latency=True): ratios_by_latency(model, example, sens, 0.4)
    # (timed elsewhere: latency=Timing(threads=1, runtime="onnxruntime"), timing= the same)
    result = autoprune.prune(model, example, ratios)  # in place; result.flops_reduction
    autoprune.save_pruned(result.model, "pruned.pt")

Each registered task is reached as ``autoprune.<task>`` (``from autoprune import classification as
cls``, ``detection``, ``segmentation``, ``instance_segmentation``): see
:mod:`autoprune.flow.registry` (the built-in tasks register in :mod:`autoprune.tasks`).

Layers, each importing only those below it: ``cli`` -> ``profiles`` -> ``tasks`` -> ``flow`` ->
``engine`` (``errors`` is shared by all).
"""
from __future__ import annotations

import importlib
import sys
from typing import Any

from ._version import __version__
from .errors import (AutopruneError, CheckpointError, ConfigError, MetricError,
                     NoPrunableGroupsError, NotAutopruneCheckpointError, ResumeMismatchError,
                     SensitivityFileError, TrainingDivergedError, UnreadableCheckpointError,
                     WriteError)
from .tasks import TASKS


# name -> the engine module it comes from: imported when first used, so that `autoprune
# --help` and `--version` answer without loading torch
_EXPORTS = {
    **dict.fromkeys(["FlopsRatios", "ratios_by_flops", "ratios_by_loss"], "engine.allocate"),
    **dict.fromkeys(["export_onnx", "load_pruned", "read_pruned_metadata", "save_pruned"],
                    "engine.checkpoint"),
    **dict.fromkeys(["PrunableGroup", "prunable_groups"], "engine.groups"),
    **dict.fromkeys(["Timing", "measure_latencies"], "engine.latency"),
    **dict.fromkeys(["LatencyRatios", "ratios_by_latency"], "engine.latency_target"),
    **dict.fromkeys(["count_flops", "count_params", "latency_ms", "measure", "size_mb"],
                    "engine.measure"),
    **dict.fromkeys(["import_paddleslim"], "engine.paddleslim"),
    **dict.fromkeys(["PruneResult", "prune"], "engine.prune"),
    **dict.fromkeys(["DEFAULT_RATIOS", "sensitivity"], "engine.sensitivity"),
    **dict.fromkeys(["load_sensitivities", "merge_sensitivities", "read_record",
                     "save_sensitivities"], "engine.store"),
}

__all__ = [
    "AutopruneError", "CheckpointError", "ConfigError", "DEFAULT_RATIOS", "FlopsRatios",
    "LatencyRatios", "MetricError", "NoPrunableGroupsError", "NotAutopruneCheckpointError",
    "PrunableGroup", "PruneResult", "ResumeMismatchError", "SensitivityFileError", "Timing",
    "TrainingDivergedError", "UnreadableCheckpointError", "WriteError", "count_flops",
    "count_params", "export_onnx", "import_paddleslim", "latency_ms", "load_pruned",
    "load_sensitivities", "measure", "measure_latencies", "merge_sensitivities", "prunable_groups",
    "prune", "ratios_by_flops", "ratios_by_latency", "ratios_by_loss", "read_pruned_metadata",
    "read_record", "save_pruned", "save_sensitivities", "sensitivity", "size_mb",
]


def __getattr__(name: str) -> Any:
    """The core API (:data:`_EXPORTS`) and ``autoprune.<task>`` (the public API of a registered
    task: the built-in ones are also plain modules, ``autoprune/<task>.py``; a task registered
    elsewhere is reached as ``autoprune.<task>`` or ``from autoprune import <task>``), imported
    when first used."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in TASKS:
        module = TASKS[name].api()
        sys.modules.setdefault(f"{__name__}.{name}", module)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(TASKS))
