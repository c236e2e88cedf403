"""The contract between the task-agnostic flow (``autoprune.flow``) and a task.

A task adapter subclasses :class:`TaskAdapter` and implements every abstract member; the flow
calls nothing else. The adapter is the one place that knows about timm/torchvision, Ultralytics
or segmentation-models-pytorch. It holds the task's data and training settings.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the contract (and the CLI's task lists) load without torch
    import torch
    import torch.nn as nn


class TaskAdapter(ABC):
    """What the flow needs from a task. Subclasses set the class attributes and, in their
    constructor, ``input_size``, ``device`` and ``eval_set``."""

    task: str               # the registered name: "classification", "detection", ...
    metric: str             # the metric sensitivities are measured with, e.g. "top1"
    higher_is_better: bool  # False for a loss-like metric
    input_size: int | None  # the pixel size the model is trained, timed and exported at
    device: torch.device    # where the model is trained and evaluated
    eval_set: Any           # the evaluation items (``len()`` is recorded); None without eval data
    distills: bool = False  # whether ``fit`` takes ``distill=`` (a teacher to distil from)
    # an adapter distilling otherwise than logit KD also defines ``distill_recipe(distill)``:
    # ``distill`` as passed, checked, as the report records it (None: off)
    no_distill_reason: str = "its trainer has no hook for a distillation term"

    # --- the model -------------------------------------------------------------------------
    @abstractmethod
    def arch_key(self, model: str | nn.Module) -> str | None:
        """The canonical architecture key (``timm/resnet18``, ``yolov8n``, ``smp/unet/resnet18``)
        of what the user passed: a model name (a ConfigError when unknown) or a model object
        (None when its architecture cannot be told). The key picks the DEFAULT profile; the
        profile's group fingerprint then refuses a model of another width or patched layers."""

    @abstractmethod
    def build(self, arch: str, **build_kwargs: Any) -> nn.Module:
        """A fresh, untrained model of architecture ``arch``."""

    @abstractmethod
    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        """What ``build`` needs to rebuild ``model``'s architecture (saved in checkpoints)."""

    @classmethod
    def check_build_kwargs(cls, build: dict[str, Any]) -> str | None:
        """Why the ``build`` map read from a checkpoint cannot be rebuilt from (naming the
        field), or None. The default refuses class and channel counts that are not positive
        whole numbers."""
        for key in ("num_classes", "nc", "in_channels"):
            value = build.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                return f"metadata field 'build.{key}' is {value!r:.40}, not a positive whole number"
        return None

    @abstractmethod
    def check_model(self, model: nn.Module) -> None:
        """Raise a ConfigError if ``model`` does not fit the data (e.g. number of classes)."""

    def check_data(self, model: nn.Module) -> None:
        """Raise a ConfigError if the data cannot feed ``model`` (read before any training);
        the default checks nothing."""

    @abstractmethod
    def example_inputs(self, model: nn.Module) -> Any:
        """One batch the model accepts (used to trace the graph and count FLOPs)."""

    @abstractmethod
    def timing_inputs(self, model: nn.Module) -> Any:
        """The batch latency is measured on."""

    @abstractmethod
    def ignored_layers(self, model: nn.Module) -> list[Any]:
        """Modules (or names) whose output channels must never be pruned."""

    # --- training and evaluation ----------------------------------------------------------
    @abstractmethod
    def fit(self, model: nn.Module, epochs: int, save_dir: Path, *,
            meta: dict[str, Any] | None = None, resume: bool = False) -> nn.Module:
        """Train ``model`` for ``epochs`` and return the best model, saved as
        ``save_dir/best.pt`` (``save_dir``: a stage folder of the run, e.g. ``<run>/baseline``) with
        ``meta`` (an autoprune checkpoint); ``resume=True`` continues
        an interrupted run of the same call. An adapter with ``distills = True`` also takes
        ``distill=`` (:class:`autoprune.flow.training.Distill`: a frozen teacher, alpha,
        temperature) and adds its distillation term to the training loss."""

    def deployables(self, save_dir: Path) -> list[tuple[str, Path]]:
        """``(what, path)`` of the files a training stage in ``save_dir`` leaves besides
        autoprune's checkpoints, for the list of outputs a run prints (Ultralytics' own
        ``best.pt``); none by default."""
        return []

    def trained_epochs(self, save_dir: Path) -> tuple[int, int] | None:
        """``(finished, planned)`` epochs of a training run in ``save_dir`` made by the task's
        own trainer (Ultralytics); None when the task trains with autoprune's loop (its
        ``train_state.pt`` says) or there is no such run."""
        return None

    @abstractmethod
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Metrics of ``model`` on the evaluation data; includes ``self.metric``."""

    @abstractmethod
    def with_eval_limit(self, limit: int) -> "TaskAdapter":
        """A copy of this adapter that evaluates on ``limit`` of its evaluation items (the
        analysis' ``sensitivity_options={"eval_images": N}``); training data are shared."""

    # --- deployment -----------------------------------------------------------------------
    @abstractmethod
    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17,
                    dynamic_batch: bool = True) -> Path:
        """Export ``model`` to ONNX at ``path`` in the form the task deploys (the adapter's input
        size; detection: Ultralytics' export head), any batch size unless ``dynamic_batch`` is
        False (then batch 1)."""


@dataclass
class TrainResult:
    """What ``<task>.train(...)`` returns.

    report: the before/after dict written to ``report.json`` (None when nothing was pruned);
    baseline_path / pruned_path: the saved checkpoints (``load_model`` reads both);
    sensitivities_path: the sensitivity file used; ratios: the per-group ratios applied.
    """

    model: nn.Module
    report: dict[str, Any] | None = None
    baseline_path: Path | None = None
    pruned_path: Path | None = None
    sensitivities_path: Path | None = None
    ratios: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
