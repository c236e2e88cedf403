"""A small supervised training loop and top-k evaluation, shared by the demo and the task adapters.

SGD with momentum (or AdamW), linear warm-up then cosine decay, AMP on CUDA, a progress bar per
epoch and one log line per epoch.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ..engine.checkpoint import _atomic_save, read_state_dict, save_pruned
from ..engine.distributed import all_reduce_sum, barrier, rank_and_world
from ..errors import CheckpointError, ConfigError, TrainingDivergedError
from ..engine.measure import flush_denormals
from ..engine.progress import progress_bar


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` means CUDA when there is one, else CPU. Every task resolves its ``device`` here:
    a name torch does not know, or a GPU this machine lacks, is a one-line ConfigError; so is a
    request for several GPUs from one process (``[0, 1]``, ``"0,1"``, Ultralytics' way): one
    process drives one device, torchrun starts one process per GPU."""
    several = _several_devices(device)
    if several:
        raise ConfigError(f"device={device!r} asks one process for {several} GPUs: launch one "
                          f"process per GPU with `torchrun --nproc_per_node {several} -m autoprune "
                          f"train config.yaml` (or your script under torchrun) and device='auto'")
    if device == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"  # one GPU per torchrun rank
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={device!r} is not a device: use 'auto', 'cpu', 'cuda' or "
                          f"'cuda:N'") from None
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if resolved.type == "cuda" and (resolved.index or 0) >= gpus:
        have = "no CUDA GPU" if not gpus else "1 GPU: cuda:0" if gpus == 1 else \
            f"{gpus} GPUs: cuda:0 .. cuda:{gpus - 1}"
        raise ConfigError(f"device {device} is not available (this machine has {have}): use "
                          f"device='cpu' or 'auto'")
    return resolved


def _several_devices(device: Any) -> int:
    """How many devices ``device`` names when it names more than one (``[0, 1]``, ``"0,1"``,
    ``"cuda:0,1"``), else 0."""
    if isinstance(device, (list, tuple)):
        return len(device) if len(device) > 1 else 0
    if isinstance(device, str) and "," in device:
        return len([d for d in device.split(":")[-1].split(",") if d.strip()])
    return 0


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


DISTILL_DEFAULTS = {"alpha": 0.5, "temperature": 4.0}


@dataclass(frozen=True)
class Distill:
    """Knowledge distillation from a frozen ``teacher`` during :func:`fit`: the loss becomes
    ``(1 - alpha) * task loss + alpha * kd_loss(student outputs, teacher outputs, temperature)``."""

    teacher: nn.Module
    alpha: float = DISTILL_DEFAULTS["alpha"]
    temperature: float = DISTILL_DEFAULTS["temperature"]
    kd_loss: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None
    recipe: Mapping[str, Any] | None = None  # as the report records it (a task's own recipe)

    @classmethod
    def of(cls, teacher: nn.Module, recipe: Mapping[str, Any]) -> "Distill":
        """The distillation of ``recipe`` (a task's :meth:`distill_recipe`) from ``teacher``:
        logit KD's alpha and temperature when it names them."""
        logit = {k: float(recipe[k]) for k in ("alpha", "temperature") if k in recipe}
        return cls(teacher, **logit, recipe=dict(recipe))


