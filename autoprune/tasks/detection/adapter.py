"""Detection adapter: Ultralytics YOLO (the families of :mod:`.names`) on a YOLO ``data.yaml``
(read by :mod:`.data`); Ultralytics trains and validates, mAP50-95 is the metric. Ultralytics is
reached through :mod:`.models` (whose modules import it offline: see :mod:`.offline`)."""
from __future__ import annotations

import copy
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn as nn
import yaml

from ...flow.config import settings_of
from ...flow.options import check_numbers
from ...engine.checkpoint import export_onnx, read_pruned_metadata
from ...engine.data import check_limits
from ...engine.distributed import barrier, rank_and_world
from ...errors import CheckpointError, ConfigError
from ...flow.training import Distill, pick_device
from ...flow.contract import TaskAdapter
from . import deployed, formats, models as yolo
from .data import check_label_file, read_data_yaml
from .names import FAMILIES, canonical_arch, model_stem, resolve_arch
from .stages import (RUN, FinishedRun, ResumeStep, load_checkpoint, resume_step,
                     ultralytics_last, write_checkpoints, write_deployable)
from .inputs import as_module, autoprune_meta, is_checkpoint_file, prepare
from .settings import YoloSettings
from .train_args import check_train_args



def built_arch(model: Any, canonical: Callable[[str], str | None] = canonical_arch,
               suffix: str = "") -> str | None:
    """The key (``yolov8n``, ``yolo11n-seg``...) of a YOLO object or model, from the YAML it was
    built from (its file name, or the family plus its ``scale``: ``yolov8-seg.yaml`` + n), read
    with ``canonical``; None when it is not one of ours."""
    if isinstance(model, yolo.YOLOModel):
        model = model.model
    cfg = getattr(model, "yaml", None)
    if not isinstance(cfg, dict):
        return None
    stem = model_stem(cfg.get("yaml_file") or "")
    candidates = [stem]
    if stem.endswith(suffix):
        candidates.append(f"{stem[:len(stem) - len(suffix)]}{cfg.get('scale') or ''}{suffix}")
    for candidate in candidates:
        key = canonical(candidate)
        if key:
            return key
    return None


class EvalImages(list):
    """The validation images evaluated (its ``len`` is recorded in sensitivity files)."""


