"""autoprune: sensitivity-driven structured channel pruning for PyTorch CNNs.

The core works on any ``nn.Module`` plus an evaluation function (PaddleSlim-style)::

    groups = autoprune.prunable_groups(model, example)
    sens = autoprune.sensitivity(model, example, eval_fn, sensitivities_file="sens.json")
    ratios = autoprune.ratios_by_loss(sens, 0.05)        # or ratios_by_flops(model, example, sens, 0.4)
    # or, with sensitivity(..., latency=True): ratios_by_latency(model, example, sens, 0.4)
    result = autoprune.prune(model, example, ratios)     # in place; result.flops_reduction
    autoprune.save_pruned(result.model, "pruned.pt")

Each registered task is reached as ``autoprune.<task>`` (``from autoprune import classification as
cls``, ``detection``, ``segmentation``): see :mod:`autoprune.tasks.registry`.

Layers, each importing only those below it: ``cli`` -> ``profiles`` -> ``tasks`` -> ``flow`` ->
``engine`` (``errors`` is shared by all).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType

from .engine.allocate import FlopsRatios, ratios_by_flops, ratios_by_loss
from .engine.checkpoint import export_onnx, load_pruned, read_pruned_metadata, save_pruned
from .engine.groups import PrunableGroup, prunable_groups
from .engine.latency import measure_latencies
from .engine.latency_target import LatencyRatios, ratios_by_latency
from .engine.measure import count_flops, count_params, latency_ms, measure, size_mb
from .engine.paddleslim import import_paddleslim
from .engine.prune import PruneResult, prune
from .engine.sensitivity import DEFAULT_RATIOS, sensitivity
from .engine.store import load_sensitivities, merge_sensitivities, read_record, save_sensitivities
from .errors import (AutopruneError, CheckpointError, ConfigError, MetricError,
                     NoPrunableGroupsError, NotAutopruneCheckpointError, SensitivityFileError,
                     TrainingDivergedError, UnreadableCheckpointError, WriteError)
from .tasks.registry import TASKS

__version__ = "0.1.0"

__all__ = [
    "AutopruneError", "CheckpointError", "ConfigError", "DEFAULT_RATIOS", "FlopsRatios",
    "LatencyRatios", "MetricError", "NoPrunableGroupsError", "NotAutopruneCheckpointError", "PrunableGroup",
    "PruneResult", "SensitivityFileError", "TrainingDivergedError", "UnreadableCheckpointError",
    "WriteError", "count_flops", "count_params", "export_onnx", "import_paddleslim", "latency_ms",
    "load_pruned", "load_sensitivities", "measure", "measure_latencies", "merge_sensitivities",
    "prunable_groups", "prune", "ratios_by_flops", "ratios_by_latency", "ratios_by_loss", "read_pruned_metadata", "read_record",
    "save_pruned", "save_sensitivities", "sensitivity", "size_mb",
]


class _TaskAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import autoprune.<task>``: the registered task's API module under that name too."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package == __name__ and name in TASKS:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def exec_module(self, module: ModuleType) -> None:
        # a module may replace itself in sys.modules while it is executed: the import
        # statement then binds the task's API module
        sys.modules[module.__name__] = TASKS[module.__name__.split(".")[1]].api()


sys.meta_path.insert(0, _TaskAlias())


def __getattr__(name: str) -> ModuleType:
    """``autoprune.<task>``: the public API of a registered task, imported when first used."""
    if name in TASKS:
        module = TASKS[name].api()
        sys.modules.setdefault(f"{__name__}.{name}", module)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
