"""autoprune: sensitivity-driven structured channel pruning for PyTorch CNNs.

The core works on any ``nn.Module`` plus an evaluation function (PaddleSlim-style)::

    groups = autoprune.prunable_groups(model, example)
    sens = autoprune.sensitivity(model, example, eval_fn, sensitivities_file="sens.json")
    ratios = autoprune.ratios_by_loss(sens, 0.05)        # or ratios_by_flops(model, example, sens, 0.4)
    result = autoprune.prune(model, example, ratios)     # in place; result.flops_reduction
    autoprune.save_pruned(result.model, "pruned.pt")
"""
from .allocate import FlopsRatios, ratios_by_flops, ratios_by_loss
from .checkpoint import export_onnx, load_pruned, read_pruned_metadata, save_pruned
from .errors import (AutopruneError, CheckpointError, ConfigError, MetricError,
                     NoPrunableGroupsError, NotAutopruneCheckpointError, SensitivityFileError,
                     TrainingDivergedError, UnreadableCheckpointError, WriteError)
from .groups import PrunableGroup, prunable_groups
from .measure import count_flops, count_params, latency_ms, measure, size_mb
from .prune import PruneResult, prune
from .sensitivity import DEFAULT_RATIOS, sensitivity
from .store import (import_paddleslim, load_sensitivities, merge_sensitivities, read_record,
                    save_sensitivities)

__version__ = "0.1.0"

__all__ = [
    "AutopruneError", "CheckpointError", "ConfigError", "DEFAULT_RATIOS", "FlopsRatios",
    "MetricError", "NoPrunableGroupsError", "NotAutopruneCheckpointError", "PrunableGroup",
    "PruneResult", "SensitivityFileError", "TrainingDivergedError", "UnreadableCheckpointError",
    "WriteError", "count_flops", "count_params", "export_onnx", "import_paddleslim", "latency_ms",
    "load_pruned", "load_sensitivities", "measure", "merge_sensitivities", "prunable_groups",
    "prune", "ratios_by_flops", "ratios_by_loss", "read_pruned_metadata", "read_record",
    "save_pruned", "save_sensitivities", "sensitivity", "size_mb",
]
