"""The prefix cache on a YOLO analysis (issue 41): one trained detector's full sensitivity analysis
run twice on the same groups, ratios and val images, the prefix cache off and on. Ultralytics'
validator evaluates a fused copy of the model; the cache follows that copy
(``engine/prefix_cache.follow``) and replays the stages before each group's first pruned layer.
Printed: wall time of each analysis and of its points, the speed-up, and the largest difference
between the two tables (the replay is exact: 0).

    taskset -c 0 python benchmarks/yolo_prefix_cache.py --weights runs/int8/.../fp32/baseline/best.pt \\
        --data runs/int8/.../data.yaml --size 320 --every 3

The detector of benchmarks/README.md's figures is the FP32 base that ``benchmarks/int8.py
--models yolov8n --train-images 480 --val-images 160 --epochs 30`` trains (as map_bound.py's).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

import autoprune
from autoprune import detection as det
from autoprune.flow.sensitivities import TaskEval
from autoprune.tasks.detection import DetectionAdapter


def analyze(adapter: DetectionAdapter, model: torch.nn.Module, groups: list[str],
            ratios: tuple[float, ...], cache: bool) -> dict:
    """One full analysis: its table, wall time and the seconds its points took."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sens.json"
        start = time.perf_counter()
        table = autoprune.sensitivity(model, adapter.example_inputs(model), TaskEval(adapter),
                                      groups=groups, ratios=ratios, sensitivities_file=path,
                                      ignored_layers=adapter.ignored_layers(model),
                                      progress=False, options={"prefix_cache": cache})
        wall = time.perf_counter() - start
        points = autoprune.read_record(path).extra["evaluation"]["seconds"]
    return {"table": table, "wall": wall, "points": points}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", required=True, help="a trained detector (autoprune checkpoint)")
    p.add_argument("--data", required=True, help="its data.yaml (the val split is measured on)")
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--every", type=int, default=1, help="every k-th group of the model")
    p.add_argument("--ratios", default="0.3,0.6")
    p.add_argument("--images", type=int, default=0, help="the first N val images (0: all)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    model = det.load_model(a.weights).eval()
    adapter = DetectionAdapter(a.data, input_size=a.size, batch_size=a.batch, device="cpu",
                               eval_limit=a.images or None, progress=False)
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = [g.name for g in autoprune.prunable_groups(model, example, ignored)][::a.every]
    ratios = tuple(float(r) for r in a.ratios.split(","))
    adapter.evaluate(model)  # the label cache and the loader, outside both timings
    runs = {cache: analyze(adapter, model, groups, ratios, cache) for cache in (False, True)}
    apart = max(abs(runs[True]["table"][g][r] - runs[False]["table"][g][r])
                for g in groups for r in ratios)
    off, on = runs[False], runs[True]
    print(f"\n{len(groups)} groups x {len(ratios)} ratios, {len(adapter.eval_set)} val images "
          f"at {a.size} px, one thread\n| prefix cache | analysis (s) | its points (s) |\n"
          f"|---|---:|---:|\n| off | {off['wall']:.1f} | {off['points']:.1f} |\n"
          f"| on | {on['wall']:.1f} | {on['points']:.1f} |\n"
          f"points {off['points'] / on['points']:.2f}x faster, analysis "
          f"{off['wall'] / on['wall']:.2f}x; largest difference between the tables {apart:.1e}")
    return {"off": {k: off[k] for k in ("wall", "points")},
            "on": {k: on[k] for k in ("wall", "points")}, "apart": apart,
            "groups": len(groups)}


if __name__ == "__main__":
    main()
