"""The contract between the task-agnostic flow (``autoprune.flow``) and a task.

A task adapter subclasses :class:`TaskAdapter`: it implements every abstract member and may
override the hooks below, each of which has a default here. The flow calls nothing else and never
probes an adapter for an attribute. The adapter is the one place that knows about
timm/torchvision, Ultralytics or segmentation-models-pytorch. It holds the task's data and
training settings.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ConfigError

if TYPE_CHECKING:  # annotations only: the contract (and the CLI's task lists) load without torch
    import torch
    import torch.nn as nn

    from .config import FlowSettings, TaskSettings


class TaskAdapter(ABC):
    """What the flow needs from a task. Subclasses set the class attributes and, in their
    constructor, ``input_size``, ``device`` and ``eval_set``. The constructor takes the data
    positionally, then the task's settings as ``settings=`` (a :class:`TaskSettings`) or as
    keywords (:func:`~autoprune.flow.config.settings_of`), and ``seed=`` and ``progress=``."""

    task: str               # the registered name: "classification", "detection", ...
    metric: str             # the metric sensitivities are measured with, e.g. "top1"
    higher_is_better: bool  # False for a loss-like metric
    input_size: int | None  # the pixel size the model is trained, timed and exported at
    device: torch.device    # where the model is trained and evaluated
    eval_set: Any           # the evaluation items (``len()`` is recorded); None without eval data
    distills: bool = False  # whether ``fit`` takes ``distill=`` (a teacher to distil from)
    no_distill_reason: str = "its trainer has no hook for a distillation term"
    build_keys: tuple[str, ...] = ("num_classes",)  # what build() takes from a checkpoint
    build_counts: tuple[str, ...] = ("num_classes",)  # those of them that count something
    stage_files: tuple[str, ...] = ()  # what a training stage holds besides autoprune's
    #                                    checkpoints (a folder of the task's own trainer)
    folds_batchnorm: bool = False  # its evaluation runs a copy with each BatchNorm folded
    #                                (the analysis then lays that copy out instead of folding)

    # --- settings and construction ---------------------------------------------------------
    @classmethod
    def check_settings(cls, settings: TaskSettings, flow: FlowSettings) -> None:
        """Refuse task settings that cannot work with the flow's, before any data is read (the
        default checks ``distill`` as logit distillation, :meth:`logit_recipe`)."""
        cls.logit_recipe(flow.distill)

    def distill_recipe(self, distill: Any) -> dict[str, Any] | None:
        """``distill`` as given, checked, as the report records it (None: off); the default
        is :meth:`logit_recipe`."""
        return self.logit_recipe(distill)

    @classmethod
    def logit_recipe(cls, distill: Any) -> dict[str, Any] | None:
        """Logit distillation's recipe (``{"alpha", "temperature"}``) for an adapter that
        ``distills``; a one-line ConfigError for one that does not."""
        from .training import check_distill

        recipe = check_distill(distill)
        if recipe and not cls.distills:
            raise ConfigError(f"distill is not offered for {cls.task} yet: "
                              f"{cls.no_distill_reason}; drop distill")
        return recipe

    @classmethod
    def from_settings(cls, settings: TaskSettings, inputs: Mapping[str, Any],
                      flow: FlowSettings) -> "TaskAdapter":
        """The adapter of a ``<task>.train`` call: its data ``inputs`` (all but ``model``), its
        task settings (as ``settings=``) and the flow's seed and progress."""
        data = {k: v for k, v in inputs.items() if k != "model"}
        return cls(**data, settings=settings, seed=flow.seed, progress=flow.progress)

    @classmethod
    def for_checkpoint(cls, meta: Mapping[str, Any], **settings: Any) -> "TaskAdapter":
        """An adapter that rebuilds, evaluates and exports the model of a checkpoint with
        metadata ``meta`` (its build arguments and input size), ``settings`` on top."""
        return cls(**{"input_size": meta.get("input_size"), **cls.checkpoint_settings(meta),
                      **settings})

    @classmethod
    def checkpoint_settings(cls, meta: Mapping[str, Any]) -> dict[str, Any]:
        """The adapter settings a checkpoint's metadata fixes (the default: its ``build``
        arguments and its ``data`` settings, see :meth:`data_settings`)."""
        return {**dict(meta.get("build") or {}), **dict(meta.get("data") or {})}

    def describe_data(self) -> str | None:
        """The data in words for the run's log and report (``coco, 2 splits, 80 classes, 5,000
        val images``); None when there is nothing to say (the default)."""
        return None

    def data_settings(self) -> dict[str, Any]:
        """The settings the model's inputs were prepared with that a checkpoint must keep to be
        evaluated the same way later (a pretrained model's normalisation); none by default."""
        return {}

    @classmethod
    def is_own_checkpoint(cls, path: Any) -> bool:
        """Whether the file at ``path`` is to be read as an autoprune checkpoint (its metadata
        fixes the analysis' settings); the default: every file (a task that also reads its
        library's own files, as detection reads Ultralytics' .pt, tells them apart)."""
        return True

    def analysis_model(self, model: Any) -> Any:
        """What ``analyze_sensitivity`` measures, from what the user passed (a checkpoint path,
        a name or a module: the default passes it through)."""
        return model

    def prepare_model(self, model: Any, pretrain_weights: Any,
                      save_dir: Path) -> tuple[Any, Any]:
        """``(model, pretrain_weights)`` as the flow takes them, from what the user passed: a
        model name or an ``nn.Module`` (the default passes both through; detection turns a
        YOLO object or an Ultralytics .pt into a name plus weights)."""
        return model, pretrain_weights

    def starts_trained(self) -> bool:
        """Whether the model :meth:`prepare_model` returned already holds weights trained for the
        data's classes (published weights with their own head), so that ``pretrain_epochs=0``
        prunes it as it is; False by default."""
        return False

    def start_weights(self) -> dict[str, Any] | None:
        """Where the pretrained weights :meth:`prepare_model` loaded came from (a
        :class:`~autoprune.engine.provenance.Provenance` as a dict), recorded in checkpoints and
        the report; None when it loaded none (the default)."""
        return None

    # --- the model -------------------------------------------------------------------------
    @abstractmethod
    def arch_key(self, model: str | nn.Module) -> str | None:
        """The canonical architecture key (``timm/resnet18``, ``yolov8n``, ``smp/unet/resnet18``)
        of what the user passed: a model name (a ConfigError when unknown) or a model object
        (None when its architecture cannot be told). The key picks the DEFAULT profile; the
        profile's group fingerprint then refuses a model of another width or patched layers."""

    def label_width_groups(self, model: nn.Module) -> set[str]:
        """Names of ``model``'s groups whose channel count follows the data's labels (a YOLO
        head's class branch, ``max(64, min(nc, 100))`` wide in the nano models; a pose head's
        keypoint branch): a DEFAULT profile measured on other labels applies to them as
        ratios (none here)."""
        return set()

    @abstractmethod
    def build(self, arch: str, **build_kwargs: Any) -> nn.Module:
        """A fresh, untrained model of architecture ``arch``."""

    @abstractmethod
    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        """What ``build`` needs to rebuild ``model``'s architecture (saved in checkpoints)."""

    @classmethod
    def check_build_kwargs(cls, build: dict[str, Any]) -> str | None:
        """Why the ``build`` map read from a checkpoint cannot be rebuilt from (naming the
        field), or None: a key not among the task's ``build_keys``, or a count among its
        ``build_counts`` that is not a positive whole number."""
        unknown = sorted(set(map(str, build)) - set(cls.build_keys))
        if unknown:
            return f"metadata field 'build.{unknown[0]}' is not a build argument of {cls.task}"
        return positive_counts(build, cls.build_counts)

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
            meta: dict[str, Any] | None = None, resume: bool = False,
            distill: Any = None) -> nn.Module:
        """Train ``model`` for ``epochs`` and return the best model, saved as
        ``save_dir/best.pt`` (``save_dir``: a stage folder of the run, e.g. ``<run>/baseline``) with
        ``meta`` (an autoprune checkpoint); ``resume=True`` continues an interrupted run of the
        same call. ``distill`` (:class:`autoprune.flow.training.Distill`: a frozen teacher and
        the recipe of :meth:`distill_recipe`; only given to an adapter that ``distills``) adds
        the adapter's distillation term to the training loss."""

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

    def incremental_eval(self) -> Any:
        """An evaluation that reports its metric image by image (or batch by batch) with a
        bound on the full-set value, for the adaptive analysis's early stop
        (:mod:`autoprune.engine.incremental`); None (the default): points are evaluated on
        every image, only the choice of points is adaptive."""
        return None

    @abstractmethod
    def with_eval_limit(self, limit: int) -> "TaskAdapter":
        """A copy of this adapter that evaluates on ``limit`` of its evaluation items (the
        analysis' ``sensitivity_options={"eval_images": N}``); training data are shared."""

    # --- deployment -----------------------------------------------------------------------
    def deploy_module(self, model: nn.Module) -> nn.Module:
        """``model`` in the form the task exports and deploys it (detection: with Ultralytics'
        export head); what a deploy runtime times. The default: ``model`` itself."""
        return model

    def onnx_metadata(self, model: nn.Module) -> dict[str, str]:
        """Key / value pairs written into the ONNX files of ``model`` (FP32 and INT8), e.g. what
        Ultralytics' ``YOLO("model.onnx")`` reads (names, stride, image size); none by default."""
        return {}

    # --- INT8 in the deploy runtime (quantize="int8") -----------------------------------------
    def calibration_inputs(self, limit: int) -> list[Any]:
        """Up to ``limit`` images of the *train* split through the task's evaluation transforms,
        as batches of model inputs: what an INT8 model is calibrated on. The default: the task
        cannot quantize (a one-line ConfigError)."""
        raise ConfigError(f"quantize='int8' is not available for the {self.task} task: it has "
                          f"no calibration data reader; leave quantize out")

    def evaluate_deployed(self, onnx: Any, threads: int | None = None,
                          runtime: str = "onnxruntime") -> dict[str, float]:
        """Metrics of an exported model (FP32 or INT8 ONNX, bytes or a file; for OpenVINO also
        NNCF's ``openvino.Model``) as ``runtime`` runs it, on the evaluation data, with the
        task's own metric. The default: :meth:`evaluate` of the runtime's model dressed as a
        module (:func:`~autoprune.engine.onnx_module.deployed_module`), on the same batches as
        the torch model."""
        from ..engine.onnx_module import deployed_module

        return self.evaluate(deployed_module(onnx, runtime, threads))

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


def positive_counts(build: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    """Why one of ``keys`` in a checkpoint's ``build`` map is not a positive whole number (naming
    the field), or None."""
    for key in keys:
        value = build.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            return f"metadata field 'build.{key}' is {value!r:.40}, not a positive whole number"
    return None
