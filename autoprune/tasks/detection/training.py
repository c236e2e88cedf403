"""A YOLO adapter's training: a stage trained with Ultralytics (the pruned module itself, never a
rebuild from YAML), resumed from Ultralytics' ``last.pt``, under torchrun on every rank (DDP),
with Ultralytics' own feature distillation when asked; autoprune's checkpoints written after."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ...engine.distributed import barrier, rank_and_world
from ...engine.progress import counted
from ...errors import ConfigError
from ...flow.options import check_numbers
from ...flow.training import Distill
from . import models as yolo
from .stages import (RUN, FinishedRun, ResumeStep, load_checkpoint, resume_step,
                     ultralytics_last, write_checkpoints, write_deployable)


def check_distill(adapter_class: Any, distill: Any,
                  train_args: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """``distill`` for an Ultralytics task: False/None (off) or True: Ultralytics' feature
    distillation, recorded as ``{"method": "ultralytics-features", "dis": w}`` (its weight
    ``dis`` from ``train_args``, else Ultralytics' default); a mapping (classification's alpha
    and temperature) or an Ultralytics too old to distil is a one-line ConfigError."""
    if distill is None or distill is False:
        return None
    task = adapter_class.task
    if distill is not True:
        raise ConfigError(f"distill={distill!r:.60} for {task}: pass distill=True "
                          f"(Ultralytics' feature distillation; its weight is "
                          f"train_args={{'dis': 6.0}}): alpha and temperature belong to "
                          f"the logit distillation of classification and segmentation")
    if not adapter_class.distills:
        raise ConfigError(f"distill is not offered for {task} here: "
                          f"{adapter_class.no_distill_reason}; or drop distill")
    dis = (train_args or {}).get("dis", yolo.DEFAULT_CFG_DICT.get("dis"))
    if isinstance(dis, bool) or not isinstance(dis, (int, float)) or not dis >= 0 \
            or dis == float("inf"):
        raise ConfigError(f"train_args dis={dis!r:.40} (the distillation weight) must be a "
                          f"number of at least 0: e.g. 6.0, Ultralytics' default")
    return {"method": "ultralytics-features", "dis": float(dis),
            "description": f"distillation of the unpruned model's features (Ultralytics, "
                           f"weight {float(dis):g})"}


def fit(adapter: Any, model: nn.Module, epochs: int, save_dir: Path,
        meta: dict[str, Any] | None = None, resume: bool = False,
        distill: Distill | None = None) -> nn.Module:
    """:meth:`~.adapter.DetectionAdapter.fit`: train ``model`` itself with Ultralytics for
    ``epochs`` in ``save_dir`` (see there); returns it holding the best weights."""
    if adapter.data is None:
        raise ConfigError("training needs data=<data.yaml> with a train split")
    check_numbers(whole=True, low=1, epochs=epochs)
    rank, world = rank_and_world()
    check_ranks(adapter, world)
    adapter.check_model(model)
    stage = Path(save_dir).resolve()
    meta = dict(meta or {})
    meta["arch"] = meta.get("arch") or adapter.arch_of(model)
    model.criterion = None  # the loss is rebuilt for the (possibly pruned) model
    device = ultralytics_device(adapter.device)
    if world > 1 and adapter.device.type == "cuda":  # the rank's own GPU (set by init_from_env)
        device = str(torch.cuda.current_device())
    step = resume_step(stage, epochs, resume)
    if step is ResumeStep.FRESH and rank == 0:  # a stale table: Ultralytics' ranks would race
        (stage / RUN / "results.csv").unlink(missing_ok=True)
    barrier()  # every rank has looked at the stage before rank 0 writes into it
    if step is ResumeStep.DONE:
        log(f"[autoprune] {stage} already finished its {counted(epochs, 'epoch')}: using its "
            f"best.pt")
        load_checkpoint(model, stage / "best.pt")
        write_deployable(stage)
        return model.to(adapter.device).eval()
    trainer = yolo.keep_module_trainer(
        model, adapter.trainer_class, sync_bn=adapter.sync_bn and world > 1,
        teacher=distill.teacher if distill is not None else None)
    threads = torch.get_num_threads()
    try:
        if step is ResumeStep.WRITE:  # Ultralytics finished, autoprune's files were not written
            finished = FinishedRun.on_disk(stage)
        elif step is ResumeStep.CONTINUE:
            finished = resume_stage(adapter, stage, epochs, distill, device)
        else:
            with yolo.quiet(not adapter.progress):
                run = trainer(overrides=trainer_args(adapter, stage, epochs, meta, device))
                run.train()
            finished = FinishedRun.of(run)
    finally:
        torch.set_num_threads(threads)
    model.criterion = None
    if rank == 0:
        loaded = write_checkpoints(model, finished, stage, meta, epochs,
                                   lambda metrics: metrics_if_any(adapter, metrics))
        write_deployable(stage, loaded)
    barrier()  # rank 0 has written best.pt
    if rank != 0:
        load_checkpoint(model, stage / "best.pt")
    return model.to(adapter.device).eval()


def trainer_args(adapter: Any, stage: Path, epochs: int, meta: dict[str, Any],
                 device: str) -> dict[str, Any]:
    """Ultralytics' trainer arguments of a stage: autoprune's settings, then ``train_args``
    (an allow-list of hyper-parameters)."""
    return {"model": f"{meta['arch'] or 'yolo'}.yaml", "data": str(adapter.data["yaml"]),
            "epochs": epochs, "imgsz": adapter.input_size, "batch": adapter.batch_size,
            "device": device, "workers": adapter.num_workers, "seed": adapter.seed,
            "project": str(stage), "name": RUN, "exist_ok": True, "plots": False,
            "verbose": adapter.progress,
            # Ultralytics' AMP check downloads yolo26n.pt: off unless asked for (on a GPU,
            # train_args={"amp": "bf16"} gives mixed precision without that check)
            "amp": False, **adapter.train_args}


def resume_stage(adapter: Any, stage: Path, epochs: int, distill: Distill | None,
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
    log(f"[autoprune] resuming {stage} after epoch {ckpt.get('epoch', -1) + 1}/{epochs}")
    trainer = yolo.keep_module_trainer(
        None, adapter.trainer_class, sync_bn=adapter.sync_bn and rank_and_world()[1] > 1,
        teacher=distill.teacher if distill is not None else None)
    return FinishedRun.of(yolo.resume_training(last, adapter.progress, trainer,
                                               check_labels=adapter.check_labels,
                                               device=device).trainer)


def metrics_if_any(adapter: Any, metrics: dict[str, Any]) -> dict[str, float]:
    """autoprune's metrics of Ultralytics' (none when it recorded none)."""
    return adapter.metrics_of(metrics) if "metrics/mAP50-95(B)" in metrics else {}


def check_ranks(adapter: Any, world: int) -> None:
    """Settings that cannot work over ``world`` torchrun processes: a one-line ConfigError."""
    if world <= 1:
        return
    if adapter.batch_size < 1:
        raise ConfigError(f"batch_size={adapter.batch_size} (Ultralytics' AutoBatch) sizes one "
                          f"GPU: under torchrun pass the total batch, e.g. "
                          f"batch_size={16 * world}")
    if adapter.batch_size < world:
        raise ConfigError(f"batch_size={adapter.batch_size} is the total over {world} "
                          f"processes: pass at least {world} (one image per process)")
    if adapter.sync_bn and adapter.device.type != "cuda":
        raise ConfigError(f"sync_bn=True needs CUDA GPUs (SyncBatchNorm has no "
                          f"{adapter.device.type} kernel): drop sync_bn, or train on GPUs")


def trained_epochs(save_dir: Path) -> tuple[int, int] | None:
    """``(finished, planned)`` epochs of the Ultralytics run in ``save_dir/ultralytics``."""
    last = ultralytics_last(save_dir)
    if not last.is_file():
        return None
    _, ckpt = yolo.read_ultralytics(last)
    planned = int((ckpt.get("train_args") or {}).get("epochs") or 0)
    epoch = ckpt.get("epoch", -1)
    return (planned, planned) if epoch == -1 else (int(epoch) + 1, planned)


def log(line: str) -> None:
    """``line`` on rank 0 only."""
    if rank_and_world()[0] == 0:
        print(line, flush=True)


def ultralytics_device(device: torch.device) -> str:
    """Ultralytics' spelling of a device: ``"0"`` for the first GPU, ``"cpu"``."""
    if device.type == "cuda":
        return str(device.index or 0)
    return device.type


__all__ = ["check_distill", "check_ranks", "fit", "log", "metrics_if_any", "resume_stage",
           "trained_epochs", "trainer_args", "ultralytics_device"]
