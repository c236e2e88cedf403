"""The one small protocol every task adapter implements, and what a pipeline run returns.

The pipeline (``autoprune.pipeline``) is task-agnostic: it only calls these methods. An adapter
is the one place that knows about timm/torchvision, Ultralytics or segmentation-models-pytorch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch.nn as nn


class TaskAdapter(Protocol):
    """What the pipeline needs from a task. An adapter holds its data and training settings."""

    task: str               # "classification", "detection", "segmentation"
    metric: str             # the metric sensitivities are measured with, e.g. "top1"
    higher_is_better: bool

    def arch_key(self, model: str | nn.Module) -> str | None:
        """The canonical architecture key (``timm/resnet18``, ``yolov8n``, ``smp/unet/resnet18``)
        of what the user passed: a model name (a ConfigError when unknown) or a model object — a
        timm/torchvision model, a YOLO object or DetectionModel, an smp model — (None when its
        architecture cannot be told). The key picks the DEFAULT profile; the profile's group
        fingerprint then refuses a model of another width or with patched layers."""

    def build(self, arch: str, **build_kwargs: Any) -> nn.Module:
        """A fresh, untrained model of architecture ``arch``."""

    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        """What ``build`` needs to rebuild ``model``'s architecture (saved in checkpoints)."""

    def check_model(self, model: nn.Module) -> None:
        """Raise a ConfigError if ``model`` does not fit the data (e.g. number of classes)."""

    def example_inputs(self, model: nn.Module) -> Any:
        """One batch the model accepts (used to trace the graph and count FLOPs)."""

    def ignored_layers(self, model: nn.Module) -> list[Any]:
        """Modules (or names) whose output channels must never be pruned."""

    def fit(self, model: nn.Module, epochs: int, save_dir: Path) -> nn.Module:
        """Train ``model`` for ``epochs`` and return the best model (also saved in ``save_dir``)."""

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Metrics of ``model`` on the evaluation data; includes ``self.metric``."""

    def timing_inputs(self, model: nn.Module) -> Any:
        """The batch latency is measured on."""

    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17) -> Path:
        """Export ``model`` to ONNX at ``path`` in the form the task deploys (batch 1, the
        adapter's input size; detection: Ultralytics' export head)."""

    def with_eval_limit(self, limit: int) -> "TaskAdapter":
        """A copy of this adapter that evaluates on ``limit`` of its evaluation items (the
        analysis' ``sensitivity_options={"eval_images": N}``); training data are shared."""


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