def check_distill(distill: Any) -> dict[str, float] | None:
    """``distill`` as the API takes it (False/None: off; True: the defaults; a mapping with
    ``alpha`` in [0, 1] and ``temperature`` > 0) as ``{"alpha": a, "temperature": t}`` or None;
    anything else is a one-line ConfigError."""
    if distill is None or distill is False:
        return None
    if distill is True:
        return dict(DISTILL_DEFAULTS)
    if not isinstance(distill, dict):
        raise ConfigError(f"distill={distill!r:.60} must be True, False or a mapping such as "
                          f"{{'alpha': 0.5, 'temperature': 4.0}}")
    unknown = sorted(set(map(str, distill)) - set(DISTILL_DEFAULTS))
    if unknown:
        raise ConfigError(f"distill has unknown key(s) {', '.join(unknown)}: use only 'alpha' "
                          f"and 'temperature'")
    out = {**DISTILL_DEFAULTS, **distill}
    for key, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            raise ConfigError(f"distill {key}={value!r:.40} is not a number: pass e.g. "
                              f"{DISTILL_DEFAULTS[key]}")
        out[key] = float(value)
    if not 0.0 <= out["alpha"] <= 1.0:
        raise ConfigError(f"distill alpha={out['alpha']} is outside [0, 1]: the weight of the "
                          f"distillation term, e.g. 0.5")
    if out["temperature"] <= 0:
        raise ConfigError(f"distill temperature={out['temperature']} must be above 0: e.g. 4.0")
    return out


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Hinton's logit distillation: KL(softmax(teacher / T) || softmax(student / T)) * T²,
    over dim 1 (the classes), averaged over every other position: the batch for ``(N, C)``
    logits, the batch and the pixels for ``(N, C, H, W)`` (per-pixel KD). 0 when they agree."""
    t = float(temperature)
    classes = student.shape[1]
    s = student.float().movedim(1, -1).reshape(-1, classes)
    q = teacher.detach().float().movedim(1, -1).reshape(-1, classes)
    return F.kl_div(F.log_softmax(s / t, dim=1), F.log_softmax(q / t, dim=1),
                    reduction="batchmean", log_target=True) * (t * t)


def prepare_teacher(teacher: nn.Module, device: torch.device) -> nn.Module:
    """The teacher as distillation uses it: on ``device``, frozen, in eval mode (it is never
    wrapped in DDP and never saved in a training state)."""
    teacher.to(device).eval()
    teacher.requires_grad_(False)
    return teacher


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
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            loss = _batch_loss(net, inputs, targets, loss_fn, distill, loop.use_amp, device)
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
                distill: Distill | None, use_amp: bool, device: torch.device) -> torch.Tensor:
    """The training loss of one batch: the task loss, with ``distill``'s term when given."""
    with torch.autocast(device.type, enabled=use_amp):
        outputs = net(inputs)
        try:
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


STATE_FILE = "train_state.pt"  # next to last.pt: what a resumed run needs to continue
STATE_VERSION = 1


