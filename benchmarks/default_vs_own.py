"""DEFAULT profile vs your own analysis: the accuracy a bundled profile costs, at the same FLOPs.

For one model per task — resnet18 on Fashion-MNIST (classification), yolov8n on Fashion-MNIST
scenes (detection), Unet-resnet18 on the segmentation scenes — a base model is trained once, then
pruned to the same FLOPs target twice: with its own sensitivity analysis (measured on its own
validation data) and with the DEFAULT profile (measured by ``autoprune profiles build`` on
another training run, with seed 0 scenes where this script uses ``--seed``, 1 by default).
Both pruned models are retrained for the same epochs with the same seed; the table shows the
metric of each (top-1, mAP50-95, mIoU) and the difference.

    python benchmarks/default_vs_own.py --quick                   # small CPU run, all tasks
    python benchmarks/default_vs_own.py --task detection          # full settings, a GPU helps
    python benchmarks/default_vs_own.py --profiles my_profiles    # profiles built with --out

The classification data are the same source as the profile's (Fashion-MNIST), so its gap is a
lower bound of what data unlike the profile's would show. Results also go to
``<out>/results.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from autoprune.flow.defaults import PROFILE_DIR_ENV, find_profile  # noqa: E402
from autoprune.engine.sensitivity import DEFAULT_RATIOS  # noqa: E402

MODELS = {"classification": "timm/resnet18", "detection": "yolov8n",
          "segmentation": "smp/unet/resnet18"}
METRICS = {"classification": "top1", "detection": "map50_95", "segmentation": "miou"}
FULL = {"classification": dict(train=12000, val=1000, size=32, epochs=3, batch=128),
        "detection": dict(train=512, val=64, size=128, epochs=30, batch=16),
        "segmentation": dict(train=1000, val=200, size=64, epochs=10, batch=8)}
QUICK = {"classification": dict(train=1024, val=200, size=32, epochs=1, batch=64),
         "detection": dict(train=96, val=24, size=64, epochs=5, batch=16),
         "segmentation": dict(train=96, val=24, size=32, epochs=2, batch=8)}


def _classification(s: dict[str, Any], out: Path, sens: Any, base: Path | None) -> Any:
    from autoprune import classification as cls

    common = dict(epochs=s["epochs"], batch_size=s["batch"], input_size=s["size"],
                  train_limit=s["train"], eval_limit=s["val"], device=s["device"],
                  seed=s["seed"], progress=s["progress"])
    if base is None:
        return cls.train("resnet18", "fashion-mnist", save_dir=out, **common)
    return cls.train("resnet18", "fashion-mnist", save_dir=out, pretrain_weights=base,
                     sensitivities_file=sens, pruned_flops=s["pruned_flops"],
                     ratios=s["ratios"], **common)


def _detection(s: dict[str, Any], out: Path, sens: Any, base: Path | None) -> Any:
    from autoprune import detection as det
    from autoprune.datasets.scenes import write_yolo_dataset

    data = out.parent / "scenes" / "data.yaml"
    if not data.is_file():
        write_yolo_dataset(data.parent, train=s["train"], val=s["val"], size=s["size"],
                           seed=s["seed"])
    common = dict(epochs=s["epochs"], input_size=s["size"], batch_size=s["batch"],
                  device=s["device"], seed=s["seed"], progress=s["progress"],
                  train_args=dict(optimizer="AdamW", lr0=0.003, warmup_epochs=1, nbs=s["batch"]))
    if base is None:
        return det.train("yolov8n.yaml", data, save_dir=out, **common)
    return det.train(base, data, save_dir=out, sensitivities_file=sens,
                     pruned_flops=s["pruned_flops"], ratios=s["ratios"], **common)


def _segmentation(s: dict[str, Any], out: Path, sens: Any, base: Path | None) -> Any:
    from autoprune import segmentation as seg

    common = dict(train_data="fashion-scenes", epochs=s["epochs"], batch_size=s["batch"],
                  input_size=s["size"], train_limit=s["train"], eval_limit=s["val"],
                  device=s["device"], seed=s["seed"], progress=s["progress"])
    if base is None:
        return seg.train("unet", "resnet18", save_dir=out, **common)
    return seg.train("unet", "resnet18", save_dir=out, pretrain_weights=base,
                     sensitivities_file=sens, pruned_flops=s["pruned_flops"],
                     ratios=s["ratios"], **common)


RUNS = {"classification": _classification, "detection": _detection,
        "segmentation": _segmentation}


def compare(task: str, s: dict[str, Any], out: Path) -> dict[str, Any]:
    """Base model, then own analysis vs DEFAULT at ``s['pruned_flops']``; returns the figures."""
    find_profile(task, MODELS[task])  # a clear error before any training if it is missing
    run, metric = RUNS[task], METRICS[task]
    base = run(s, out / "base", None, None)
    row: dict[str, Any] = {"task": task, "model": MODELS[task], "metric": metric,
                           "base": base.metrics[metric], "settings": {
                               k: v for k, v in s.items() if k != "progress"}}
    for mode, sens in (("own", out / "own_sensitivities.json"), ("default", "DEFAULT")):
        r = run(s, out / mode, sens, base.baseline_path)
        row[mode] = {"metric": r.metrics[metric], "flops_reduction": r.report["flops_reduction"],
                     "sensitivities_file": str(r.sensitivities_path)}
    row["default_minus_own"] = row["default"]["metric"] - row["own"]["metric"]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | model | metric | base | own: FLOPs / metric | DEFAULT: FLOPs / metric "
             "| DEFAULT - own |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        own, default = r["own"], r["default"]
        lines.append(f"| {r['task']} | {r['model']} | {r['metric']} | {r['base']:.4f} | "
                     f"-{own['flops_reduction']:.1%} / {own['metric']:.4f} | "
                     f"-{default['flops_reduction']:.1%} / {default['metric']:.4f} | "
                     f"{r['default_minus_own']:+.4f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", choices=(*MODELS, "all"), default="all")
    p.add_argument("--quick", action="store_true", help="small settings (CPU, minutes)")
    p.add_argument("--profiles", help="folder of profiles (index.json) to use as DEFAULT "
                   "(default: the bundled ones)")
    p.add_argument("--out", default="runs/default_vs_own")
    p.add_argument("--pruned-flops", type=float, default=0.5)
    p.add_argument("--train-images", type=int)
    p.add_argument("--val-images", type=int)
    p.add_argument("--size", type=int)
    p.add_argument("--epochs", type=int, help="epochs of the base model and of each retraining")
    p.add_argument("--batch", type=int)
    p.add_argument("--ratios", help="ratios of the own analysis (default 0.1,...,0.9; --quick "
                   "0.3,0.6)")
    p.add_argument("--seed", type=int, default=1, help="data and training seed (profiles: 0)")
    p.add_argument("--device", default="auto")
    p.add_argument("--progress", action="store_true")
    args = p.parse_args(argv)
    if args.profiles:
        os.environ[PROFILE_DIR_ENV] = str(Path(args.profiles).resolve())
    ratios = tuple(float(r) for r in args.ratios.split(",")) if args.ratios else \
        ((0.3, 0.6) if args.quick else tuple(DEFAULT_RATIOS))
    rows = []
    out = Path(args.out)
    for task in (MODELS if args.task == "all" else [args.task]):
        s = dict((QUICK if args.quick else FULL)[task])
        for key, value in (("train", args.train_images), ("val", args.val_images),
                           ("size", args.size), ("epochs", args.epochs), ("batch", args.batch)):
            if value is not None:
                s[key] = value
        s.update(ratios=ratios, pruned_flops=args.pruned_flops, seed=args.seed,
                 device=args.device, progress=args.progress)
        rows.append(compare(task, s, out / task))
        print(table(rows[-1:]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    print("\nDEFAULT profile vs own analysis, same FLOPs target, same retraining:\n" + table(rows))
    return rows


if __name__ == "__main__":
    main()
