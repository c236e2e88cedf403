"""The supervised training loop: SGD with momentum (or AdamW), linear warm-up then cosine decay,
AMP on CUDA, DDP under torchrun, a progress bar per epoch and one log line per epoch; a run's
random states kept so a resumed run equals an uninterrupted one."""
from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from ...engine.distributed import all_reduce_sum, rank_and_world
from ...engine.measure import flush_denormals
from ...engine.progress import progress_bar
from ...errors import ConfigError, TrainingDivergedError
from .distill import Distill, kd_loss, prepare_teacher


@dataclass
class FitConfig:
    """Hyper-parameters of :func:`fit`."""

    epochs: int = 1
    lr: float = 0.05
    optimizer: str = "sgd"          # "sgd" or "adamw"
    weight_decay: float = 5e-4
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    progress: bool = True
    sync_bn: bool = False           # under torchrun on GPUs: BatchNorm statistics over all ranks
    seed: int | None = None         # fit_keep_best: torch seeded with it when a run starts afresh


def _optimizer(model: nn.Module, cfg: FitConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay,
                               nesterov=True)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise ConfigError(f"optimizer={cfg.optimizer!r} is unknown: use 'sgd' or 'adamw'")


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """LR multiplier: linear warm-up over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def use_sync_batchnorm(model: nn.Module) -> Callable[[], None]:
    """Swap every BatchNorm of ``model`` for a ``SyncBatchNorm`` sharing its weights and running
    statistics (in place); returns the function that puts the original modules back, holding what
    training taught the synced ones. Pruning, saving and export expect the plain modules."""
    swapped: dict[str, tuple[nn.Module, nn.Module]] = {}
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(
                module, nn.SyncBatchNorm) and name:
            synced = nn.SyncBatchNorm.convert_sync_batchnorm(module)
            model.set_submodule(name, synced)
            swapped[name] = (module, synced)

    def restore() -> None:
        for name, (original, synced) in swapped.items():
            for key in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                if getattr(synced, key, None) is not None:
                    setattr(original, key, getattr(synced, key))
            original.train(synced.training)
            model.set_submodule(name, original)

    return restore


def fit(model: nn.Module, loader: DataLoader, cfg: FitConfig, *, device: torch.device,
        loss_fn: Callable | None = None,
        on_epoch_end: Callable[[int, float, dict[str, Any]], None] | None = None,
        state: dict[str, Any] | None = None, distill: Distill | None = None) -> list[float]:
    """Train ``model`` on ``loader`` for ``cfg.epochs``; returns the mean loss of each epoch.

    ``distill``: a frozen teacher (see :class:`Distill`) whose outputs on the same batch (no
    gradient, eval mode, under the same autocast) add ``alpha * kd_loss`` to the task loss.

    ``on_epoch_end(epoch, loss, state)`` gets the loop's resumable state after each epoch
    (epochs done, optimizer, LR schedule, GradScaler, RNG states, losses); passing such a
    ``state`` back continues with the next epoch as if the run had never stopped.

    Under torch.distributed (torchrun, several ranks) the model trains as
    ``DistributedDataParallel`` (gradients averaged over the ranks, each reading its shard of a
    loader made with ``make_loader(..., shard=True)``); the epoch losses are the ranks' mean.
    ``cfg.sync_bn`` then normalises with statistics over all ranks' images (``SyncBatchNorm``,
    CUDA only); the model holds plain BatchNorm modules again when ``fit`` returns or raises."""
    loss_fn = loss_fn or nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    model.to(device).train()
    rank, world = rank_and_world()
    if not (cfg.sync_bn and world > 1):
        return _fit(model, loader, cfg, device, loss_fn, on_epoch_end, state, distill)
    if device.type != "cuda":
        raise ConfigError(f"sync_bn=True needs CUDA GPUs (SyncBatchNorm has no {device.type} "
                          f"kernel): drop sync_bn, or train on GPUs")
    restore = use_sync_batchnorm(model)
    try:
        return _fit(model, loader, cfg, device, loss_fn, on_epoch_end, state, distill)
    finally:
        restore()


def _fit(model: nn.Module, loader: DataLoader, cfg: FitConfig, device: torch.device,
         loss_fn: Callable, on_epoch_end: Callable | None,
         state: dict[str, Any] | None, distill: Distill | None = None) -> list[float]:
    rank, world = rank_and_world()
    if distill is not None:
        prepare_teacher(distill.teacher, device)
    net = _ddp(model, device, loader)
    flush_denormals()
    loop = _Loop(model, cfg, loader, device)
    history = loop.restore(state, loader)
    for epoch in range(len(history), cfg.epochs):
        model.train()
        if hasattr(loader.sampler, "set_epoch"):  # a DistributedSampler: a new shuffle per epoch
            loader.sampler.set_epoch(epoch)
        running, seen = 0.0, 0
        # a bar on a terminal; in a log, the line per epoch printed after it is enough
        bar = progress_bar(loader, desc=f"epoch {epoch + 1}/{cfg.epochs}", leave=False,
                           enabled=cfg.progress and rank == 0, lines=False)
        for inputs, targets in bar:
            labels = targets  # as the loader gives them (on the CPU): checked before the loss
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            loss = _batch_loss(net, inputs, targets, loss_fn, distill, loop.use_amp, device,
                               labels)
            diverged = not torch.isfinite(loss)
            if world > 1:  # every rank stops together (a lone raise would hang the others)
                diverged = all_reduce_sum(float(diverged), device) > 0
            if diverged:
                raise TrainingDivergedError(f"training loss became {loss.item()} in epoch "
                                            f"{epoch + 1}: lower the learning rate (lr={cfg.lr})")
            loop.step(loss)
            running += loss.item() * len(targets)
            seen += len(targets)
            bar.set_postfix(loss=f"{running / seen:.4f}", lr=f"{loop.lr:.4g}")
        if world > 1:
            running, seen = all_reduce_sum(running, device), all_reduce_sum(seen, device)
        history.append(running / max(1, seen))
        if on_epoch_end:
            on_epoch_end(epoch, history[-1], {"history": list(history), **loop.state(loader)})
    return history


def _ddp(model: nn.Module, device: torch.device, loader: DataLoader) -> nn.Module:
    """``model`` as DistributedDataParallel under torchrun (on the rank's own GPU), else as is."""
    rank, world = rank_and_world()
    if world <= 1:
        return model
    gpus = None
    if device.type == "cuda":  # plain "cuda": the rank's own GPU (set by init_from_env)
        gpus = [device.index if device.index is not None else torch.cuda.current_device()]
    if rank == 0:
        print(f"[autoprune] DistributedDataParallel over {world} processes, "
              f"{loader.batch_size} images per process per step", flush=True)
    return nn.parallel.DistributedDataParallel(model, device_ids=gpus)


class _Loop:
    """The optimizer, warm-up + cosine schedule and AMP scaler of one training run."""

    def __init__(self, model: nn.Module, cfg: FitConfig, loader: DataLoader,
                 device: torch.device):
        self.opt = _optimizer(model, cfg)
        total, warmup = cfg.epochs * len(loader), int(cfg.warmup_epochs * len(loader))
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: warmup_cosine(s, total, warmup))
        self.use_amp = device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.use_amp)

    def restore(self, state: dict[str, Any] | None, loader: DataLoader) -> list[float]:
        """Continue from a saved loop ``state``; the epoch losses so far."""
        if state is None:
            return []
        self.opt.load_state_dict(state["optimizer"])  # before the schedule: it sets each lr
        self.sched.load_state_dict(state["scheduler"])
        if state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        _set_rng_states(state["rng"], loader)
        return list(state["history"])

    def step(self, loss: torch.Tensor) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()

    @property
    def lr(self) -> float:
        return self.sched.get_last_lr()[0]

    def state(self, loader: DataLoader) -> dict[str, Any]:
        """What a resumed run needs of the loop (besides the epoch losses)."""
        return {"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                "scaler": self.scaler.state_dict(), "rng": _rng_states(loader)}


def _batch_loss(net: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn: Callable,
                distill: Distill | None, use_amp: bool, device: torch.device,
                labels: torch.Tensor | None = None) -> torch.Tensor:
    """The training loss of one batch: the task loss, with ``distill``'s term when given.
    ``labels``: the targets as the loader gave them, checked against the outputs' classes."""
    with torch.autocast(device.type, enabled=use_amp):
        outputs = net(inputs)
        try:
            _labels_in_range(outputs, targets if labels is None else labels, loss_fn)
            loss = loss_fn(outputs, targets)
        except IndexError as e:  # CrossEntropy on a label >= the number of outputs
            raise ConfigError(f"a training label is out of range ({e}): labels must be "
                              f"0 .. num_classes - 1; build the model with a num_classes "
                              f"that covers every label") from None
        if distill is not None:
            with torch.no_grad():
                teacher_out = distill.teacher(inputs)
            kd = (distill.kd_loss or kd_loss)(outputs, teacher_out, distill.temperature)
            loss = (1 - distill.alpha) * loss + distill.alpha * kd
    return loss


def _labels_in_range(outputs: Any, labels: Any, loss_fn: Callable) -> None:
    """IndexError for a class label outside ``0 .. outputs.shape[1] - 1`` (the loss's
    ``ignore_index`` aside). On a GPU such a label is a device-side assert that breaks the
    process's CUDA context for good, so it is checked here, on the loader's (CPU) copy."""
    if not (isinstance(outputs, torch.Tensor) and isinstance(labels, torch.Tensor)) \
            or outputs.dim() < 2 or labels.is_floating_point() or labels.dtype == torch.bool:
        return
    valid = labels[labels != getattr(loss_fn, "ignore_index", -100)]
    if not valid.numel():
        return
    low, high, classes = int(valid.min()), int(valid.max()), outputs.shape[1]
    if low < 0 or high >= classes:
        raise IndexError(f"Target {high if high >= classes else low} is out of bounds for "
                         f"{classes} classes.")


def _rng_states(loader: DataLoader) -> dict[str, Any]:
    """The random states a training epoch draws from: torch's (CPU, CUDA) and the loader's
    shuffle generator, all as tensors (weights-only loadable)."""
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "loader": loader.generator.get_state() if loader.generator is not None else None}


def _set_rng_states(states: dict[str, Any], loader: DataLoader) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if states["loader"] is not None and loader.generator is not None:
        loader.generator.set_state(states["loader"])
