"""Errors autoprune raises for bad input: each carries one line that names the problem
and the fix."""
from __future__ import annotations


class AutopruneError(Exception):
    """Base class of every error autoprune raises on purpose (the CLI prints these as one line)."""

    def __init__(self, *args: object):
        text = args[0] if len(args) == 1 and isinstance(args[0], str) else ""
        if text.startswith("Caught ") and "\nOriginal Traceback" in text:
            # raised again by a DataLoader from its worker's traceback: keep the one line
            args = (text.rstrip().rsplit("\n", 1)[-1].split(": ", 1)[-1],)
        super().__init__(*args)


class ConfigError(AutopruneError, ValueError):
    """An argument is out of range or inconsistent (ratio, loss, FLOPs target, group names...)."""


class ResumeMismatchError(ConfigError):
    """``resume=True`` with a setting other than the interrupted run's (its ``args.yaml``)."""


class MetricError(AutopruneError, ValueError):
    """The evaluation function returned something unusable (NaN, inf, not a
    number, zero baseline)."""


class NoPrunableGroupsError(AutopruneError, ValueError):
    """The model has no channel group that can be pruned."""


class SensitivityFileError(AutopruneError, ValueError):
    """A sensitivity file is missing, corrupt, of the wrong schema or made for another model."""


class CheckpointError(AutopruneError, ValueError):
    """A pruned checkpoint is missing, corrupt or does not fit the model it is loaded into."""


class TrainingDivergedError(AutopruneError, FloatingPointError):
    """The training loss became NaN or infinite (usually a learning rate too high for the data)."""


class WriteError(AutopruneError, OSError):
    """A file could not be written (no space left, no permission); an earlier copy is kept."""


class NotAutopruneCheckpointError(CheckpointError):
    """A file that is not an autoprune checkpoint: unreadable weights-only (a pickle, corrupt) or
    a weights-only file without autoprune's metadata (a plain state_dict)."""


class UnreadableCheckpointError(NotAutopruneCheckpointError):
    """A file ``torch.load(weights_only=True)`` cannot read: corrupt, truncated or a pickle."""
