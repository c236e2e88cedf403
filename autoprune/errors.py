"""Errors autoprune raises for bad input: each carries one line that names the problem and the fix."""
from __future__ import annotations


class AutopruneError(Exception):
    """Base class of every error autoprune raises on purpose (the CLI prints these as one line)."""


class ConfigError(AutopruneError, ValueError):
    """An argument is out of range or inconsistent (ratio, loss, FLOPs target, group names...)."""


class MetricError(AutopruneError, ValueError):
    """The evaluation function returned something unusable (NaN, inf, not a number, zero baseline)."""


class NoPrunableGroupsError(AutopruneError, ValueError):
    """The model has no channel group that can be pruned."""


class SensitivityFileError(AutopruneError, ValueError):
    """A sensitivity file is missing, corrupt, of the wrong schema or made for another model."""


class CheckpointError(AutopruneError, ValueError):
    """A pruned checkpoint is missing, corrupt or does not fit the model it is loaded into."""


class TrainingDivergedError(AutopruneError, FloatingPointError):
    """The training loss became NaN or infinite (usually a learning rate too high for the data)."""
