"""Detection adapter: Ultralytics YOLO (the families of :mod:`.names`) on a YOLO ``data.yaml``
(read by :mod:`.data`); Ultralytics trains and validates, mAP50-95 is the metric. Ultralytics is
reached through :mod:`.models` (whose modules import it offline: see :mod:`.offline`)."""
from __future__ import annotations

import copy
import hashlib
import os
import re
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn as nn
import yaml

from ...flow.options import check_numbers
from ...engine.checkpoint import export_onnx, read_pruned_metadata, save_pruned
from ...engine.data import check_limits
from ...engine.distributed import barrier, rank_and_world
from ...errors import CheckpointError, ConfigError
from ...flow.training import Distill, pick_device
from ..base import TaskAdapter
from . import models as yolo
from .data import read_data_yaml
from .names import FAMILIES, canonical_arch, resolve_arch
from .stages import ema_state, load_checkpoint, write_deployable
from .train_args import check_train_args



def arch_of_model(model: Any) -> str | None:
    """The key (``yolov8n``...) of a YOLO object or DetectionModel, from the YAML it was built
    from (its file name, or the family plus its ``scale``); None when it is not one of ours."""
    if isinstance(model, yolo.YOLOModel):
        model = model.model
    cfg = getattr(model, "yaml", None)
    if not isinstance(cfg, dict):
        return None
    stem = re.sub(r"\.(ya?ml|pt)$", "", Path(str(cfg.get("yaml_file") or "")).name.lower())
    scale = str(cfg.get("scale") or "")
    for candidate in (stem, stem + scale):
        key = canonical_arch(candidate)
        if key:
            return key
    return None


