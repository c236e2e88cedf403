"""The trainer that fine-tunes the given (pruned) module instead of rebuilding it from YAML, in one
process or in torchrun's (DDP over the process group it finds), and the resumption of a run."""
from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn as nn

from ...engine.fast_copy import fast_copies_in
from ...errors import ConfigError
from ...flow.training import use_sync_batchnorm
from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)
from .checkpoints import load_ultralytics, read_ultralytics
from .data import check_label_file, read_data_yaml
from .train_args import check_stored_args
from .console import quiet
from .ddp import cpu_ddp, group_size, one_process, plain_batchnorm
from .twins import patch_model
from .validator import PatientValidator

from ultralytics import YOLO  # noqa: E402
from ultralytics.engine import trainer as ultralytics_trainer  # noqa: E402
from ultralytics.models.yolo.detect import DetectionTrainer  # noqa: E402
from ultralytics.utils import torch_utils as ultralytics_torch_utils  # noqa: E402
from ultralytics.utils.torch_utils import unwrap_model  # noqa: E402

try:  # Ultralytics' knowledge distillation (its `distill_model` argument), June 2026 on
    from ultralytics.nn.distill_model import DistillationModel, FeatureHook  # noqa: E402
except ImportError:  # an older Ultralytics: detection cannot distil
    DistillationModel = FeatureHook = None


class KeepModuleTrainer(DetectionTrainer):
    """DetectionTrainer that trains the module it is given instead of rebuilding it from YAML.

    Ultralytics' own ``get_model`` builds a fresh model from the YAML and copies the tensors whose
    shapes match, which silently undoes pruning. Here a module passed as ``weights`` (resume, a
    loaded checkpoint) or given as ``module`` (an in-memory model) is used as it is. Ultralytics
    makes the trainer itself (``trainer=`` of ``YOLO.train``): :func:`keep_module_trainer`
    gives it the factory that binds ``module``, ``teacher`` and ``sync_bn``. Resume a run with
    ``YOLO(last_pt).train(resume=True, trainer=KeepModuleTrainer)``.

    Inside torchrun's processes (a process group of several ranks already initialised, each rank
    holding its own copy of the pruned module) it trains as Ultralytics' DDP workers do, over
    that group: gloo on CPU ranks, whatever backend the group has on GPUs, each rank on the
    device it was given; Ultralytics' own launcher, which rebuilds the model from YAML in a
    subprocess, is never used. Rank 0 alone writes checkpoints and validates best.pt at the end.
    ``sync_bn`` trains with ``SyncBatchNorm``; checkpoints keep BatchNorm.
    ``teacher`` (a frozen model) is distilled with Ultralytics' own
    ``DistillationModel`` (its ``distill_model`` argument, given the module instead of a path;
    ``train_args={"dis": w}`` weighs the term): a resumed run rebuilds the wrapper around it,
    checkpoints never hold it, and the trained module keeps no feature hook afterwards.
    """

    _restore_bn = None
    _best_metrics: dict | None = None  # the validation of the epoch best.pt holds, this process
    patient_validator: type = PatientValidator  # a task's twin: its own validator's twin

    def __init__(self, *args, module: nn.Module | None = None, teacher: nn.Module | None = None,
                 sync_bn: bool = False, **kwargs):
        self.module, self.teacher, self.sync_bn = module, teacher, sync_bn
        super().__init__(*args, **kwargs)
        world = group_size()
        if world > 1:
            from ultralytics.engine import trainer as base

            if base.RANK == -1:  # Ultralytics read no RANK: every rank would write the run
                raise ConfigError("detection training on several processes needs torchrun's "
                                  "environment (RANK, LOCAL_RANK, WORLD_SIZE): launch it with "
                                  "`torchrun --nproc_per_node N ...`")
            self.world_size, self.ddp = world, False  # a DDP worker already, not a launcher

    def _setup_ddp(self):
        """torchrun's process group is up already: pin this rank's GPU, start nothing."""
        if group_size() <= 1:
            return super()._setup_ddp()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if dist.get_rank() == 0:
            print(f"[autoprune] DistributedDataParallel over {self.world_size} processes "
                  f"({dist.get_backend()}), {self.batch_size // self.world_size} images per "
                  f"process per step", flush=True)

    def get_model(self, cfg=None, weights=None, verbose=True):
        m = weights if isinstance(weights, nn.Module) else self.module
        if m is None:
            return super().get_model(cfg, weights, verbose)
        m = patch_model(m)  # an unpatched checkpoint trains as well, and stays prunable
        if self.data.get("names"):
            m.names = self.data["names"]
        return m.float().requires_grad_(True)  # checkpoints are stored frozen, in half precision

    @contextmanager
    def _teacher_as_distill_model(self) -> Iterator[None]:
        """Ultralytics wraps the student in a DistillationModel (a new run: in ``_setup_train``;
        a resumed one: in ``setup_model``) when ``args.distill_model`` is set: it is the teacher
        module while that happens, and None again before any checkpoint saves the arguments."""
        if self.teacher is None:
            yield
            return
        before, self.args.distill_model = self.args.distill_model, self.teacher
        try:
            yield
        finally:
            self.args.distill_model = before

    def setup_model(self):
        with self._teacher_as_distill_model():
            ckpt = super().setup_model()
        if self.sync_bn and self._restore_bn is None:
            self._restore_bn = use_sync_batchnorm(self.model)
        return ckpt

    def _setup_train(self):
        """Ultralytics' set-up; the EMA's copy of the model by
        :func:`~autoprune.engine.fast_copy.fast_deepcopy`."""
        with cpu_ddp(self.device.type == "cpu" and self.world_size > 1), \
                self._teacher_as_distill_model(), fast_copies_in(ultralytics_torch_utils):
            super()._setup_train()
        if self.sync_bn:  # the EMA (what checkpoints hold) is a copy: plain BatchNorm again
            plain_batchnorm(self.ema.ema)

    def _do_train(self):
        try:
            super()._do_train()
        finally:
            if self._restore_bn is not None:  # the module trained keeps its BatchNorm modules
                self._restore_bn()
                self._restore_bn = None
            drop_feature_hooks(unwrap_model(self.model))

    def save_model(self):
        """Ultralytics' checkpoint, its content unchanged, with its two deep copies (the EMA
        model, the optimizer's state) made by :func:`~autoprune.engine.fast_copy.fast_deepcopy`:
        0.2 s less per epoch for a YOLOv8n (a third of its save). The metrics of the epoch that
        best.pt now holds are kept for :meth:`final_eval`."""
        with fast_copies_in(ultralytics_trainer):
            saved = super().save_model()
        if self.fitness is not None and self.best_fitness == self.fitness and self.metrics:
            self._best_metrics = {**self.metrics, "fitness": self.fitness}
        return saved

    def final_eval(self):
        """Ultralytics strips the optimizer from last.pt and best.pt, then validates best.pt
        again. In one process the metrics are those its epoch's validation measured on the same
        weights (the EMA that best.pt holds, before its half-precision storage) when this
        process saw that epoch (else the real validation runs): a whole validation pass less per
        stage (autoprune's report evaluates the models itself). Under torchrun (where each rank
        validated its own shard) rank 0 alone validates best.pt on the whole val split."""
        if self.world_size <= 1 or group_size() <= 1:
            if self._best_metrics is None:  # e.g. resumed after its best epoch
                return super().final_eval()
            validator, self.validator = self.validator, _Replay(self.validator, self._best_metrics)
            try:
                return super().final_eval()
            finally:
                self.validator = validator
        if dist.get_rank() == 0:
            self.validator.dataloader = None  # it held this rank's shard of the val split
            with one_process():
                super().final_eval()
        dist.barrier()

    def get_validator(self):
        validator = super().get_validator()  # the task's own (the next trainer in the bases)
        validator.__class__ = self.patient_validator  # the same validator, NMS without a limit
        return validator