def read_train_state(path: str | os.PathLike) -> dict[str, Any] | None:
    """The resumable state written by :func:`fit_keep_best` at ``path`` (None when absent);
    weights-only loading."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("not an autoprune training state")
    except Exception as e:  # noqa: BLE001 - truncated zip, foreign pickle, wrong content
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        raise CheckpointError(f"{path} cannot be read as a training state ({first}): delete it "
                              f"to train from scratch, or resume=False") from None
    return state


def fit_keep_best(model: nn.Module, loader: DataLoader, cfg: FitConfig, *,
                  device: torch.device, save_dir: str | Path, meta: dict[str, Any] | None = None,
                  evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
                  metric: str = "", higher_is_better: bool = True,
                  loss_fn: Callable | None = None, resume: bool = False,
                  distill: Distill | None = None) -> nn.Module:
    """:func:`fit` for ``cfg.epochs``, evaluating after each epoch; writes ``last.pt`` every epoch and
    ``best.pt`` whenever ``metric`` improves (or the training loss, without ``evaluate``), both
    through :func:`~autoprune.checkpoint.save_pruned` with ``meta``, then ``train_state.pt``
    (atomic, weights-only: model, optimizer, schedule, RNG states, best score). Returns the model
    holding the best weights.

    ``resume=True`` continues from ``save_dir/train_state.pt`` when there is one (a finished run
    is not trained again); the result equals an uninterrupted run's. ``cfg.seed`` seeds torch at
    the start of a fresh run, so a stage trains the same whatever ran before it.

    Under torch.distributed every rank trains (see :func:`fit`); rank 0 alone evaluates, prints
    and writes the files, and every rank returns the best weights."""
    save_dir, epochs = Path(save_dir), cfg.epochs
    saved = _resumed_state(model, save_dir, epochs, len(loader), resume, cfg.seed)
    keeper = _KeepBest(model, save_dir, epochs, len(loader), meta, device, evaluate, metric,
                       higher_is_better, saved["best_score"] if saved else -math.inf)
    if saved is None or len(saved["history"]) < epochs:
        fit(model, loader, cfg, device=device, loss_fn=loss_fn, on_epoch_end=keeper,
            state=saved, distill=distill)
    elif rank_and_world()[0] == 0:
        print(f"[autoprune] {save_dir} already finished its {epochs} epochs: using its best.pt",
              flush=True)
    barrier()  # rank 0 has written best.pt
    model.load_state_dict(read_state_dict(save_dir / "best.pt"))
    return model


def _resumed_state(model: nn.Module, save_dir: Path, epochs: int, steps: int, resume: bool,
                   seed: int | None) -> dict[str, Any] | None:
    """The training state a resumed run continues from, loaded into ``model`` (None: a fresh
    run, whose stale state file is removed and whose torch is seeded with ``seed``)."""
    rank = rank_and_world()[0]
    state_path = save_dir / STATE_FILE
    saved = read_train_state(state_path) if resume else None
    if saved is None:
        if rank == 0:
            state_path.unlink(missing_ok=True)  # a stale state must never be resumed into this run
        if seed is not None:
            torch.manual_seed(seed)
        return None
    if (saved["epochs"], saved["steps"]) != (epochs, steps):
        raise ConfigError(f"{state_path} is from a run of {saved['epochs']} epochs x "
                          f"{saved['steps']} batches, this one has {epochs} x {steps}: "
                          f"resume with the same settings, or pass resume=False")
    try:
        model.load_state_dict(saved["model"])
    except RuntimeError:
        raise CheckpointError(f"{state_path} does not fit this model (another architecture "
                              f"or pruning?): resume with the same settings, or pass "
                              f"resume=False") from None
    if rank == 0:
        print(f"[autoprune] resuming {save_dir} after epoch {len(saved['history'])}/{epochs}",
              flush=True)
    return saved


class _KeepBest:
    """:func:`fit`'s ``on_epoch_end`` for :func:`fit_keep_best`: rank 0 evaluates, prints,
    writes ``last.pt``, ``best.pt`` when the score improves, and ``train_state.pt``."""

    def __init__(self, model: nn.Module, save_dir: Path, epochs: int, steps: int,
                 meta: dict[str, Any] | None, device: torch.device, evaluate: Callable | None,
                 metric: str, higher_is_better: bool, best: float):
        self.model, self.save_dir, self.epochs, self.steps = model, save_dir, epochs, steps
        self.meta, self.device, self.evaluate = dict(meta or {}), device, evaluate
        self.metric, self.higher_is_better, self.best = metric, higher_is_better, best

    def __call__(self, epoch: int, loss: float, loop_state: dict[str, Any]) -> None:
        if rank_and_world()[0] != 0:  # rank 0 evaluates and writes for all
            return
        model = self.model
        # evaluation must not move the training's random stream (its loader draws a seed)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            metrics = self.evaluate(model) if self.evaluate else {}
        score = metrics[self.metric] if self.metric in metrics else -loss
        score = score if self.higher_is_better or self.metric not in metrics else -score
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        print(f"epoch {epoch + 1}/{self.epochs}  loss {loss:.4f}  {shown}", flush=True)
        save_pruned(model, self.save_dir / "last.pt", **self.meta, epoch=epoch + 1,
                    metrics=metrics)
        if score > self.best:
            self.best = score
            save_pruned(model, self.save_dir / "best.pt", **self.meta, epoch=epoch + 1,
                        metrics=metrics)
        _atomic_save({**loop_state, "version": STATE_VERSION, "epochs": self.epochs,
                      "steps": self.steps, "best_score": self.best,
                      "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}},
                     self.save_dir / STATE_FILE)


@torch.no_grad()
def evaluate_topk(model: nn.Module, batches: Iterable, *, device: torch.device,
                  topk: tuple[int, ...] = (1, 5)) -> dict[str, float]:
    """Top-k accuracy (fractions in [0, 1]) over ``batches`` of ``(inputs, targets)``."""
    was_training = model.training
    model.to(device).eval()
    correct = {k: 0 for k in topk}
    seen = 0
    for inputs, targets in batches:
        inputs, targets = inputs.to(device), targets.to(device)
        logits = model(inputs)
        top = logits.topk(min(max(topk), logits.shape[1]), dim=1).indices
        hits = top == targets[:, None]
        for k in topk:
            correct[k] += hits[:, :k].any(dim=1).sum().item()
        seen += len(targets)
    model.train(was_training)
    if seen == 0:
        raise ValueError("evaluation data is empty: pass a dataset with at least one image")
    return {f"top{k}": correct[k] / seen for k in topk}
