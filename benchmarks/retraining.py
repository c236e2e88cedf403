"""Retraining recipes at a high compression: plain fine-tuning, distillation from the unpruned
model, pruning in 3 steps, and both, against an unpruned control given the same epochs.

One base model is trained; the sensitivities are measured once; then each recipe prunes the
same base model to the same FLOPs target (-70 % by default) and retrains it for the same total
epochs (``--retrain-epochs``) with the same seed:

- ``plain``: one step, supervised fine-tuning (autoprune's default);
- ``distill``: one step, ``distill=True`` (the unpruned model as a frozen teacher, alpha 0.5,
  T 4);
- ``steps``: ``prune_steps=3`` (a third of the way per step, ``epochs // 3`` retraining between);
- ``both``: ``distill=True, prune_steps=3``;
- ``control``: the unpruned base model trained for the same epochs more.

    python benchmarks/retraining.py --quick   # resnet18 on Fashion-MNIST, a few minutes on CPU
    python benchmarks/retraining.py           # more images and epochs, plus Unet-resnet18 on the
                                              # fashion-scenes (segmentation, mIoU)
    python benchmarks/retraining.py --tasks segmentation --work-dir runs/retrain  # one task,
                                              # its models kept (one process per core)
    python benchmarks/retraining.py --tasks detection  # YOLOv8n on the scenes at -40 % FLOPs,
                                              # plain against distill (Ultralytics' features)

Prints one table row per task and recipe, then ``<task>: plain=<a> ... control=<e>`` per task;
the last line is the classification row (else the first task's):
``plain=<a> distill=<b> steps=<c> both=<d> control=<e>`` (top-1, or mIoU).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from autoprune import classification as cls
from autoprune import segmentation as seg

RECIPES = {"plain": {}, "distill": {"distill": True}, "steps": {"prune_steps": 3},
           "both": {"distill": True, "prune_steps": 3}}


def compare(task: str, metric: str, train: Callable[..., Any], tmp: Path, *, epochs: int,
            retrain_epochs: int, pruned_flops: float, ratios: tuple[float, ...],
            recipes: tuple[str, ...] = tuple(RECIPES)) -> dict[str, float]:
    """Train the base model, then every recipe of ``recipes`` and the control; prints a row
    each and returns ``{recipe: metric}``."""
    t0 = time.perf_counter()
    base = train(epochs=epochs, save_dir=tmp / task / "base")
    print(f"{task}: base {metric} {base.metrics[metric]:.4f} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    sens = tmp / task / "sens.json"  # measured by the first recipe, read by the others
    out: dict[str, float] = {}
    for name in recipes:
        recipe = RECIPES[name]
        t0 = time.perf_counter()
        r = train(epochs=retrain_epochs, save_dir=tmp / task / name,
                  pretrain_weights=base.baseline_path, sensitivities_file=sens,
                  pruned_flops=pruned_flops, ratios=ratios, **recipe)
        out[name] = r.metrics[metric]
        print(f"| {task} | {name} | -{r.report['flops_reduction']:.1%} | {out[name]:.4f} | "
              f"{time.perf_counter() - t0:.0f} s |", flush=True)
    t0 = time.perf_counter()
    control = train(epochs=retrain_epochs, save_dir=tmp / task / "control",
                    pretrain_weights=base.baseline_path)
    out["control"] = control.metrics[metric]
    print(f"| {task} | control (unpruned) | -0.0% | {out['control']:.4f} | "
          f"{time.perf_counter() - t0:.0f} s |", flush=True)
    return out


def detection_train(args: argparse.Namespace, work: Path, common: dict[str, Any]
                    ) -> Callable[..., Any]:
    """``train`` of :func:`compare` for YOLOv8n on the scenes (task_flows.py's settings: AdamW
    at lr0 0.003, one warm-up epoch); the data is written once into ``work``."""
    from autoprune import detection as det
    from autoprune.datasets.scenes import write_yolo_dataset

    data = work / "detection" / "scenes" / "data.yaml"
    if not data.is_file():
        write_yolo_dataset(data.parent, train=args.det_train_images, val=args.det_val_images,
                           size=args.det_size, seed=0)
    settings = dict(input_size=args.det_size, batch_size=16,
                    train_args={"optimizer": "AdamW", "lr0": 0.003, "warmup_epochs": 1,
                                "nbs": 16}, **common)

    def train(pretrain_weights: Path | None = None, **kw: Any) -> Any:
        return det.train(pretrain_weights or "yolov8n.yaml", data, **settings, **kw)
    return train


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="resnet18 on Fashion-MNIST only, small")
    p.add_argument("--tasks", default=None,
                   help="classification,segmentation (default; --quick: classification)")
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--pruned-flops", type=float, default=0.7)
    p.add_argument("--epochs", type=int, default=4, help="base training epochs")
    p.add_argument("--retrain-epochs", type=int, default=6,
                   help="epochs after pruning (all steps together; the control's too)")
    p.add_argument("--train-images", type=int, default=12000)
    p.add_argument("--val-images", type=int, default=1000)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--seg-train-images", type=int, default=2000,
                   help="segmentation: scenes to train on (task_flows.py's setting)")
    p.add_argument("--seg-val-images", type=int, default=128)
    p.add_argument("--seg-size", type=int, default=64)
    p.add_argument("--det-train-images", type=int, default=256,
                   help="detection: scenes to train on (task_flows.py's setting)")
    p.add_argument("--det-val-images", type=int, default=64)
    p.add_argument("--det-size", type=int, default=128)
    p.add_argument("--det-epochs", type=int, default=35)
    p.add_argument("--det-retrain-epochs", type=int, default=30)
    p.add_argument("--det-pruned-flops", type=float, default=0.4,
                   help="detection's target (task_flows.py's; plain and distill only)")
    p.add_argument("--ratios", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep the models here (default: a temporary folder)")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.retrain_epochs, args.train_images, args.val_images = 2, 3, 2000, 500
        args.ratios = "0.2,0.4,0.6,0.8"
    tasks = (args.tasks or ("classification" if args.quick else
                            "classification,segmentation")).split(",")
    unknown = set(tasks) - {"classification", "segmentation", "detection"}
    if unknown:
        p.error(f"--tasks: unknown {', '.join(sorted(unknown))} (classification, segmentation, "
                f"detection)")
    ratios = tuple(float(r) for r in args.ratios.split(","))
    settings = dict(epochs=args.epochs, retrain_epochs=args.retrain_epochs,
                    pruned_flops=args.pruned_flops, ratios=ratios)
    common = dict(device=args.device, seed=args.seed, progress=False)
    print("| task | recipe | FLOPs | metric after retraining | time |\n|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        lines = {}
        if "segmentation" in tasks:
            row = compare(
                "segmentation", "miou",
                lambda **kw: seg.train("unet", "resnet18", train_data="fashion-scenes",
                                       input_size=args.seg_size, batch_size=8,
                                       train_limit=args.seg_train_images,
                                       eval_limit=args.seg_val_images, **common, **kw),
                work, **settings)
            lines["segmentation"] = " ".join(f"{k}={v:.4f}" for k, v in row.items())
            print("segmentation: " + lines["segmentation"], flush=True)
        if "detection" in tasks:
            row = compare("detection", "map50_95", detection_train(args, work, common), work,
                          epochs=args.det_epochs, retrain_epochs=args.det_retrain_epochs,
                          pruned_flops=args.det_pruned_flops, ratios=ratios,
                          recipes=("plain", "distill"))
            lines["detection"] = " ".join(f"{k}={v:.4f}" for k, v in row.items())
            print("detection: " + lines["detection"], flush=True)
        if "classification" in tasks:
            row = compare(
                "classification", "top1",
                lambda **kw: cls.train(args.arch, "fashion-mnist", input_size=args.size,
                                       batch_size=128, lr=0.05, train_limit=args.train_images,
                                       eval_limit=args.val_images, **common, **kw),
                work, **settings)
            lines["classification"] = " ".join(f"{k}={v:.4f}" for k, v in row.items())
            print("classification: " + lines["classification"], flush=True)
    line = lines.get("classification") or next(iter(lines.values()), "")
    print(line)
    return line


if __name__ == "__main__":
    main()
