"""The detection, segmentation and instance-segmentation one-call flows, end to end, with an
unpruned control.

For each task a base model is trained, its sensitivities measured on its validation data, then it
is pruned (``pruned_flops`` or ``eval_metric_loss``) and retrained; the control trains the same
base model for the same extra epochs without pruning, so the table separates what pruning costs
from what the extra epochs give. Printed: FLOPs, parameters, CPU latency (batch 1) and the metric
before and after, and the control's metric. Results also go to ``<out>/results.json``.

    python benchmarks/task_flows.py                      # every task, the README's settings
    python benchmarks/task_flows.py --task segmentation  # one of them
    python benchmarks/task_flows.py --quick              # tiny settings (what the tests run)

detection: YOLOv8n on Fashion-MNIST scenes (256 train / 64 val images at 128 px), 35 epochs,
then ``pruned_flops=0.4`` and 30 epochs. segmentation: Unet-resnet18 on ``fashion-scenes``
(2,000 / 128 scenes at 64 px), 4 epochs, then ``eval_metric_loss=0.05`` and 2 epochs.
instance_segmentation: YOLOv8n-seg on the scenes with polygon labels (128 / 64 images at 96 px),
25 epochs, then ``pruned_flops=0.4`` and 15 epochs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from autoprune.engine.sensitivity import DEFAULT_RATIOS  # noqa: E402

FULL = {"detection": dict(train=256, val=64, size=128, epochs=35, extra=30, batch=16,
                          target={"pruned_flops": 0.4}),
        # smaller than detection's: a YOLO-seg epoch of 256 images at 128 px took 75 s here
        "instance_segmentation": dict(train=128, val=64, size=96, epochs=25, extra=15,
                                      batch=16, target={"pruned_flops": 0.4}),
        "segmentation": dict(train=2000, val=128, size=64, epochs=4, extra=2, batch=8,
                             target={"eval_metric_loss": 0.05})}
# --quick: the sensitivities need a base model scoring above 0, and the table a pruned one,
# whatever the seed. Detection: 24 scenes of one large garment, validated on the training images
# (8 unseen ones scored as little as 0.002), 12 epochs at lr0=0.005 without warmup (Ultralytics
# warms up over at least 100 steps: with warmup_epochs=1, the whole run), as the `flow` fixture of
# tests/test_detection.py: mAP50-95 0.037, 0.067, 0.051 with seeds 0, 1, 2. Both tasks prune to
# a FLOPs target (a tolerated loss may keep every group of such a barely trained model).
QUICK = {"detection": dict(train=24, val=8, size=64, epochs=12, extra=1, batch=8,
                           target={"pruned_flops": 0.4}, val_on_train=True,
                           scenes=dict(objects=(1, 1), scale=(0.8, 1.0)),
                           train_args=dict(lr0=0.005, warmup_epochs=0, mosaic=0.0)),
         "segmentation": dict(train=24, val=8, size=32, epochs=1, extra=1, batch=8,
                              target={"pruned_flops": 0.3})}
QUICK["instance_segmentation"] = QUICK["detection"]  # mask mAP50-95 0.057 with seed 0
METRICS = {"detection": "map50_95", "segmentation": "miou",
           "instance_segmentation": "map50_95_mask"}


def _detection(s: dict[str, Any], out: Path, base: Path | None, prune: bool,
               task: str = "detection") -> Any:
    import autoprune
    from autoprune.datasets.scenes import write_yolo_dataset

    det = getattr(autoprune, task)
    model = "yolov8n-seg.yaml" if task == "instance_segmentation" else "yolov8n.yaml"
    data = out.parent / "scenes" / "data.yaml"
    if not data.is_file():
        write_yolo_dataset(data.parent, train=s["train"], val=s["val"], size=s["size"], seed=0,
                           task="segment" if task == "instance_segmentation" else "detect",
                           **s.get("scenes", {}))
        if s.get("val_on_train"):
            import yaml

            cfg = yaml.safe_load(data.read_text())
            data.write_text(yaml.safe_dump({**cfg, "val": cfg["train"]}, sort_keys=False))
    common = dict(input_size=s["size"], batch_size=s["batch"], device=s["device"],
                  progress=s["progress"],
                  train_args={"optimizer": "AdamW", "lr0": 0.003, "warmup_epochs": 1,
                              "nbs": s["batch"], **s.get("train_args", {})})
    if base is None:
        return det.train(model, data, epochs=s["epochs"], save_dir=out, **common)
    pruning = dict(sensitivities_file=out / "sensitivities.json", ratios=s["ratios"],
                   **s["target"]) if prune else {}
    return det.train(base, data, epochs=s["extra"], save_dir=out, **pruning, **common)


def _segmentation(s: dict[str, Any], out: Path, base: Path | None, prune: bool) -> Any:
    from autoprune import segmentation as seg

    common = dict(train_data="fashion-scenes", batch_size=s["batch"], input_size=s["size"],
                  train_limit=s["train"], eval_limit=s["val"], device=s["device"],
                  progress=s["progress"])
    if base is None:
        return seg.train("unet", "resnet18", epochs=s["epochs"], save_dir=out, **common)
    pruning = dict(sensitivities_file=out / "sensitivities.json", ratios=s["ratios"],
                   **s["target"]) if prune else {}
    return seg.train("unet", "resnet18", epochs=s["extra"], save_dir=out, pretrain_weights=base,
                     **pruning, **common)


def _instance_segmentation(s: dict[str, Any], out: Path, base: Path | None, prune: bool) -> Any:
    return _detection(s, out, base, prune, task="instance_segmentation")


RUNS = {"detection": _detection, "segmentation": _segmentation,
        "instance_segmentation": _instance_segmentation}


def flow(task: str, s: dict[str, Any], out: Path) -> dict[str, Any]:
    """Base model, pruned + retrained, and the unpruned control; returns the figures."""
    run, metric = RUNS[task], METRICS[task]
    start = time.perf_counter()
    base = run(s, out / "base", None, False)
    pruned = run(s, out / "pruned", base.baseline_path, True)
    wall = time.perf_counter() - start  # the base model, then analysis, pruning and retraining
    control = run(s, out / "control", base.baseline_path, False)
    before, after = pruned.report["baseline"], pruned.report["pruned"]
    return {"task": task, "metric": metric, "target": s["target"],
            "settings": {k: v for k, v in s.items() if k != "progress"},
            "flops": [before["flops"], after["flops"]],
            "params": [before["params"], after["params"]],
            "latency_cpu_ms": [before["latency_cpu_ms"], after["latency_cpu_ms"]],
            "latency_gpu_ms": [before.get("latency_gpu_ms"), after.get("latency_gpu_ms")],
            "wall_s": wall,
            "metric_values": [before["metrics"][metric], after["metrics"][metric]],
            "control_metric": control.metrics[metric]}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | target | FLOPs | params | CPU latency | metric | unpruned, same extra "
             "epochs |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        (f0, f1), (p0, p1), (l0, l1), (m0, m1) = (r["flops"], r["params"], r["latency_cpu_ms"],
                                                  r["metric_values"])
        target = ", ".join(f"{k}={v}" for k, v in r["target"].items())
        lines.append(f"| {r['task']} | `{target}` | {f0 / 1e6:.1f} M -> {f1 / 1e6:.1f} M "
                     f"({f1 / f0 - 1:+.1%}) | {p0 / 1e6:.2f} M -> {p1 / 1e6:.2f} M | "
                     f"{l0:.1f} -> {l1:.1f} ms | {r['metric']} {m0:.3f} -> {m1:.3f} | "
                     f"{r['control_metric']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", choices=(*RUNS, "all"), default="all")
    p.add_argument("--quick", action="store_true", help="tiny settings (minutes)")
    p.add_argument("--out", default="runs/task_flows")
    p.add_argument("--ratios", help="ratios analysed (default 0.1,...,0.9; --quick 0.5)")
    p.add_argument("--device", default="auto")
    p.add_argument("--progress", action="store_true")
    args = p.parse_args(argv)
    ratios = tuple(float(r) for r in args.ratios.split(",")) if args.ratios else \
        ((0.5,) if args.quick else tuple(DEFAULT_RATIOS))
    out, rows = Path(args.out), []
    for task in (RUNS if args.task == "all" else [args.task]):
        s = dict((QUICK if args.quick else FULL)[task], ratios=ratios, device=args.device,
                 progress=args.progress)
        rows.append(flow(task, s, out / task))
        print(table(rows[-1:]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    print("\nPruned one-call flows against the unpruned control:\n" + table(rows))
    return rows


if __name__ == "__main__":
    main()
