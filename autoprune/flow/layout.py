"""The one output layout of every run. Each trained model lives in a stage folder of
``save_dir``, whatever the mode:

- ``baseline/``: the model trained from the start (plain training, and the one-call flow's base
  model; plain training from ``pretrain_weights`` fine-tunes into it too);
- ``pruned/``: the pruned and retrained model (the one-call flow, or pruning ``pretrain_weights``);
- ``pruned_step<k>/``: with ``prune_steps=K``, the steps before the last.

A stage holds ``best.pt``, ``last.pt`` and ``train_state.pt`` (and what the task's own trainer
leaves there: the adapter's ``stage_files``, e.g. detection's ``ultralytics/``). The reports, the
plot and a timed DEFAULT profile lie at the top of ``save_dir`` (with pruned_latency also
``latency_ratios.json``, and for a DEFAULT profile ``sensitivities_latency.json``); the sensitivity
file is where ``sensitivities_file`` points.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

BASELINE = "baseline"
PRUNED = "pruned"
STEP_PREFIX = f"{PRUNED}_step"  # pruned_step1 .. pruned_step<K-1>
STAGE_FILES = ("best.pt", "last.pt", "train_state.pt")  # autoprune's checkpoints of a stage
REPORTS = ("report.json", "report.md", "report.csv", "sensitivity.png")
RATIOS_FILE = "latency_ratios.json"        # the ratios a latency target chose (kept for resume)
SIDE_FILE = "sensitivities_latency.json"   # a DEFAULT profile's points timed on this machine
SIDE_FILES = (RATIOS_FILE, SIDE_FILE)
CONFIG_FILE = "args.yaml"  # the run's resolved settings


def training_stages(save_dir: str | Path, mode: str, pretrain_weights: Any = None) -> list[Path]:
    """The stage folders a run into ``save_dir`` trains, in order (``mode``: ``"none"`` for
    plain training, else pruning; prune_steps' earlier steps left out): plain training
    ``baseline/``; pruning ``baseline/`` and ``pruned/``, or ``pruned/`` alone when
    ``pretrain_weights`` gives the base model."""
    save_dir = Path(save_dir)
    if mode == "none":
        return [save_dir / BASELINE]
    return ([] if pretrain_weights is not None else [save_dir / BASELINE]) + [save_dir / PRUNED]


def old_layout(save_dir: str | Path, pretrain_weights: Any = None,
               stage_files: tuple[str, ...] = ()) -> str | None:
    """One line on a training run that an earlier autoprune wrote at the top of ``save_dir``
    (``best.pt``, ``last.pt``, ``train_state.pt``, the task's ``stage_files``; runs now train into
    ``baseline/``): what is there, that it is kept, and how to go on from it; None when there is
    none, or when ``pretrain_weights`` is its ``best.pt`` (the advice taken)."""
    save_dir = Path(save_dir)
    found = [name for name in STAGE_FILES + tuple(stage_files) if (save_dir / name).exists()]
    if not found or (pretrain_weights is not None and
                     Path(pretrain_weights).resolve() == (save_dir / "best.pt").resolve()):
        return None
    ways = []
    if "best.pt" in found:
        ways.append(f"pass pretrain_weights={save_dir / 'best.pt'} to start from its model")
    if "train_state.pt" in found and not set(found) & set(stage_files):  # a task's own trainer
        ways.append(f"move {', '.join(found)} into {save_dir / BASELINE}/ and rerun "  # resumes
                    f"with resume=True to continue it")                               # in place
    shown = [n + ("/" if (save_dir / n).is_dir() else "") for n in found]
    return (f"{save_dir} holds a training run of an earlier autoprune version ("
            f"{', '.join(shown)} at its top; runs now train into {BASELINE}/ and {PRUNED}/): it "
            f"is kept as it is and not used" + (f"; {' or '.join(ways)}" if ways else ""))


def run_outputs(save_dir: str | Path, mode: str, pretrain_weights: Any = None,
                prune_steps: int = 1, stage_files: tuple[str, ...] = ()
                ) -> tuple[list[Path], list[Path]]:
    """``(folders, files)`` a run into ``save_dir`` may write: its stage folders (prune_steps'
    included) and their checkpoints, its config, and with pruning the reports, the plot and the
    latency side files."""
    save_dir = Path(save_dir)
    stages = training_stages(save_dir, mode, pretrain_weights)
    if mode != "none":
        stages += [save_dir / f"{STEP_PREFIX}{k}" for k in range(1, prune_steps)]
    files = [stage / name for stage in stages for name in STAGE_FILES]
    stages += [stage / name for stage in stages for name in stage_files]  # folders of the task
    files.append(save_dir / CONFIG_FILE)
    if mode != "none":
        files += [save_dir / name for name in REPORTS + SIDE_FILES]
    return stages, files
