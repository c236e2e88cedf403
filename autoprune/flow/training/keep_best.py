"""Training that keeps the best epoch: ``last.pt`` every epoch, ``best.pt`` when the metric
improves, and ``train_state.pt`` (weights-only) that a resumed run continues from."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from ...engine.checkpoint import _atomic_save, read_state_dict, save_pruned
from ...engine.distributed import barrier, rank_and_world
from ...engine.progress import counted
from ...errors import CheckpointError, ConfigError
from .distill import Distill
from .loop import FitConfig, fit

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
    """:func:`fit` for ``cfg.epochs``, evaluating after each epoch; writes ``last.pt`` every epoch
    and ``best.pt`` whenever ``metric`` improves (or the training loss, without ``evaluate``), both
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
        print(f"[autoprune] {save_dir} already finished its {counted(epochs, 'epoch')}: using "
              f"its best.pt", flush=True)
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
        raise ConfigError(f"{state_path} is from a run of {counted(saved['epochs'], 'epoch')} x "
                          f"{counted(saved['steps'], 'batch', 'batches')}, this one has "
                          f"{counted(epochs, 'epoch')} x {counted(steps, 'batch', 'batches')}: "
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
                      "model": {k: v.detach().cpu().clone()
                                for k, v in model.state_dict().items()}},
                     self.save_dir / STATE_FILE)
