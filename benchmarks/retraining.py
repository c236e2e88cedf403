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

Prints one table row per task and recipe; the last line is the classification row:
``plain=<a> distill=<b> steps=<c> both=<d> control=<e>`` (top-1).
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
            retrain_epochs: int, pruned_flops: float,
            ratios: tuple[float, ...]) -> dict[str, float]:
    """Train the base model, then every recipe and the control; prints a row each and returns
    ``{recipe: metric}``."""
    t0 = time.perf_counter()
    base = train(epochs=epochs, save_dir=tmp / task / "base")
    print(f"{task}: base {metric} {base.metrics[metric]:.4f} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    sens = tmp / task / "sens.json"  # measured by the first recipe, read by the others
    out: dict[str, float] = {}
    for name, recipe in RECIPES.items():
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


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="resnet18 on Fashion-MNIST only, small")
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--pruned-flops", type=float, default=0.7)
    p.add_argument("--epochs", type=int, default=4, help="base training epochs")
    p.add_argument("--retrain-epochs", type=int, default=6,
                   help="epochs after pruning (all steps together; the control's too)")
    p.add_argument("--train-images", type=int, default=12000)
    p.add_argument("--val-images", type=int, default=1000)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--ratios", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9")
    p.add_argument("--segmentation", action=argparse.BooleanOptionalAction, default=None,
                   help="also Unet-resnet18 on the fashion-scenes (default: not with --quick)")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.retrain_epochs, args.train_images, args.val_images = 2, 3, 2000, 500
        args.ratios = "0.2,0.4,0.6,0.8"
    if args.segmentation is None:
        args.segmentation = not args.quick
    ratios = tuple(float(r) for r in args.ratios.split(","))
    settings = dict(retrain_epochs=args.retrain_epochs, pruned_flops=args.pruned_flops,
                    ratios=ratios)
    common = dict(train_limit=args.train_images, eval_limit=args.val_images, device=args.device,
                  seed=args.seed, progress=False)
    print("| task | recipe | FLOPs | metric after retraining | time |\n|---|---|---:|---:|---:|")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = {}
        if args.segmentation:
            seg_row = compare(
                "segmentation", "miou",
                lambda **kw: seg.train("unet", "resnet18", train_data="fashion-scenes",
                                       input_size=64, batch_size=16, **common, **kw),
                tmp, epochs=args.epochs, **settings)
            print("segmentation: " + " ".join(f"{k}={v:.4f}" for k, v in seg_row.items()))
        rows = compare(
            "classification", "top1",
            lambda **kw: cls.train(args.arch, "fashion-mnist", input_size=args.size,
                                   batch_size=128, lr=0.05, **common, **kw),
            tmp, epochs=args.epochs, **settings)
    line = " ".join(f"{k}={v:.4f}" for k, v in rows.items())
    print(line)
    return line


if __name__ == "__main__":
    main()
