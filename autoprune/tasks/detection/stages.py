"""A detection training stage's files, in one place: what resuming the stage takes
(:class:`ResumeStep`), what a finished Ultralytics run left (:class:`FinishedRun`), autoprune's
checkpoints written from it, the EMA weights of Ultralytics' own checkpoints, and those
checkpoints written back with native Ultralytics blocks so that ``YOLO(path)`` loads them
without autoprune.

A stage folder holds ``best.pt`` / ``last.pt`` (autoprune's) and ``ultralytics/`` (Ultralytics'
run: ``weights/best.pt``, ``weights/last.pt``, ``results.csv``)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn

from ...engine.checkpoint import read_state_dict, save_pruned
from ...engine.distributed import rank_and_world
from ...engine.progress import counted
from ...errors import CheckpointError, ConfigError
from . import models as yolo

RUN = "ultralytics"  # Ultralytics' run folder in a stage


def ultralytics_last(stage: Path) -> Path:
    """Ultralytics' ``last.pt`` of the stage in ``stage``."""
    return Path(stage) / RUN / "weights" / "last.pt"


class ResumeStep(enum.Enum):
    """What a stage takes, given what an earlier run left in it."""

    FRESH = "train from the start"
    CONTINUE = "resume Ultralytics' interrupted run"
    WRITE = "write autoprune's checkpoints of a run Ultralytics finished"
    DONE = "nothing: its best.pt holds the result"


def resume_step(stage: Path, epochs: int, resume: bool) -> ResumeStep:
    """The :class:`ResumeStep` of ``stage`` (read only; with ``resume=False`` always FRESH); a
    run of another number of epochs is a one-line ConfigError."""
    last = ultralytics_last(stage)
    if not resume or not last.is_file():
        return ResumeStep.FRESH
    _, ckpt = yolo.read_ultralytics(last)
    planned = (ckpt.get("train_args") or {}).get("epochs")
    if planned != epochs:
        run = counted(planned, "epoch") if isinstance(planned, int) else "unknown length"
        raise ConfigError(f"{last} is from a run of {run}, this one has {epochs}: "
                          f"resume with the same settings, or pass resume=False")
    if ckpt.get("epoch", -1) != -1:
        return ResumeStep.CONTINUE
    return ResumeStep.DONE if (Path(stage) / "best.pt").is_file() else ResumeStep.WRITE


@dataclass
class FinishedRun:
    """What a finished Ultralytics run left: its checkpoints, its best epoch and the metrics of
    its best weights (None: unknown, e.g. when only its files are at hand)."""

    last: Path
    best: Path
    best_epoch: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, trainer: Any) -> "FinishedRun":
        """From the Ultralytics trainer that just finished."""
        return cls(Path(trainer.last), Path(trainer.best),
                   getattr(trainer.stopper, "best_epoch", None), dict(trainer.metrics or {}))

    @classmethod
    def on_disk(cls, stage: Path) -> "FinishedRun":
        """From the files of a run Ultralytics finished in ``stage``."""
        last = ultralytics_last(stage)
        return cls(last, last.parent / "best.pt")


def write_checkpoints(model: nn.Module, run: FinishedRun, stage: Path, meta: dict[str, Any],
                      epochs: int, metrics: Callable[[dict[str, Any]], dict[str, float]]
                      ) -> dict[Path, Any]:
    """autoprune's ``last.pt`` and ``best.pt`` of ``stage`` from Ultralytics' (``model`` ends
    holding the best EMA weights); ``metrics`` turns Ultralytics' into autoprune's. Returns
    Ultralytics' files as loaded, by resolved path, for :func:`write_deployable`."""
    best_epoch = run.best_epoch or epochs
    loaded = {}
    for src, name in ((run.last, "last.pt"), (run.best, "best.pt")):
        if src.is_file():
            ckpt = loaded[src.resolve()] = yolo.load_ultralytics_file(src)
            model.load_state_dict(ema_state(src, ckpt))
            best = name == "best.pt"
            save_pruned(model, Path(stage) / name, **meta, epoch=best_epoch if best else epochs,
                        metrics=metrics(run.metrics) if best and run.metrics else {},
                        ultralytics_weights=str(src))
    return loaded


def write_deployable(save_dir: Path, loaded: dict[Path, Any] | None = None) -> None:
    """Write the Ultralytics checkpoints of a finished training stage (``save_dir/ultralytics/
    weights/best.pt``, ``last.pt``) with native Ultralytics blocks, so that ``YOLO(path)`` loads
    them without autoprune (:func:`~.models.write_native`), and say so in one line (or where that
    could not be done). Rank 0 only; a file already written back is left as it is. ``loaded``:
    the files as :func:`write_checkpoints` read them (each is read once)."""
    if rank_and_world()[0] != 0:
        return
    for name in ("best.pt", "last.pt"):
        path = save_dir / RUN / "weights" / name
        if not path.is_file():
            continue
        done = yolo.write_native(path, (loaded or {}).get(path.resolve()))
        if done.left:
            print(f"[autoprune] note: {path} keeps autoprune's split-free form in "
                  f"{', '.join(done.left[:3])}{', ...' if len(done.left) > 3 else ''}: YOLO() "
                  f"loads it only where autoprune is installed; elsewhere deploy the ONNX export "
                  f"(autoprune export {save_dir / 'best.pt'} model.onnx)", flush=True)
        elif done.changed and name == "best.pt":
            extra = done.padded_params / max(done.params, 1) - 1
            print(f"[autoprune] {path} holds Ultralytics' own blocks: YOLO(path) loads it without "
                  f"autoprune (zero channels that even out split blocks add {extra:.1%} "
                  f"parameters; `autoprune export` writes the exact pruned model)", flush=True)


def load_checkpoint(model: nn.Module, path: Path) -> None:
    """``model`` loaded with the weights of autoprune's checkpoint ``path`` (weights-only)."""
    try:
        model.load_state_dict(read_state_dict(path))
    except RuntimeError:
        raise CheckpointError(f"{path} does not fit this model (another architecture or "
                              f"pruning?): resume with the same settings, or pass "
                              f"resume=False") from None


def ema_state(path: Path, loaded: Any = None) -> dict[str, torch.Tensor]:
    """The (float) EMA weights of an Ultralytics checkpoint this run has written (split-free,
    or written back with native blocks: then split again, without the padding); ``loaded``: the
    file already read (:func:`~.models.read_ultralytics`)."""
    net, _ = yolo.read_ultralytics(path, loaded)
    net = yolo.patch_model(net)
    return {k: v.float() if v.is_floating_point() else v for k, v in net.state_dict().items()}