class _Replay:
    """A validator that answers with the metrics it was given (those of best.pt's epoch): the
    real one's settings (``args``) and everything else stay the real one's."""

    def __init__(self, validator: object, metrics: dict) -> None:
        self._validator, self._metrics = validator, metrics

    def __getattr__(self, name: str):
        return getattr(self._validator, name)

    def __call__(self, *args, **kwargs) -> dict:
        return dict(self._metrics)


def drop_feature_hooks(model: nn.Module) -> None:
    """Remove the feature-capturing hooks Ultralytics' DistillationModel left on ``model``'s
    layers (the student it wrapped, or the wrapper itself): they would keep every forward's
    outputs alive."""
    if FeatureHook is None:
        return
    for module in model.modules():
        for key, hook in list(module._forward_hooks.items()):
            if isinstance(hook, FeatureHook):
                del module._forward_hooks[key]


def keep_module_trainer(module: nn.Module | None, base: type[KeepModuleTrainer] | None = None,
                        *, sync_bn: bool = False,
                        teacher: nn.Module | None = None) -> Callable[..., KeepModuleTrainer]:
    """What Ultralytics calls to make its trainer (``trainer(overrides=..., _callbacks=...)``):
    ``base`` (KeepModuleTrainer, or another task's twin of it) training ``module`` (an in-memory
    model; None: the module of the checkpoint it resumes), with ``SyncBatchNorm`` when
    ``sync_bn``, distilling ``teacher`` (a frozen model) when given."""
    return functools.partial(base or KeepModuleTrainer, module=module, sync_bn=sync_bn,
                             teacher=teacher)


def resume_training(last: str | os.PathLike, progress: bool = True,
                    trainer: Callable[..., KeepModuleTrainer] | None = None, *,
                    check_labels: Callable[[Path, int], None] = check_label_file, **overrides):
    """Continue an interrupted Ultralytics run from its ``last.pt`` with :class:`KeepModuleTrainer`
    (or ``trainer``: a subclass of it, or :func:`keep_module_trainer`'s factory; the pruned
    module itself trains on); ``check_labels``: the task's label check its data.yaml is read
    with again; ``overrides``: the settings Ultralytics lets a resumed run change (``device``...).
    Returns the ``YOLO`` object, its ``trainer`` done."""
    load_ultralytics(last)  # refuses a file of unknown classes before Ultralytics unpickles it
    stored = read_ultralytics(last)[1].get("train_args") or {}
    check_stored_args(stored, last)  # no file named in it is loaded unchecked
    if stored.get("data") is not None:  # read as autoprune does: a missing split is named here,
        # never fetched by the data.yaml's `download:` script
        read_data_yaml(stored["data"], check_labels=check_labels)
    threads = torch.get_num_threads()
    try:
        with quiet(not progress):
            wrapper = YOLO(str(last))
            # the run folder is where last.pt lies now (a moved run resumes in place)
            wrapper.train(resume=True, trainer=trainer or KeepModuleTrainer,
                          save_dir=str(Path(last).resolve().parent.parent), **overrides)
    finally:
        torch.set_num_threads(threads)
    return wrapper


__all__ = ["DistillationModel", "KeepModuleTrainer", "drop_feature_hooks",
           "keep_module_trainer", "resume_training"]
