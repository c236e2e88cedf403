"""Detection adapter, the YOLO family's base: Ultralytics YOLO (the families of :mod:`.names`) on
a YOLO ``data.yaml`` (read by :mod:`.data`; COCO / VOC converted by :mod:`.formats`); Ultralytics
trains and validates, mAP50-95 is the metric. The adapter holds the settings and delegates each
job to its module: :mod:`.sources` (the data), :mod:`.naming` (which model a name or file is),
:mod:`.training` (fit, resume, DDP, distillation), :mod:`.evaluation` (the validator, metrics),
:mod:`.deployed` (ONNX export, INT8 calibration and validation), :mod:`.inputs` (models and
checkpoints given). Another YOLO task subclasses it and declares what differs
(:mod:`.family`). Ultralytics is reached through :mod:`.models` (whose modules import it
offline: see :mod:`.offline`)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn as nn

from ...engine.checkpoint import export_onnx
from ...engine.data import check_limits
from ...errors import ConfigError
from ...flow.config import settings_of
from ...flow.contract import TaskAdapter
from ...flow.options import check_numbers
from ...flow.training import Distill, pick_device
from . import deployed, evaluation, family, formats, models as yolo, naming, sources, training
from .data import check_label_file
from .head import CLASS_BRANCHES, branch_groups
from .incremental import BoundedMAP, bounded_metric
from .inputs import as_module, autoprune_meta, is_checkpoint_file, prepare
from .names import FAMILIES, canonical_arch, resolve_arch
from .settings import YoloSettings
from .stages import RUN
from .strides import check_input_size
from .train_args import check_train_args

built_arch = naming.built_arch  # (its former home)
EvalImages = sources.EvalImages


class DetectionAdapter(TaskAdapter):
    """Detection task: builds patched YOLO models, trains them with Ultralytics (the pruned
    module itself, never a rebuild from YAML), and validates mAP50-95 / mAP50 with Ultralytics'
    validator on the val split of a data.yaml (or its first ``eval_limit`` images)."""

    task = "detection"
    metric = "map50_95"
    higher_is_better = True
    kind = "YOLO"                             # the models, in words
    # what a YOLO sub-task declares instead (see .family): Ultralytics' classes of the task...
    ultralytics = family.DETECT
    yolo_task, model_class, head_class = "detect", yolo.DetectionModel, yolo.Detect
    trainer_class = yolo.KeepModuleTrainer    # keeps the pruned module (and trains under torchrun)
    validator_class = yolo.PatientValidator   # the validator (NMS without a time limit)
    folds_batchnorm = True                    # it validates a fused copy (Ultralytics' fuse)
    # ...its models' names (a sub-task: a names.HeadVariant as ``variant``)...
    families, arch_suffix = FAMILIES, ""
    canonical_arch = staticmethod(canonical_arch)  # "yolov8n" of a name, or None
    resolve_arch = staticmethod(resolve_arch)      # the same, a ConfigError if unknown
    model_hint = "a YOLO detection model (e.g. 'yolov8n.yaml')"  # for a model of another head
    # ...autoprune's metric names and Ultralytics' letters of them (map50_95 <- mAP50-95(B))...
    metric_sources: tuple[tuple[str, str], ...] = (("", "B"),)
    # ...and where they differ: a label file's check, the loss weights its head adds to
    # train_args, how COCO / VOC data are converted for it (None: YOLO data only)
    check_labels = staticmethod(check_label_file)
    train_arg_numbers: frozenset[str] = frozenset()
    labels: formats.LabelKind | None = formats.BOXES
    # the head's branches as wide as the labels say (a DEFAULT profile adopts another width)
    label_branches: tuple[str, ...] = CLASS_BRANCHES
    # distill=True: Ultralytics' own feature distillation (its DistillationModel), when it has it
    distills = yolo.DistillationModel is not None
    no_distill_reason = (f"the installed Ultralytics {yolo.ultralytics.__version__} has no "
                         f"knowledge distillation (its distill_model argument, June 2026 on): "
                         f"pip install -U ultralytics")

    stage_files = ("ultralytics",)  # Ultralytics' own run of a stage (weights/, results.csv)
    build_keys = build_counts = ("num_classes", "nc")  # nc: the name in older checkpoints

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        family.declare(cls)

    @classmethod
    def arch_of_model(cls, model: Any) -> str | None:
        """The key of a built model (:func:`.naming.built_arch`), None when it is not one of this
        task's."""
        return naming.built_arch(model, cls.canonical_arch, cls.arch_suffix)

    def __init__(self, data: str | os.PathLike | None = None,
                 eval_data: str | os.PathLike | None = None, *,
                 settings: YoloSettings | None = None, num_classes: int | None = None,
                 seed: int = 0, progress: bool = True, cache_root: str | os.PathLike | None = None,
                 class_names: Sequence[str] | None = None, **given: Any):
        """The data (a YOLO data.yaml, a COCO or VOC set) and the settings of
        :class:`~.settings.YoloSettings` (where they are documented): ``settings=``, or its
        fields as keywords. ``num_classes`` (``nc``, its former name): when there are no data;
        ``workers``: the former name of ``num_workers``; ``cache_root``: where COCO / VOC data
        are converted; ``class_names``: the class names (in id order) of the checkpoint the data
        are used with, or the names of a checkpoint when there are no data: COCO / VOC classes
        are mapped to them by name, YOLO data must name them so (an empty list: a checkpoint
        that records no names, with which a VOC set of no class order is refused)."""
        nc, workers = given.pop("nc", None), given.pop("workers", None)  # the former names
        s = settings_of(YoloSettings, settings, given, self.task)
        nc = num_classes if num_classes is not None else nc
        workers = s.num_workers if workers is None else workers
        workers = 0 if workers is None else workers
        batch_size = 16 if s.batch_size is None else s.batch_size
        check_numbers(whole=True, low=1, input_size=s.input_size)
        check_numbers(whole=True, num_workers=workers)
        check_numbers(low=None, batch_size=batch_size)  # -1 and fractions: Ultralytics' AutoBatch
        check_limits(eval_limit=s.eval_limit)
        self.input_size = int(s.input_size or 640)
        if self.input_size < 32 or self.input_size % 32:
            raise ConfigError(f"input_size={self.input_size} must be a multiple of 32 (YOLO's "
                              f"largest stride), at least 32: e.g. 64, 320 or 640")
        self.device = pick_device(s.device)
        self.batch_size, self.num_workers = batch_size, workers
        self.seed, self.progress = seed, progress
        self.sync_bn = bool(s.sync_bn)  # under torchrun on GPUs: SyncBatchNorm while training
        # an allow-list: no key names a file
        self.train_args = check_train_args(s.train_args, self.train_arg_numbers)
        self.eval_limit = s.eval_limit
        self.sources: dict[str, Any] = {}  # COCO / VOC data converted to YOLO (formats.py)
        self._start_weights: dict[str, Any] | None = None  # where pretrained weights came from
        self._given = (data, eval_data, s.data_format, cache_root, nc)
        sources.read_data(self, class_names)
        self._tmpdir: tempfile.TemporaryDirectory | None = None  # validator outputs, val subset
        self._val_yaml: Path | None = None
        self._loader = None


    def use_model_names(self, model_names: Sequence[str] | None) -> None:
        """Map the data's classes to the names (in id order) of the checkpoint they are used
        with, once it is known (an analysis of a checkpoint): COCO / VOC data are converted again
        in that order; YOLO data must name them so (see ``class_names`` of the constructor)."""
        if model_names is None or (model_names and self.names and [
                self.names[i] for i in sorted(self.names)] == [str(n) for n in model_names]):
            return
        self.sources = {}
        sources.read_data(self, model_names)

    @classmethod
    def from_settings(cls, settings: YoloSettings, inputs: Mapping[str, Any],
                      flow: Any) -> "DetectionAdapter":
        """The adapter of a ``train`` call (COCO / VOC data converted under the run's
        save_dir, their classes mapped to those of the checkpoint it starts from)."""
        return cls(**{k: v for k, v in inputs.items() if k != "model"}, settings=settings,
                   cache_root=flow.save_dir, seed=flow.seed, progress=flow.progress,
                   class_names=cls._names_of(inputs.get("model"), flow.pretrain_weights))

    @classmethod
    def _names_of(cls, *starts: Any) -> list[str] | None:
        """The class names of the first of ``starts`` that is an autoprune checkpoint of this
        task (an empty list when it records none); None when none is."""
        for start in starts:
            if is_checkpoint_file(start) and (meta := autoprune_meta(start)) is not None \
                    and meta.get("task") in (None, cls.task):
                return cls.checkpoint_settings(meta)["class_names"]
        return None

    def loaded_weights(self, provenance: dict[str, Any] | None) -> None:
        """Record where the weights :meth:`prepare_model` started from came from."""
        self._start_weights = provenance

    def start_weights(self) -> dict[str, Any] | None:
        return self._start_weights

    def describe_data(self) -> str | None:
        """``coco, 2 splits, 80 classes, 5,000 val images`` (:func:`.sources.describe_data`)."""
        return sources.describe_data(self)

    @property
    def nc(self) -> int | None:
        """The number of classes under Ultralytics' name (``num_classes``)."""
        return self.num_classes

    # -- settings --------------------------------------------------------------------------------
    @classmethod
    def check_settings(cls, settings: Any, flow: Any) -> None:
        """``distill`` (:meth:`check_distill`) and ``train_args`` (an allow-list), before any
        data is read."""
        cls.check_distill(flow.distill, settings.train_args)
        check_train_args(settings.train_args, cls.train_arg_numbers)

    @classmethod
    def checkpoint_settings(cls, meta: dict[str, Any]) -> dict[str, Any]:
        """The class count (``nc`` in older files) and class names a checkpoint was built with."""
        build = meta.get("build") or {}
        names = (meta.get("data") or {}).get("class_names")
        known = isinstance(names, list) and bool(names) and all(isinstance(n, str) for n in names)
        return {"num_classes": build.get("num_classes", build.get("nc")),
                "class_names": list(names) if known else []}

    def data_settings(self) -> dict[str, Any]:
        """The data's class names (in id order), kept with the checkpoints: a model loaded later
        names its classes, and a run on data of other names is told apart."""
        return {"class_names": [self.names[i] for i in sorted(self.names)]} if self.names else {}

    @classmethod
    def is_own_checkpoint(cls, path: Any) -> bool:
        """An autoprune checkpoint (not an Ultralytics .pt)."""
        return autoprune_meta(path) is not None

    def analysis_model(self, model: Any) -> Any:
        """A YOLO object or an Ultralytics .pt as its (patched) module, checked against the data;
        an autoprune checkpoint or a name as it is."""
        if is_checkpoint_file(model) and self.is_own_checkpoint(model):
            self.use_model_names(self._names_of(model))
            return model
        module, _ = as_module(model)
        if module is None:
            return model
        self.check_model(module)
        return module

    def prepare_model(self, model: Any, pretrain_weights: Any, save_dir: Path) -> tuple[Any, Any]:
        """A YAML name, an autoprune checkpoint, an Ultralytics .pt (loaded through its
        allow-list), a YOLO object or a module, as a name plus weights or a module (see
        :func:`.inputs.prepare`)."""
        return prepare(self, model, pretrain_weights, save_dir)

    # -- the TaskAdapter protocol ----------------------------------------------------------------
    def arch_key(self, model: Any) -> str | None:
        """``yolov8n``... of a name, a .pt checkpoint or a built model (:func:`.naming.arch_key`;
        a ConfigError for an unknown name)."""
        return naming.arch_key(self, model)

    def build(self, arch: str, num_classes: int | None = None, nc: int | None = None,
              **extra: Any) -> nn.Module:
        """An untrained, patched (split-free) model of ``arch`` (``nc``: the former name);
        ``extra``: what :meth:`new_model` of the task takes besides (other keys are ignored)."""
        classes = num_classes or nc or self.num_classes
        if classes is None:
            raise ConfigError("the number of classes is unknown: pass data=<data.yaml> or "
                              "num_classes=")
        with yolo.quiet():
            model = self.new_model(f"{self.resolve_arch(arch)}.yaml", classes, **extra)
        if self.names and len(self.names) == classes:
            model.names = dict(self.names)
        return yolo.patch_model(model).eval()

    def new_model(self, yaml_name: str, num_classes: int, **_: Any) -> nn.Module:
        """Ultralytics' model of the task built from ``yaml_name`` (a task with more than class
        counts to set overrides this)."""
        return self.model_class(yaml_name, nc=num_classes, verbose=False)

    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        return {"num_classes": yolo.model_nc(model) or self.num_classes}

    def check_head(self, model: nn.Module) -> None:
        """Refuse a model without the task's head (``head_class``)."""
        if not any(isinstance(m, self.head_class) for m in model.modules()):
            raise ConfigError(f"{type(model).__name__} has no YOLO {self.head_class.__name__} "
                              f"head: pass {self.model_hint}")

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model that is not a patched YOLO model of the task (its head) and of the
        data's classes."""
        self.check_head(model)
        out = yolo.model_nc(model)
        if self.num_classes is not None and out != self.num_classes:
            raise ConfigError(f"the model predicts {out} classes but the data has "
                              f"{self.num_classes}: "
                              f"pass its YAML name (e.g. 'yolov8n.yaml', built for the data) or "
                              f"use data with {out} classes")
        check_input_size(model, self.input_size)  # a P6 head: a multiple of 64
        yolo.patch_model(model)

    def example_inputs(self, model: nn.Module) -> torch.Tensor:
        return torch.rand(1, 3, self.input_size, self.input_size,
                          generator=torch.Generator().manual_seed(0)).to(_device_of(model))

    def timing_inputs(self, model: nn.Module) -> torch.Tensor:
        return self.example_inputs(model)

    def ignored_layers(self, model: nn.Module) -> list[Any]:
        """The layers whose output channels stay (the task's ``ultralytics.ignored_layers``)."""
        return type(self).ultralytics.ignored_layers(model)

    def label_width_groups(self, model: nn.Module) -> set[str]:
        """The groups in the Detect head's :attr:`label_branches` (``cv3``: ``max(64, min(nc,
        100))`` channels in YOLOv8n, so a COCO model's are wider than a 10-class profile's)."""
        return branch_groups(model, type(self).label_branches)

    def arch_of(self, model: nn.Module) -> str | None:
        """The architecture key of a built model, from the YAML it was made from."""
        return self.arch_of_model(model)

    # -- training --------------------------------------------------------------------------------
    @classmethod
    def check_distill(cls, distill: Any,
                      train_args: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``distill`` for an Ultralytics task: False/None (off) or True, Ultralytics' feature
        distillation (:func:`.training.check_distill`)."""
        return training.check_distill(cls, distill, train_args)

    def distill_recipe(self, distill: Any) -> dict[str, Any] | None:
        """See :meth:`check_distill` (with this adapter's ``train_args``)."""
        return self.check_distill(distill, self.train_args)

    def fit(self, model: nn.Module, epochs: int, save_dir: Path,
            meta: dict[str, Any] | None = None, resume: bool = False,
            distill: Distill | None = None) -> nn.Module:
        """Train ``model`` itself with Ultralytics for ``epochs``; returns it holding the best
        (EMA) weights. Ultralytics' run lives in ``save_dir/ultralytics`` (its ``weights/best.pt``
        loads with ``YOLO(path)``); autoprune checkpoints go to ``save_dir/best.pt|last.pt``.
        ``resume=True`` continues an interrupted run from Ultralytics' ``last.pt`` (a finished
        one is not trained again). ``distill``: its teacher's features are distilled with
        Ultralytics' ``DistillationModel`` (weight ``train_args["dis"]``; alpha and temperature
        do not apply); the checkpoints hold the student alone.

        Under torchrun every rank trains its own copy of ``model`` as Ultralytics' DDP workers do
        (``batch_size`` is the total, split over the ranks; ``sync_bn`` swaps in SyncBatchNorm on
        GPUs); rank 0 alone validates and writes, and every rank returns the best weights
        (:func:`.training.fit`)."""
        return training.fit(self, model, epochs, save_dir, meta, resume, distill)

    def deployables(self, save_dir: Path) -> list[tuple[str, Path]]:
        """Ultralytics' ``best.pt`` of the stage (``YOLO(path)``; no autoprune needed once
        written back with native blocks)."""
        best = Path(save_dir) / RUN / "weights" / "best.pt"
        return [("Ultralytics model", best)] if best.is_file() else []

    def trained_epochs(self, save_dir: Path) -> tuple[int, int] | None:
        """``(finished, planned)`` epochs of the Ultralytics run in ``save_dir/ultralytics``."""
        return training.trained_epochs(save_dir)

    # -- deployment ------------------------------------------------------------------------------
    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17,
                    dynamic_batch: bool = True) -> Path:
        """``model`` as ONNX at ``path`` with Ultralytics' export head (detection: one ``(batch,
        4 + nc, anchors)`` output, boxes xywh and class scores; a sub-task's head adds its own;
        NMS is left to the caller); any batch size unless ``dynamic_batch`` is False."""
        net = self.deploy_module(model)
        size = self.input_size
        return export_onnx(net, torch.zeros(1, 3, size, size), path, opset_version=opset_version,
                           dynamic_batch=dynamic_batch, metadata=self.onnx_metadata(model))

    def onnx_metadata(self, model: nn.Module) -> dict[str, Any]:
        """What Ultralytics' exporter writes into an ONNX file (``YOLO("model.onnx")`` reads
        the names, stride and input size back): :func:`.deployed.ultralytics_metadata`."""
        return deployed.ultralytics_metadata(model, task=self.yolo_task, names=self.names,
                                             input_size=self.input_size)

    def calibration_inputs(self, limit: int) -> list[torch.Tensor]:
        """Train images letterboxed as the validator feeds them (:mod:`.deployed`)."""
        return deployed.calibration_images(self, limit)

    def evaluate_deployed(self, onnx: Any, threads: int | None = None,
                          runtime: str = "onnxruntime") -> dict[str, float]:
        """The metrics of an ONNX file (FP32 or INT8) from Ultralytics' validator, run by ONNX
        Runtime (:func:`.deployed.validate_onnx`); an OpenVINO model is refused in one line."""
        if runtime != "onnxruntime":
            raise ConfigError(f"quantize='int8' measures a {self.task} model with Ultralytics' "
                              f"validator in ONNX Runtime only: pass latency_runtime="
                              f"'onnxruntime' (the INT8 model then runs in ONNX Runtime)")
        return deployed.validate_onnx(self, onnx)

    def deploy_module(self, model: nn.Module) -> nn.Module:
        """A float CPU copy of ``model`` with Ultralytics' export head (one output tensor per
        head; what ONNX Runtime runs): :func:`.deployed.deploy_module`."""
        return deployed.deploy_module(model)

    # -- evaluation ------------------------------------------------------------------------------
    def with_eval_limit(self, limit: int) -> "DetectionAdapter":
        """This adapter validating on the first ``limit`` val images (the sensitivity analysis'
        ``eval_images``); it keeps its own temp folder and loader."""
        return evaluation.with_eval_limit(self, limit)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """The task's mAPs (fractions; :meth:`metrics_of`) from its Ultralytics validator on the
        (limited) val split (:func:`.evaluation.evaluate`)."""
        return evaluation.evaluate(self, model)

    def incremental_eval(self) -> BoundedMAP | None:
        """The metric batch by batch with a sure upper bound, for the adaptive analysis's early
        stop (:mod:`.incremental`); None without val data or for a metric that is not a mAP."""
        which = bounded_metric(self)
        return BoundedMAP(self, *which) if which and self.eval_data is not None and \
            self.eval_set is not None else None

    def _val_data_yaml(self) -> Path:
        """The data.yaml the validator reads (:func:`.evaluation.val_data_yaml`)."""
        return evaluation.val_data_yaml(self)

    @classmethod
    def metrics_of(cls, stats: dict[str, Any]) -> dict[str, float]:
        """autoprune's metrics from Ultralytics' (``metrics/mAP50-95(B)``...): ``map50_95``,
        ``map50`` for detection, a sub-task's beside its box ones (``metric_sources``)."""
        return evaluation.metrics_of(stats, cls.metric_sources)


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")
