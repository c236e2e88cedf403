"""Building DEFAULT sensitivity profiles on public data (``autoprune profiles build``).

Each registered task measures its profiles its own way (its ``profile`` entry: Fashion-MNIST for
classification, the Fashion-MNIST scenes of ``autoprune.datasets.scenes`` for detection and
segmentation); :func:`build_profile` picks the task from the architecture, fills in the task's
default settings, and :func:`finish_profile` records how the profile was made, writes it to
``out_dir`` and adds it to ``out_dir/index.json``.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any, Iterable

from ..engine.sensitivity import DEFAULT_RATIOS
from ..engine.store import read_record, write_record
from ..flow.defaults import register_profile, versions
from ..flow.options import check_numbers
from ..tasks import get_task, task_of

SETTINGS = ("epochs", "train_images", "val_images", "input_size", "batch_size")


def arch_key_of(arch: str, task: str) -> str:
    """The canonical key ``arch`` has in ``task`` (what the index lists)."""
    return get_task(task).arch_key(arch)


def profile_name(task: str, key: str) -> str:
    """The file name of a profile, e.g. ``detection-yolov8n.json``."""
    return f"{task}-{key.replace('/', '-')}.json"


def finish_profile(task: str, key: str, measured: Path, out_dir: str | Path,
                   how: dict[str, Any]) -> Path:
    """Record how ``measured`` (a sensitivity file) was made — ``extra.how``, package versions,
    date — drop the weights' hash (the weights are not shipped), write it to ``out_dir`` and
    register it in ``out_dir/index.json``. Returns the profile's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = read_record(measured)
    record.extra.update({"how": how, "versions": versions(),
                         "date": datetime.date.today().isoformat()})
    record.model.pop("weights_sha256", None)
    name = profile_name(task, key)
    write_record(record, out_dir / name)
    register_profile(task, key, name, out_dir)
    return out_dir / name


def _command(key: str, task: str, s: dict[str, Any], ratios: tuple[float, ...],
             options: dict[str, Any] | None = None) -> str:
    cmd = (f"autoprune profiles build --arch {key} --task {task} --epochs {s['epochs']} "
           f"--train-images {s['train_images']} --val-images {s['val_images']} "
           f"--input-size {s['input_size']} --batch-size {s['batch_size']} --seed {s['seed']}")
    if ratios != tuple(DEFAULT_RATIOS):
        cmd += " --ratios " + ",".join(f"{r:g}" for r in ratios)
    options = options or {}
    if options.get("pretrained"):
        cmd += " --pretrained" + ("" if options["pretrained"] is True
                                  else f" {options['pretrained']}")
    if options.get("data"):
        cmd += f" --data {options['data']}"
    return cmd


def build_folder(work_dir: str | Path, task: str, key: str, s: dict[str, Any],
                 ratios: tuple[float, ...], options: dict[str, Any]) -> Path:
    """Where a build keeps its data, base model and sensitivities under ``work_dir``: one folder
    per task, architecture and recipe (a changed setting starts a new folder, never mixes)."""
    recipe = json.dumps({"settings": s, "ratios": list(ratios),
                         "options": {k: str(v) for k, v in sorted(options.items())}},
                        sort_keys=True)
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:8]
    return Path(work_dir) / f"{task}-{key.replace('/', '-')}-{digest}"


def build_profile(arch: str, out_dir: str | Path, *, task: str | None = None,
                  ratios: Iterable[float] = DEFAULT_RATIOS, work_dir: str | Path | None = None,
                  device: str = "auto", seed: int = 0, progress: bool = True,
                  pretrained: Any = None, data: str | Path | None = None,
                  **options: Any) -> Path:
    """Train ``arch`` on the public data of its task (``task`` forces it) — or on ``data``, your
    data set in a layout the task reads — from scratch or from ``pretrained`` weights (True:
    the library's default ones), measure its sensitivities and write them as its profile in
    ``out_dir``. ``options``: the recipe (``epochs``, ``train_images``, ``val_images``,
    ``input_size``, ``batch_size``; unset ones take the task's defaults,
    ``Task.profile_settings``), and the task's profile builder's own (detection:
    ``train_args=``). ``work_dir``: keep the build there (:func:`build_folder`) instead of a
    temporary folder, so that a build killed part-way resumes when run again: its training from
    the last epoch it saved, its analysis from the last point it wrote."""
    given = {k: options.pop(k) for k in SETTINGS if k in options}
    task_options = {**options, "pretrained": pretrained, "data": data}
    spec = get_task(task or task_of(arch))
    key, ratios = spec.arch_key(arch), tuple(ratios)
    s = {**spec.profile_settings, **{k: v for k, v in given.items() if v is not None},
         "seed": seed}
    check_numbers(whole=True, low=1, **{k: s[k] for k in SETTINGS})
    options = {k: v for k, v in task_options.items() if v is not None}
    keep = build_folder(work_dir, spec.name, key, s, ratios, options) if work_dir else None
    with (contextlib.nullcontext(str(keep)) if keep else tempfile.TemporaryDirectory()) as tmp:
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            print(f"[autoprune] profile build kept in {keep} (run the same command again to "
                  f"resume it)", flush=True)
        measured, how = spec.profile_builder()(key, Path(tmp), s, ratios, device=device,
                                               progress=progress, **options)
        start = options.get("pretrained")
        how = {"dataset": how.pop("dataset"), **{k: s[k] for k in SETTINGS}, "seed": seed,
               "start": ("pretrained " + ("(default weights)" if start is True else str(start)))
               if start else "from scratch", **how,
               "command": _command(key, spec.name, s, ratios, options)}
        return finish_profile(spec.name, key, measured, out_dir, how)