def build_yolo(arch: str, nc: int, names: dict[int, str] | None = None) -> nn.Module:
    """An untrained, patched (split-free) DetectionModel of ``arch`` with ``nc`` classes."""
    with yolo.quiet():
        model = yolo.DetectionModel(f"{resolve_arch(arch)}.yaml", nc=nc, verbose=False)
    if names and len(names) == nc:
        model.names = dict(names)
    return yolo.patch_model(model).eval()


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
    kind, families = "YOLO", FAMILIES         # the models' names, in words
    canonical_arch = staticmethod(canonical_arch)  # "yolov8n" of a name, or None
    resolve_arch = staticmethod(resolve_arch)      # the same, a ConfigError if unknown
    arch_of_model = staticmethod(arch_of_model)    # the key of a built model, or None
    # distill=True: Ultralytics' own feature distillation (its DistillationModel), when it has it
    distills = yolo.DistillationModel is not None
    no_distill_reason = (f"the installed Ultralytics {yolo.ultralytics.__version__} has no "
                         f"knowledge distillation (its distill_model argument, June 2026 on): "
                         f"pip install -U ultralytics")

    def __init__(self, data: str | os.PathLike | None = None,
                 eval_data: str | os.PathLike | None = None, *, nc: int | None = None,
                 input_size: int | None = None, batch_size: int = 16,
                 eval_limit: int | None = None, device: str = "auto", workers: int = 0,
                 train_args: dict[str, Any] | None = None, seed: int = 0,
                 progress: bool = True, sync_bn: bool = False):
        check_numbers(whole=True, low=1, input_size=input_size)
        check_numbers(whole=True, num_workers=workers)
        check_numbers(low=None, batch_size=batch_size)  # -1 and fractions: Ultralytics' AutoBatch
        check_limits(eval_limit=eval_limit)
        self.input_size = int(input_size or 640)
        if self.input_size < 32 or self.input_size % 32:
            raise ConfigError(f"input_size={self.input_size} must be a multiple of 32 (YOLO's "
                              f"largest stride), at least 32: e.g. 64, 320 or 640")
        self.device = pick_device(device)
        self.batch_size, self.workers = batch_size, workers
        self.seed, self.progress = seed, progress
        self.sync_bn = bool(sync_bn)  # under torchrun on GPUs: SyncBatchNorm while training
        self.train_args = check_train_args(train_args)  # an allow-list: no key names a file
        self.eval_limit = eval_limit
        self.data = read_data_yaml(data) if data is not None else None
        self.eval_data = self.data if eval_data is None or (
            data is not None and Path(eval_data).resolve() == Path(data).resolve()) \
            else read_data_yaml(eval_data, need_train=False)
        if self.data and self.eval_data and self.data["names"] != self.eval_data["names"]:
            raise ConfigError(f"{self.data['yaml']} and {self.eval_data['yaml']} name different "
                              f"classes: use the same 'names:' in both")
        found = (self.data or self.eval_data or {}).get("nc")
        if nc is not None and found is not None and nc != found:
            raise ConfigError(f"nc={nc} but the data has {found} classes: pass nc={found} or "
                              f"omit it")
        self.nc = nc if nc is not None else found
        self.names = (self.data or self.eval_data or {}).get("names")
        self.eval_set = None
        if self.eval_data is not None:
            self.eval_set = EvalImages(self.eval_data["val"][:eval_limit])
        self._tmpdir: tempfile.TemporaryDirectory | None = None  # validator outputs, val subset
        self._val_yaml: Path | None = None
        self._loader = None

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

    def build(self, arch: str, nc: int | None = None, **_: Any) -> nn.Module:
        nc = nc or self.nc
        if nc is None:
            raise ConfigError("the number of classes is unknown: pass data=<data.yaml> or nc=")
        return build_yolo(arch, nc, self.names)

    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        return {"nc": yolo.model_nc(model) or self.nc}

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model that is not a patched YOLO detector of the data's classes."""
        if yolo.detect_head(model) is None:
            raise ConfigError(f"{type(model).__name__} has no YOLO Detect head: pass a YOLO "
                              f"detection model (e.g. 'yolov8n.yaml')")
        out = yolo.model_nc(model)
        if self.nc is not None and out != self.nc:
            raise ConfigError(f"the model predicts {out} classes but the data has {self.nc}: "
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
        return {"method": "ultralytics-features", "dis": float(dis)}

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
        save_dir = Path(save_dir).resolve()
        meta = dict(meta or {})
        meta["arch"] = meta.get("arch") or self.arch_of(model)
        model.criterion = None  # the loss is rebuilt for the (possibly pruned) model
        device = _ultralytics_device(self.device)
        if world > 1 and self.device.type == "cuda":  # the rank's own GPU (set by init_from_env)
            device = str(torch.cuda.current_device())
        args = {"model": f"{meta['arch'] or 'yolo'}.yaml", "data": str(self.data["yaml"]),
                "epochs": epochs, "imgsz": self.input_size, "batch": self.batch_size,
                "device": device, "workers": self.workers,
                "seed": self.seed, "project": str(save_dir), "name": "ultralytics",
                "exist_ok": True, "plots": False, "verbose": self.progress,
                # Ultralytics' AMP check downloads yolo26n.pt: off unless asked for (on a GPU,
                # train_args={"amp": "bf16"} gives mixed precision without that check)
                "amp": False, **self.train_args}
        last = save_dir / "ultralytics" / "weights" / "last.pt"
        step = self._resume_step(last, epochs, save_dir) if resume and last.is_file() else None
        if step is None and rank == 0:  # a stale run's table: Ultralytics' ranks would race on it
            (save_dir / "ultralytics" / "results.csv").unlink(missing_ok=True)
        barrier()  # every rank has looked at save_dir before rank 0 writes into it
        trainer_class = yolo.keep_module_trainer(
            model, self.trainer_class, sync_bn=self.sync_bn and world > 1,
            teacher=distill.teacher if distill is not None else None)
        threads = torch.get_num_threads()
        try:
            if step == "done":  # finished before: its best.pt holds the result
                _log(f"[autoprune] {save_dir} already finished its {epochs} epochs: using its "
                     f"best.pt")
                load_checkpoint(model, save_dir / "best.pt")
                write_deployable(save_dir)
                return model.to(self.device).eval()
            if step == "write":  # Ultralytics finished, autoprune's checkpoints were not written
                trainer = SimpleNamespace(last=last, best=last.parent / "best.pt", stopper=None,
                                          metrics=None)
            elif step == "continue":
                wrapped, ckpt = yolo.read_ultralytics(last)
                was = yolo.DistillationModel is not None and \
                    isinstance(wrapped, yolo.DistillationModel)
                if was != (distill is not None):
                    raise ConfigError(f"{last} was {'' if was else 'not '}distilling the "
                                      f"unpruned model: resume with the same settings ("
                                      f"{'distill=True' if was else 'without distill'}), or "
                                      f"pass resume=False")
                _log(f"[autoprune] resuming {save_dir} after epoch {ckpt.get('epoch', -1) + 1}/"
                     f"{epochs}")
                trainer_class.module = None  # the module of last.pt trains on
                trainer = yolo.resume_training(last, self.progress, trainer_class,
                                               device=device).trainer
            else:
                with yolo.quiet(not self.progress):
                    trainer = trainer_class(overrides=args)
                    trainer.train()
        finally:
            torch.set_num_threads(threads)
        model.criterion = None
        if rank == 0:
            self._write_checkpoints(model, trainer, save_dir, meta, epochs)
            write_deployable(save_dir)
        barrier()  # rank 0 has written best.pt
        if rank != 0:
            load_checkpoint(model, save_dir / "best.pt")
        return model.to(self.device).eval()

    def _write_checkpoints(self, model: nn.Module, trainer: Any, save_dir: Path,
                           meta: dict[str, Any], epochs: int) -> None:
        """autoprune's ``last.pt`` and ``best.pt`` from Ultralytics' (``model`` ends holding the
        best EMA weights)."""
        best_epoch = getattr(trainer.stopper, "best_epoch", epochs) or epochs
        for src, dst in ((trainer.last, "last.pt"), (trainer.best, "best.pt")):
            if Path(src).is_file():
                model.load_state_dict(ema_state(src))
                best = dst == "best.pt"
                save_pruned(model, save_dir / dst, **meta, epoch=best_epoch if best else epochs,
                            metrics=self._ultralytics_metrics(trainer) if best else {},
                            ultralytics_weights=str(Path(src)))

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
        best = Path(save_dir) / "ultralytics" / "weights" / "best.pt"
        return [("Ultralytics model", best)] if best.is_file() else []

    def trained_epochs(self, save_dir: Path) -> tuple[int, int] | None:
        """``(finished, planned)`` epochs of the Ultralytics run in ``save_dir/ultralytics``."""
        last = Path(save_dir) / "ultralytics" / "weights" / "last.pt"
        if not last.is_file():
            return None
        _, ckpt = yolo.read_ultralytics(last)
        planned = int((ckpt.get("train_args") or {}).get("epochs") or 0)
        epoch = ckpt.get("epoch", -1)
        return (planned, planned) if epoch == -1 else (int(epoch) + 1, planned)

    @staticmethod
    def _resume_step(last: Path, epochs: int, save_dir: Path) -> str:
        """What resuming the stage of ``last`` takes (read only): ``"continue"`` an interrupted
        run, ``"write"`` autoprune's checkpoints of a run Ultralytics finished, or nothing more
        (``"done"``: ``save_dir/best.pt`` holds the result)."""
        _, ckpt = yolo.read_ultralytics(last)
        planned = (ckpt.get("train_args") or {}).get("epochs")
        if planned != epochs:
            raise ConfigError(f"{last} is from a run of {planned} epochs, this one has {epochs}: "
                              f"resume with the same settings, or pass resume=False")
        if ckpt.get("epoch", -1) != -1:
            return "continue"
        return "done" if (save_dir / "best.pt").is_file() else "write"

    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17,
                    dynamic_batch: bool = True) -> Path:
        """``model`` as ONNX at ``path`` with Ultralytics' export head: one ``(batch, 4 + nc,
        anchors)`` output (boxes xywh, class scores; NMS is left to the caller); any batch size
        unless ``dynamic_batch`` is False."""
        net = copy.deepcopy(model).float().cpu().eval()
        for m in net.modules():
            if isinstance(m, yolo.Detect):
                m.export, m.format = True, "onnx"
        size = self.input_size
        return export_onnx(net, torch.zeros(1, 3, size, size), path, opset_version=opset_version,
                           dynamic_batch=dynamic_batch)

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
                "workers": self.workers, "task": self.yolo_task, "split": "val",
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
            self._val_yaml.write_text(yaml.safe_dump(
                {"path": str(self._tmp), "train": str(listing), "val": str(listing),
                 "names": self.names}, sort_keys=False))
        return self._val_yaml

    @staticmethod
    def metrics_of(stats: dict[str, Any]) -> dict[str, float]:
        """autoprune's metrics from Ultralytics' (``metrics/mAP50-95(B)``...): ``map50_95``,
        ``map50``."""
        return {"map50_95": float(stats["metrics/mAP50-95(B)"]),
                "map50": float(stats["metrics/mAP50(B)"])}

    def _ultralytics_metrics(self, trainer: Any) -> dict[str, float]:
        m = trainer.metrics or {}
        if "metrics/mAP50-95(B)" not in m:
            return {}
        return self.metrics_of(m)


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
