"""What an earlier run left in a ``save_dir``, in words: a rerun says what it found and how to
resume it or start over, instead of silently training again from scratch over it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..engine.store import read_record
from ..errors import AutopruneError
from .contract import TaskAdapter
from .layout import training_stages
from .options import sens_mode
from .training import STATE_FILE, read_train_state


def stage_epochs(adapter: TaskAdapter, stage: Path) -> tuple[int, int] | None:
    """``(finished epochs, planned epochs)`` of the training stage in ``stage`` (None: no
    training there): the task's own trainer's record, else autoprune's ``train_state.pt``."""
    try:
        own = adapter.trained_epochs(stage)
        if own is not None:
            return own
        state = read_train_state(stage / STATE_FILE)
    except (AutopruneError, OSError, KeyError, TypeError, ValueError):
        state = None
    if state is None:
        return (1, 1) if (stage / "best.pt").is_file() else None  # no record: count it finished
    return len(state["history"]), int(state["epochs"])


def sensitivity_points(path: Any) -> int | None:
    """How many points the sensitivity file at ``path`` holds (None: no readable file)."""
    if sens_mode(path) != "existing":
        return None
    try:
        return sum(len(points) for points in read_record(path).sensitivities.values())
    except (AutopruneError, OSError):
        return None


def previous_run(adapter: TaskAdapter, save_dir: str | os.PathLike, mode: str,
                 sensitivities_file: Any = None, pretrain_weights: Any = None) -> str | None:
    """What a run into ``save_dir`` (``mode``: ``"none"`` for plain training, else pruning;
    ``pretrain_weights`` as given to it) would find of an earlier one in the stages it trains,
    in words ("a finished run (report.json)", "a run interrupted in pruned/ after epoch 1/2"
    ...); None when there is nothing. (An earlier version's files at the top of ``save_dir``:
    :func:`~autoprune.flow.layout.old_layout`.)"""
    save_dir = Path(save_dir)
    stages = [(f"{path.name}/", path)
              for path in training_stages(save_dir, mode, pretrain_weights)]
    found = [(name, stage_epochs(adapter, path)) for name, path in stages]
    found = [(name, e) for name, e in found if e is not None]
    report = mode != "none" and (save_dir / "report.json").is_file()
    if not found and not report:
        return None
    unfinished = [(name, e) for name, e in found if e[0] < e[1]]
    if unfinished:
        name, (done, planned) = unfinished[0]
        what = f"a run interrupted in {name.rstrip('/')} after epoch {done}/{planned}"
    elif report or mode == "none":
        what = "a finished run (" + ", ".join(
            ["report.json"] * report + [f"{name}best.pt" for name, _ in found[-1:]]) + ")"
    elif found[-1][0] == "pruned/":
        what = "a run interrupted before its report (pruned/best.pt)"
    else:
        what = "a run interrupted between the base model and retraining (baseline/best.pt)"
    points = sensitivity_points(sensitivities_file) if mode not in ("none", "default") else None
    if points is not None:
        what += f", and the sensitivity file {sensitivities_file} with {points} points " \
                f"(kept: only missing points are measured)"
    return what
