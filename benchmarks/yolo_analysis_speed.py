"""A YOLO analysis's speed (issue 41): one trained detector's full sensitivity analysis run four
times on the same groups, ratios and val images: as before 2026-11-27 (prefix cache and folded
evaluation both off: neither could engage on the fused copy Ultralytics' validator evaluates),
with the prefix cache (which now follows that copy, ``engine/evaluated_copy.follow``: the stages
before each group's first pruned layer replayed), with the cache and the copy's convolutions
channels-last where the folded evaluation's check passes, these three reading the val images
from their files on every pass, and with the defaults (all that, and the val images kept
decoded in memory, ``tasks/detection/evaluation.decoded_in_ram``). Printed: wall time of each
analysis and of its points, the speed-ups, and the largest difference from the first table.

    taskset -c 0 python benchmarks/yolo_analysis_speed.py --size 320 \\
        --weights runs/int8/.../fp32/baseline/best.pt --data runs/int8/.../data.yaml

The detector of benchmarks/README.md's figures is the FP32 base that ``benchmarks/int8.py
--models yolov8n --train-images 480 --val-images 160 --epochs 30`` trains (as map_bound.py's).
"""
from __future__ import annotations

import tempfile
import unittest.mock
from pathlib import Path

import torch

import analysis_cost  # benchmarks/, beside this script
import autoprune
import map_bound
from autoprune.tasks.detection import DetectionAdapter, evaluation


CONFIGS = {"before": {"prefix_cache": False, "fused_eval": False},
           "prefix cache": {"prefix_cache": True, "fused_eval": False},
           "cache + channels-last": {"prefix_cache": True, "fused_eval": True},
           "defaults (+ val images kept decoded)": {"prefix_cache": True, "fused_eval": True}}
KEPT = "defaults (+ val images kept decoded)"  # the others read the val images from their files


def analyze(adapter: DetectionAdapter, model: torch.nn.Module, groups: list[str],
            ratios: tuple[float, ...], options: dict) -> dict:
    """One full analysis (``analysis_cost.analyze``): its table, wall time, the seconds its
    points took and whether the folded evaluation was on."""
    with tempfile.TemporaryDirectory() as tmp:
        run = analysis_cost.analyze(adapter, model, groups, Path(tmp) / "sens.json",
                                    ratios=ratios, **options)
    return {"table": run["table"], "wall": run["wall"], "points": run["points_wall"],
            "fused_eval": run["record"].extra["evaluation"].get("fused_eval")}


def main(argv: list[str] | None = None) -> dict:
    p = map_bound.detector_arguments(__doc__)
    p.add_argument("--every", type=int, default=1, help="every k-th group of the model")
    p.add_argument("--ratios", default="0.3,0.6")
    p.add_argument("--images", type=int, default=0, help="the first N val images (0: all)")
    a = p.parse_args(argv)
    model, kept = map_bound.load_detector(a, a.images or None)
    with unittest.mock.patch.object(evaluation, "RAM_BYTES", 0):
        _, files = map_bound.load_detector(a, a.images or None)
        files.evaluate(model)  # its loader built reading the images from their files
    example, ignored = kept.example_inputs(model), kept.ignored_layers(model)
    groups = [g.name for g in autoprune.prunable_groups(model, example, ignored)][::a.every]
    ratios = tuple(float(r) for r in a.ratios.split(","))
    kept.evaluate(model)  # the label cache and the loader, outside the timings
    assert kept._loader.dataset.cache == "ram" and files._loader.dataset.cache is None
    runs = {name: analyze(kept if name == KEPT else files, model, groups, ratios, options)
            for name, options in CONFIGS.items()}
    first = runs["before"]
    for run in runs.values():
        run["apart"] = max(abs(run["table"][g][r] - first["table"][g][r])
                           for g in groups for r in ratios)
    print(f"\n{len(groups)} groups x {len(ratios)} ratios, {len(kept.eval_set)} val images "
          f"at {a.size} px, one thread\n| analysis | wall (s) | its points (s) | points faster "
          f"| folded evaluation | largest difference |\n|---|---:|---:|---:|---|---:|")
    for name, run in runs.items():
        print(f"| {name} | {run['wall']:.1f} | {run['points']:.1f} | "
              f"{first['points'] / run['points']:.2f}x | {run['fused_eval']} | "
              f"{run['apart']:.1e} |")
    return {name: {k: run[k] for k in ("wall", "points", "fused_eval", "apart")}
            for name, run in runs.items()} | {"groups": len(groups)}


if __name__ == "__main__":
    main()