# -- the adapter ---------------------------------------------------------------------------------
class DetectionAdapter(TaskAdapter):
    """Detection task: builds patched YOLO models, trains them with Ultralytics (the pruned
    module itself, never a rebuild from YAML), and validates mAP50-95 / mAP50 with Ultralytics'
    validator on the val split of a data.yaml (or its first ``eval_limit`` images)."""

    task = "detection"
    metric = "map50_95"
    higher_is_better = True
    # what another Ultralytics task (instance segmentation) changes in a subclass
    yolo_task = "detect"                      # Ultralytics' name of the task
    # the trainer that keeps the pruned module (and trains it under torchrun)
    trainer_class = yolo.KeepModuleTrainer
    validator_class = yolo.PatientValidator   # the validator (NMS without a time limit)
    model_class = yolo.DetectionModel         # Ultralytics' model class of the task
    check_labels = staticmethod(check_label_file)  # a label file's lines (a ConfigError if bad)
    kind, families = "YOLO", FAMILIES         # the models' names, in words
    canonical_arch = staticmethod(canonical_arch)  # "yolov8n" of a name, or None
    resolve_arch = staticmethod(resolve_arch)      # the same, a ConfigError if unknown
    arch_suffix = ""                               # a head variant's models' names end with it
    train_arg_numbers: frozenset[str] = frozenset()  # the loss weights its head adds to train_args
    # distill=True: Ultralytics' own feature distillation (its DistillationModel), when it has it
    distills = yolo.DistillationModel is not None
    no_distill_reason = (f"the installed Ultralytics {yolo.ultralytics.__version__} has no "
                         f"knowledge distillation (its distill_model argument, June 2026 on): "
                         f"pip install -U ultralytics")

    stage_files = ("ultralytics",)  # Ultralytics' own run of a stage (weights/, results.csv)
    build_keys = build_counts = ("num_classes", "nc")  # nc: the name in older checkpoints

    @classmethod
    def arch_of_model(cls, model: Any) -> str | None:
        """The key of a built model (:func:`built_arch`), None when it is not one of this task's."""
        return built_arch(model, cls.canonical_arch, cls.arch_suffix)

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
        self._read_data(class_names)
        self._tmpdir: tempfile.TemporaryDirectory | None = None  # validator outputs, val subset
        self._val_yaml: Path | None = None
        self._loader = None

    def _read_data(self, model_names: Sequence[str] | None) -> None:
        """Read (converting COCO / VOC once) the data and eval data given to the constructor,
        their classes mapped to ``model_names`` (see ``class_names`` there)."""
        data, eval_data, data_format, cache_root, nc = self._given
        data = self._as_yolo("data", data, data_format, cache_root, model_names)
        eval_data = self._as_yolo("eval_data", eval_data, data_format, cache_root, model_names)
        self.data = read_data_yaml(data, check_labels=self.check_labels) \
            if data is not None else None
        self.eval_data = self.data if eval_data is None or (
            data is not None and Path(eval_data).resolve() == Path(data).resolve()) \
            else read_data_yaml(eval_data, need_train=False, check_labels=self.check_labels)
        if self.data and self.eval_data and self.data["names"] != self.eval_data["names"]:
            raise ConfigError(f"{self.data['yaml']} and {self.eval_data['yaml']} name different "
                              f"classes: use the same 'names:' in both")
        found = (self.data or self.eval_data or {}).get("nc")
        if nc is not None and found is not None and nc != found:
            raise ConfigError(f"num_classes={nc} but the data has {found} classes: pass "
                              f"num_classes={found} or omit it")
        self.num_classes = nc if nc is not None else found
        # the data's class names, else a checkpoint's (class_names: read back from its metadata)
        self.names = (self.data or self.eval_data or {}).get("names") or \
            (dict(enumerate(map(str, model_names))) if model_names else None)
        self.eval_set = None
        if self.eval_data is not None:
            self.eval_set = EvalImages(self.eval_data["val"][:self.eval_limit])
        self._check_names(model_names)

    def _check_names(self, model_names: Sequence[str] | None) -> None:
        """Refuse data whose class names (YOLO's, in its order) are not the model's."""
        data = self.data or self.eval_data
        if not model_names or data is None:
            return
        mine = [str(data["names"][i]) for i in sorted(data["names"])]
        theirs = [str(n) for n in model_names]
        if mine != theirs and len(mine) == len(theirs):  # (another count is named elsewhere)
            same = "the same classes in another order" if sorted(mine) == sorted(theirs) \
                else "other classes"
            raise ConfigError(f"the model was trained on {same} ({', '.join(theirs[:6])}"
                              f"{', …' if len(theirs) > 6 else ''}) than {data['yaml']} names "
                              f"({', '.join(mine[:6])}{', …' if len(mine) > 6 else ''}): their "
                              f"ids would be evaluated one for one; list the model's names in "
                              f"that order in the data.yaml (and its labels), or pass the data "
                              f"as COCO / VOC to have it mapped by name")

    def use_model_names(self, model_names: Sequence[str] | None) -> None:
        """Map the data's classes to the names (in id order) of the checkpoint they are used
        with, once it is known (an analysis of a checkpoint): COCO / VOC data are converted again
        in that order; YOLO data must name them so (see ``class_names`` of the constructor)."""
        if model_names is None or (model_names and self.names and [
                self.names[i] for i in sorted(self.names)] == [str(n) for n in model_names]):
            return
        self.sources = {}
        self._read_data(model_names)

    def _as_yolo(self, key: str, path: Any, data_format: str | None,
                 cache_root: str | os.PathLike | None,
                 model_names: Sequence[str] | None = None) -> Any:
        """The YOLO data.yaml of ``path``: itself, or a COCO / VOC set converted once into a
        cache under ``cache_root`` (the run's save_dir; a temp folder without one), never next
        to the user's data, its classes mapped to ``model_names``."""
        if path is None:
            return None
        if data_format not in (None, "yolo") and self.yolo_task not in formats.TASKS:
            raise ConfigError(f"data_format={data_format!r}: {self.task} reads YOLO data.yaml "
                              f"files only; convert the data to YOLO labels")
        if self.yolo_task not in formats.TASKS or not Path(path).exists() or (
                data_format in (None, "yolo") and formats.detect_format(path) == "yolo"):
            return path  # read_data_yaml names a missing file
        root = Path(cache_root) if cache_root is not None else \
            Path(tempfile.gettempdir()) / f"autoprune-data-{os.getuid()}"
        source = formats.prepare_yolo_data(
            path, data_format=data_format, task=self.yolo_task,
            cache_dir=formats.cache_dir_for(root, path, self.yolo_task),
            model_names=None if model_names is None else [str(n) for n in model_names])
        self.sources[key] = source
        return source.yaml

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
        """``coco, 2 splits, 80 classes, 5,000 val images`` (a YOLO data.yaml: its split
        sizes)."""
        if "data" in self.sources or "eval_data" in self.sources:
            return "; ".join(source.describe() for source in self.sources.values())
        sizes = [f"{len(self.data[s]):,} {s}" for s in ("train", "val")
                 if self.data and self.data.get(s)]
        if self.eval_data is not None and self.eval_data is not self.data:
            sizes.append(f"{len(self.eval_data['val']):,} val (eval_data)")
        return f"yolo, {self.num_classes} classes, {' + '.join(sizes)} images"

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
        """``yolov8n``... of a name (``"yolov8n.yaml"``; ConfigError if unknown), a .pt checkpoint
        (autoprune's metadata, or the YAML inside an Ultralytics one), or a YOLO object /
        DetectionModel (None if unknown)."""
        if not isinstance(model, (str, os.PathLike)):
            return self.arch_of_model(model)
        path = Path(model)
        if path.suffix.lower() == ".pt" and path.is_file() \
                and not self.canonical_arch(path.stem.lower()):
            try:
                arch = read_pruned_metadata(path).get("arch")
            except CheckpointError:  # an Ultralytics checkpoint (a pickle: the user's own file)
                arch = self.arch_of_model(yolo.load_ultralytics(path))
            if arch is None:
                raise ConfigError(f"{path} does not say which {self.kind} model it holds: pass "
                                  f"its YAML name ({self.families})")
            return arch
        return self.resolve_arch(str(model))

    def build(self, arch: str, num_classes: int | None = None, nc: int | None = None,
              **_: Any) -> nn.Module:
        """An untrained, patched (split-free) model of ``arch`` (``nc``: the former name)."""
        classes = num_classes or nc or self.num_classes
        if classes is None:
            raise ConfigError("the number of classes is unknown: pass data=<data.yaml> or "
                              "num_classes=")
        with yolo.quiet():
            model = self.new_model(f"{self.resolve_arch(arch)}.yaml", classes)
        if self.names and len(self.names) == classes:
            model.names = dict(self.names)
        return yolo.patch_model(model).eval()

    def new_model(self, yaml_name: str, num_classes: int) -> nn.Module:
        """Ultralytics' model of the task built from ``yaml_name`` (a task with more than class
        counts to set, such as pose's keypoint shape, overrides this)."""
        return self.model_class(yaml_name, nc=num_classes, verbose=False)

    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        return {"num_classes": yolo.model_nc(model) or self.num_classes}

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model that is not a patched YOLO detector of the data's classes."""
        if yolo.detect_head(model) is None:
            raise ConfigError(f"{type(model).__name__} has no YOLO Detect head: pass a YOLO "
                              f"detection model (e.g. 'yolov8n.yaml')")
        out = yolo.model_nc(model)
        if self.num_classes is not None and out != self.num_classes:
            raise ConfigError(f"the model predicts {out} classes but the data has "
                              f"{self.num_classes}: "
                              f"pass its YAML name (e.g. 'yolov8n.yaml', built for the data) or "
                              f"use data with {out} classes")
        yolo.patch_model(model)

    def example_inputs(self, model: nn.Module) -> torch.Tensor:
        return torch.rand(1, 3, self.input_size, self.input_size,
                          generator=torch.Generator().manual_seed(0)).to(_device_of(model))

    def timing_inputs(self, model: nn.Module) -> torch.Tensor:
        return self.example_inputs(model)

    def ignored_layers(self, model: nn.Module) -> list[Any]:
        return yolo.ignored_layers(model)

    def arch_of(self, model: nn.Module) -> str | None:
        """The architecture key of a built model, from the YAML it was made from."""
        return self.arch_of_model(model)

    @classmethod
    def check_distill(cls, distill: Any,
                      train_args: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """``distill`` for an Ultralytics task: False/None (off) or True: Ultralytics' feature
        distillation, recorded as ``{"method": "ultralytics-features", "dis": w}`` (its weight
        ``dis`` from ``train_args``, else Ultralytics' default); a mapping (classification's
        alpha and temperature) or an Ultralytics too old to distil is a one-line ConfigError."""
        if distill is None or distill is False:
            return None
        if distill is not True:
            raise ConfigError(f"distill={distill!r:.60} for {cls.task}: pass distill=True "
                              f"(Ultralytics' feature distillation; its weight is "
                              f"train_args={{'dis': 6.0}}): alpha and temperature belong to "
                              f"the logit distillation of classification and segmentation")
        if not cls.distills:
            raise ConfigError(f"distill is not offered for {cls.task} here: "
                              f"{cls.no_distill_reason}; or drop distill")
        dis = (train_args or {}).get("dis", yolo.DEFAULT_CFG_DICT.get("dis"))
        if isinstance(dis, bool) or not isinstance(dis, (int, float)) or not dis >= 0 \
                or dis == float("inf"):
            raise ConfigError(f"train_args dis={dis!r:.40} (the distillation weight) must be a "
                              f"number of at least 0: e.g. 6.0, Ultralytics' default")
        return {"method": "ultralytics-features", "dis": float(dis),
                "description": f"distillation of the unpruned model's features (Ultralytics, "
                               f"weight {float(dis):g})"}

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
        GPUs); rank 0 alone validates and writes, and every rank returns the best weights."""
        if self.data is None:
            raise ConfigError("training needs data=<data.yaml> with a train split")
        check_numbers(whole=True, low=1, epochs=epochs)
        rank, world = rank_and_world()
        self._check_ranks(world)
        self.check_model(model)
        stage = Path(save_dir).resolve()
        meta = dict(meta or {})
        meta["arch"] = meta.get("arch") or self.arch_of(model)
        model.criterion = None  # the loss is rebuilt for the (possibly pruned) model
        device = _ultralytics_device(self.device)
        if world > 1 and self.device.type == "cuda":  # the rank's own GPU (set by init_from_env)
            device = str(torch.cuda.current_device())
        step = resume_step(stage, epochs, resume)
        if step is ResumeStep.FRESH and rank == 0:  # a stale table: Ultralytics' ranks would race
            (stage / RUN / "results.csv").unlink(missing_ok=True)
        barrier()  # every rank has looked at the stage before rank 0 writes into it
        if step is ResumeStep.DONE:
            _log(f"[autoprune] {stage} already finished its {epochs} epochs: using its best.pt")
            load_checkpoint(model, stage / "best.pt")
            write_deployable(stage)
            return model.to(self.device).eval()
        trainer = yolo.keep_module_trainer(
            model, self.trainer_class, sync_bn=self.sync_bn and world > 1,
            teacher=distill.teacher if distill is not None else None)
        threads = torch.get_num_threads()
        try:
            if step is ResumeStep.WRITE:  # Ultralytics finished, autoprune's files were not written
                finished = FinishedRun.on_disk(stage)
            elif step is ResumeStep.CONTINUE:
                finished = self._resume_stage(stage, epochs, distill, device)
            else:
                with yolo.quiet(not self.progress):
                    run = trainer(overrides=self._trainer_args(stage, epochs, meta, device))
                    run.train()
                finished = FinishedRun.of(run)
        finally:
            torch.set_num_threads(threads)
        model.criterion = None
        if rank == 0:
            write_checkpoints(model, finished, stage, meta, epochs, self._metrics_if_any)
            write_deployable(stage)
        barrier()  # rank 0 has written best.pt
        if rank != 0:
            load_checkpoint(model, stage / "best.pt")
        return model.to(self.device).eval()

    def _trainer_args(self, stage: Path, epochs: int, meta: dict[str, Any],
                      device: str) -> dict[str, Any]:
        """Ultralytics' trainer arguments of a stage: autoprune's settings, then ``train_args``
        (an allow-list of hyper-parameters)."""
        return {"model": f"{meta['arch'] or 'yolo'}.yaml", "data": str(self.data["yaml"]),
                "epochs": epochs, "imgsz": self.input_size, "batch": self.batch_size,
                "device": device, "workers": self.num_workers, "seed": self.seed,
                "project": str(stage), "name": RUN, "exist_ok": True, "plots": False,
                "verbose": self.progress,
                # Ultralytics' AMP check downloads yolo26n.pt: off unless asked for (on a GPU,
                # train_args={"amp": "bf16"} gives mixed precision without that check)
                "amp": False, **self.train_args}

    def _resume_stage(self, stage: Path, epochs: int, distill: Distill | None,
                      device: str) -> FinishedRun:
        """Resume Ultralytics' interrupted run of ``stage`` (the module of its last.pt trains
        on), with the distillation it started with (else a one-line ConfigError)."""
        last = ultralytics_last(stage)
        wrapped, ckpt = yolo.read_ultralytics(last)
        was = yolo.DistillationModel is not None and isinstance(wrapped, yolo.DistillationModel)
        if was != (distill is not None):
            raise ConfigError(f"{last} was {'' if was else 'not '}distilling the unpruned model: "
                              f"resume with the same settings "
                              f"({'distill=True' if was else 'without distill'}), or pass "
                              f"resume=False")
        _log(f"[autoprune] resuming {stage} after epoch {ckpt.get('epoch', -1) + 1}/{epochs}")
        trainer = yolo.keep_module_trainer(
            None, self.trainer_class, sync_bn=self.sync_bn and rank_and_world()[1] > 1,
            teacher=distill.teacher if distill is not None else None)
        return FinishedRun.of(yolo.resume_training(last, self.progress, trainer,
                                                   check_labels=self.check_labels,
                                                   device=device).trainer)

    def _metrics_if_any(self, metrics: dict[str, Any]) -> dict[str, float]:
        """autoprune's metrics of Ultralytics' (none when it recorded none)."""
        return self.metrics_of(metrics) if "metrics/mAP50-95(B)" in metrics else {}

    def _check_ranks(self, world: int) -> None:
        """Settings that cannot work over ``world`` torchrun processes: a one-line ConfigError."""
        if world <= 1:
            return
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size} (Ultralytics' AutoBatch) sizes one "
                              f"GPU: under torchrun pass the total batch, e.g. "
                              f"batch_size={16 * world}")
        if self.batch_size < world:
            raise ConfigError(f"batch_size={self.batch_size} is the total over {world} "
                              f"processes: pass at least {world} (one image per process)")
        if self.sync_bn and self.device.type != "cuda":
            raise ConfigError(f"sync_bn=True needs CUDA GPUs (SyncBatchNorm has no "
                              f"{self.device.type} kernel): drop sync_bn, or train on GPUs")

    def deployables(self, save_dir: Path) -> list[tuple[str, Path]]:
        """Ultralytics' ``best.pt`` of the stage (``YOLO(path)``; no autoprune needed once
        written back with native blocks)."""
        best = Path(save_dir) / RUN / "weights" / "best.pt"
        return [("Ultralytics model", best)] if best.is_file() else []

    def trained_epochs(self, save_dir: Path) -> tuple[int, int] | None:
        """``(finished, planned)`` epochs of the Ultralytics run in ``save_dir/ultralytics``."""
        last = ultralytics_last(save_dir)
        if not last.is_file():
            return None
        _, ckpt = yolo.read_ultralytics(last)
        planned = int((ckpt.get("train_args") or {}).get("epochs") or 0)
        epoch = ckpt.get("epoch", -1)
        return (planned, planned) if epoch == -1 else (int(epoch) + 1, planned)

    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17,
                    dynamic_batch: bool = True) -> Path:
        """``model`` as ONNX at ``path`` with Ultralytics' export head: one ``(batch, 4 + nc,
        anchors)`` output (boxes xywh, class scores; NMS is left to the caller); any batch size
        unless ``dynamic_batch`` is False."""
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
        head; what ONNX Runtime runs)."""
        net = copy.deepcopy(model).float().cpu().eval()
        for m in net.modules():
            if isinstance(m, yolo.Detect):
                m.export, m.format = True, "onnx"
        return net

    def with_eval_limit(self, limit: int) -> "DetectionAdapter":
        """This adapter validating on the first ``limit`` val images (the sensitivity analysis'
        ``eval_images``); it keeps its own temp folder and loader."""
        subset = copy.copy(self)
        subset.eval_limit = min(limit, self.eval_limit or limit)
        subset.eval_set = EvalImages(self.eval_data["val"][:subset.eval_limit])
        subset._tmpdir, subset._val_yaml, subset._loader = None, None, None
        return subset

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """mAP50-95 and mAP50 (fractions) from Ultralytics' validator on the (limited) val split."""
        if self.eval_data is None:
            raise ConfigError("evaluation needs data=<data.yaml> with a val split")
        net = copy.deepcopy(model).float().eval()
        net.fuse(verbose=False)  # on the copy: AutoBackend would fuse it (and print its FLOPs)
        if not getattr(net, "names", None) or len(net.names) != yolo.model_nc(net):
            net.names = self.names
        args = {"data": str(self._val_data_yaml()), "imgsz": self.input_size,
                "batch": self.batch_size, "device": _ultralytics_device(self.device),
                "plots": False, "verbose": False, "save_json": False,
                "workers": self.num_workers, "task": self.yolo_task, "split": "val",
                "rect": True}  # as Ultralytics validates (YOLO.val, the trainer)
        threads = torch.get_num_threads()
        try:  # under torchrun each rank validates on its own (one_process), in its own temp dir
            with yolo.quiet(), yolo.one_process():
                validator = self.validator_class(dataloader=self._loader, save_dir=self._tmp,
                                                 args=args)
                stats = validator(model=net)
        finally:
            torch.set_num_threads(threads)
        self._loader = validator.dataloader
        return self.metrics_of(stats)

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def _tmp(self) -> Path:
        if self._tmpdir is None:  # removed with the adapter
            self._tmpdir = tempfile.TemporaryDirectory(prefix="autoprune-yolo-")
        return Path(self._tmpdir.name)

    def _val_data_yaml(self) -> Path:
        """The data.yaml the validator reads: the user's, or one listing the first eval_limit
        val images (written once, in a private temp folder)."""
        if self.eval_limit is None or self.eval_limit >= len(self.eval_data["val"]):
            return self.eval_data["yaml"]
        if self._val_yaml is None:
            listing = self._tmp / "val_subset.txt"
            listing.write_text("".join(f"{p}\n" for p in self.eval_set))
            key = hashlib.sha256(listing.read_bytes()).hexdigest()[:8]
            self._val_yaml = self._tmp / f"data_{key}.yaml"
            own = {k: v for k, v in self.eval_data["cfg"].items()  # kpt_shape, flip_idx...
                   if k not in ("path", "train", "val", "test", "names", "nc", "download")}
            self._val_yaml.write_text(yaml.safe_dump(
                {"path": str(self._tmp), "train": str(listing), "val": str(listing),
                 "names": self.names, **own}, sort_keys=False))
        return self._val_yaml

    @staticmethod
    def metrics_of(stats: dict[str, Any]) -> dict[str, float]:
        """autoprune's metrics from Ultralytics' (``metrics/mAP50-95(B)``...): ``map50_95``,
        ``map50``."""
        return {"map50_95": float(stats["metrics/mAP50-95(B)"]),
                "map50": float(stats["metrics/mAP50(B)"])}


def _log(line: str) -> None:
    if rank_and_world()[0] == 0:
        print(line, flush=True)


def _ultralytics_device(device: torch.device) -> str:
    if device.type == "cuda":
        return str(device.index or 0)
    return device.type


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")
