"""The probe's cost: groups whose removal breaks the model, found by testing groups together
(autoprune's ``unsafe_groups``) against testing one group at a time (its earlier algorithm, kept
here as the reference), same graph, same verdicts required.

Every ``prunable_groups`` / ``prune`` / analysis on a new architecture runs the probe once a
process; it was 12 % of the test suite's CPU time before it tested groups together.

    taskset -c 0 python benchmarks/probe_speed.py                  # ~3 min, one thread
    taskset -c 0 python benchmarks/probe_speed.py --models yolov9s@64,resnet18@64

Prints one line per model (groups, unsafe groups, both times, speed-up, same verdict) and last
``models=<n> same=<n> total_speedup=<x>``.
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

from autoprune.engine.groups import PruningGraph
from autoprune.engine.prefix_cache import PrefixCache
from autoprune.engine.probe import output_shape, unsafe_groups
from autoprune.engine.removal import pruned_temporarily

MODELS = ("yolov8n@320,yolov9s@64,yolo26n@64,resnet18@64,efficientnet_b0@64,densenet121@64,"
          "rexnet_100@64,cspdarknet53@64,unet-resnet18@64,vit_tiny_patch16_224@224,"
          "swin_tiny_patch4_window7_224@224,eva02_tiny_patch14_224@224")


def one_at_a_time(graph: PruningGraph, groups: list) -> list[str]:
    """The reference (the probe until 2026-11-26): each group alone loses half its channels for
    one forward pass, which starts at the group's first layer (the prefix cache)."""
    model = graph.model
    model.eval()
    args = (graph.example_inputs,)
    unsafe = []
    cache = PrefixCache(model)
    with torch.no_grad():
        with cache.recording():
            want = output_shape(model(*args))
        for group in groups:
            try:
                touched = graph.touched_modules(group)
                idxs = graph.channels_to_remove(group, 0.5)
                with pruned_temporarily(graph, group, idxs, touched), \
                        cache.skipping_before(cache.first_touched(touched)):
                    fits = output_shape(model(*args)) == want
            except Exception:  # noqa: BLE001 - as the probe: any failure is unsafe
                fits = False
            if not fits:
                unsafe.append(group.name)
    return unsafe


def build(item: str) -> tuple[str, torch.nn.Module, torch.Tensor, list | None]:
    """``name@px``: an Ultralytics detector, Unet-resnet18, or a timm model."""
    name, _, px = item.partition("@")
    px = int(px or 64)
    torch.manual_seed(0)
    if name.startswith("yolo"):
        from autoprune.tasks.detection.adapter import DetectionAdapter
        adapter = DetectionAdapter(nc=3, input_size=px)
        model = adapter.build(name)
        return name, model, adapter.example_inputs(model), adapter.ignored_layers(model)
    if name == "unet-resnet18":
        import segmentation_models_pytorch as smp
        return name, smp.Unet("resnet18", encoder_weights=None, classes=3), \
            torch.randn(1, 3, px, px), None
    import timm
    return name, timm.create_model(name, num_classes=10), torch.randn(1, 3, px, px), None


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=MODELS, help="comma list of name@px")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    rows = []
    for item in args.models.split(","):
        name, model, example, ignored = build(item)
        graph = PruningGraph(model.eval(), example, ignored, probe=False)
        t0 = time.process_time()
        reference = one_at_a_time(graph, graph.groups)
        t_ref = time.process_time() - t0
        t0 = time.process_time()
        found = unsafe_groups(graph, graph.groups)
        t_new = time.process_time() - t0
        rows.append({"model": name, "groups": len(graph.groups), "unsafe": len(found),
                     "one_at_a_time_s": t_ref, "together_s": t_new, "same": found == reference})
        print(f"{item:34s} {len(graph.groups):4d} groups {len(found):3d} unsafe  one at a time "
              f"{t_ref:6.2f} s  together {t_new:6.2f} s  ({t_ref / t_new:5.1f}x)  same verdict: "
              f"{'yes' if found == reference else 'NO'}", flush=True)
    total = sum(r["one_at_a_time_s"] for r in rows) / sum(r["together_s"] for r in rows)
    print(f"models={len(rows)} same={sum(r['same'] for r in rows)} total_speedup={total:.2f}")
    return rows


if __name__ == "__main__":
    main()
