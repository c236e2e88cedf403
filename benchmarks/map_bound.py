"""The adaptive analysis's sure mAP bound (issue 41; ``autoprune/tasks/detection/map_bound.py``):
one trained YOLO detector's adaptive analysis run twice on the same groups, ratios and val images,
with the bound (Ultralytics' validator batch by batch, a point stopped once its mAP's upper bound
decides it) and without it (every measured point on every image). Printed: images evaluated,
points, points decided early, wall time, and the largest difference between the two allocations
(ratio points; the bound is sure, so it should be 0).

    taskset -c 0 python benchmarks/map_bound.py --weights runs/int8/.../fp32/baseline/best.pt \\
        --data runs/int8/.../data.yaml --size 320 --groups 20 --target loss=0.05

The detector of benchmarks/README.md's figures is the FP32 base that ``benchmarks/int8.py
--models yolov8n --train-images 480 --val-images 160 --epochs 30`` trains (scenes at 320 px,
mAP50-95 0.669 on 160 val scenes). A barely trained detector shows nothing: its mAP is too low
for the bound (which assumes every unseen object found) to fall below any threshold.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import analysis_cost  # benchmarks/, beside this script
import autoprune
from autoprune import detection as det
from autoprune.engine.allocate import ratios_by_flops, ratios_by_loss
from autoprune.flow.sensitivities import TaskEval
from autoprune.tasks.detection import DetectionAdapter


def run(adapter: DetectionAdapter, model: torch.nn.Module, groups: list[str], target: dict,
        path: Path, bound: bool) -> dict:
    """One adaptive analysis into ``path`` (a new file): its table and counts
    (``analysis_cost.analyze``)."""
    evaluation = TaskEval(adapter)
    if not bound:
        del evaluation.incremental  # points measured on every image: the choice stays adaptive
    return analysis_cost.analyze(adapter, model, groups, path, eval_fn=evaluation,
                                 adaptive=True, target=target)


def detector_arguments(description: str) -> argparse.ArgumentParser:
    """The command line of a benchmark on one trained detector: --weights, --data, --size,
    --batch."""
    p = argparse.ArgumentParser(description=description.split("\n\n")[0])
    p.add_argument("--weights", required=True, help="a trained detector (autoprune checkpoint)")
    p.add_argument("--data", required=True, help="its data.yaml (the val split is measured on)")
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--batch", type=int, default=16)
    return p


def load_detector(a: argparse.Namespace, eval_limit: int | None = None
                  ) -> tuple[torch.nn.Module, DetectionAdapter]:
    """The detector of ``a.weights`` (eval mode) and an adapter on ``a.data``'s val split (its
    first ``eval_limit`` images), timed on one thread."""
    torch.set_num_threads(1)
    model = det.load_model(a.weights).eval()
    return model, DetectionAdapter(a.data, input_size=a.size, batch_size=a.batch, device="cpu",
                                   eval_limit=eval_limit, progress=False)


def main(argv: list[str] | None = None) -> dict:
    p = detector_arguments(__doc__)
    p.add_argument("--groups", type=int, default=20, help="the model's first N groups (0: all)")
    p.add_argument("--target", default="loss=0.05", help="loss=0.05 or flops=0.3")
    p.add_argument("--out", default="runs/map_bound")
    a = p.parse_args(argv)
    kind, value = a.target.split("=")
    target = {kind: float(value)}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model, adapter = load_detector(a)
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = [g.name for g in autoprune.prunable_groups(model, example, ignored)]
    groups = groups[:a.groups] if a.groups else groups
    runs = {mode: run(adapter, model, groups, target, out / f"{mode}.json", mode == "bound")
            for mode in ("bound", "no_bound")}

    def allocate(table):
        if kind == "loss":
            return ratios_by_loss(table, float(value))
        return dict(ratios_by_flops(model, example, table, float(value), ignored_layers=ignored))

    ratios = {mode: allocate(r["table"]) for mode, r in runs.items()}
    apart = max(abs(ratios["bound"][g] - ratios["no_bound"][g]) for g in ratios["bound"])
    print("\n| target | images with bound / without | fewer | points | decided early | "
          "wall with / without (s) | allocations apart |\n|---|---:|---:|---:|---:|---:|---:|")
    b, n = runs["bound"], runs["no_bound"]
    print(f"| {a.target} | {b['images']:,} / {n['images']:,} | {n['images'] / b['images']:.2f}x "
          f"| {b['points']} / {n['points']} | {b['decided_early']} | {b['wall']:.0f} / "
          f"{n['wall']:.0f} | {apart:.4f} |")
    summary = {mode: {k: r[k] for k in ("images", "points", "decided_early", "wall")}
               for mode, r in runs.items()}
    summary["apart"] = apart
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
