"""Sensitivity analysis time: PaddleSlim's algorithm vs autoprune's default, same model and data.

PaddleSlim's algorithm (``sensitivity()`` in paddleslim/prune/sensitive.py): for every (group,
ratio) point, copy the model, prune the group for real, and evaluate it with a DataLoader that
re-reads and re-decodes the validation image files. autoprune's default: the validation batches
are decoded once (``CachedBatches``), the group is pruned in place and restored exactly, no copy,
the unchanged stages replayed (prefix cache). Also timed: masked, batched variants
(``evaluation="masked"``, the default on a GPU), and the adaptive analysis (``adaptive=True``,
target: a 5 % loss), which measures only the points and images the allocation needs.

    python benchmarks/sensitivity_speed.py --quick     # small CPU case, a few minutes
    python benchmarks/sensitivity_speed.py --device cuda --profile 128,512

The last line printed is ``speedup=<x> max_abs_diff=<y>``. ``--profile B1,B2`` times only the
masked analysis, in evaluation batches of each size, with cuDNN's autotuner off and on (each the
second of two runs), then prints where the time goes at the last size (torch.profiler's top ops).
"""
from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader

import autoprune
from autoprune import classification as cls
from autoprune.engine.data import CachedBatches
from autoprune.datasets.fashion_mnist import _FILES, _load, find_root
from autoprune.engine.groups import PruningGraph
from autoprune.engine.sensitivity import relative_loss
from autoprune.flow.sensitivities import TaskEval
from autoprune.flow.training import evaluate_topk


def write_image_folder(root: Path, count: int) -> Path:
    """Fashion-MNIST test images as PNG files in class folders (what a user's val set
    looks like)."""
    base = find_root()
    images, labels = _load(base, _FILES["test"][0]), _load(base, _FILES["test"][1])
    for i in range(count):
        d = root / f"class_{labels[i]}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i]).convert("RGB").save(d / f"{i:05d}.png")
    return root


def paddleslim_style(model, example, loader, groups, ratios, criterion="l1_norm", dev="cpu"):
    """The reference algorithm: copy + real prune + a full pass over the file loader per point."""
    dev = torch.device(dev)
    top1 = lambda m: evaluate_topk(m.eval(), loader, device=dev, topk=(1,))["top1"]
    baseline = top1(model)
    sens = {}
    for name in groups:
        for ratio in ratios:
            pruned = copy.deepcopy(model)
            graph = PruningGraph(pruned, example)
            group = graph.group(name)
            graph.remove(group, graph.channels_to_remove(group, ratio, criterion))
            with torch.no_grad():
                sens.setdefault(name, {})[ratio] = relative_loss(baseline, top1(pruned))
    return sens


def cached_analysis(model, example, eval_set, names, ratios, batch: int, device: str,
                    mode: str = "masked", on_device: bool = True) -> tuple[dict, float]:
    """One analysis with ``evaluation=mode`` on batches decoded once (kept on a CUDA ``device``
    as the task adapters keep them, or on the host: ``on_device=False``): its table and seconds
    (the decoding included)."""
    t0 = time.perf_counter()
    dev = torch.device(device)
    cached = CachedBatches(DataLoader(eval_set, batch_size=batch, shuffle=False),
                           device=dev if on_device else None)
    eval_fn = lambda m: evaluate_topk(m, cached, device=dev, topk=(1,))["top1"]
    table = autoprune.sensitivity(model, example, eval_fn, groups=names, ratios=ratios,
                                  options={"evaluation": mode}, progress=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return table, time.perf_counter() - t0


def profile_masked(model, example, eval_set, names, ratios, batches: list[int],
                   device: str) -> None:
    """Why the masked analysis's time depends on its batch size: its time with the decoded
    batches kept on the host (the first size), at each batch size with cuDNN's autotuner off and
    on, then torch.profiler's top ops at the last size."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.startswith("cuda")
    runs = [cached_analysis(model, example, eval_set, names, ratios, batches[0], device,
                            on_device=False)[1] for _ in range(2)]
    print(f"masked analysis, batches of {batches[0]} kept on the host (copied again for every "
          f"variant): {runs[1]:.2f} s (first run {runs[0]:.2f} s)")
    for batch in batches:
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            runs = [cached_analysis(model, example, eval_set, names, ratios, batch, device)[1]
                    for _ in range(2)]
            print(f"masked analysis, batches of {batch}, cudnn.benchmark={bench}: "
                  f"{runs[1]:.2f} s (first run {runs[0]:.2f} s)")
    torch.backends.cudnn.benchmark = False
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        cached_analysis(model, example, eval_set, names, ratios, batches[-1], device)
    table = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(f"where the time goes, batches of {batches[-1]} (torch.profiler, sorted by {key}):")
    print(table.table(sort_by=key, row_limit=20, max_name_column_width=55))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small CPU case (a few minutes)")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--val-images", type=int, default=2000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--ratios", default="0.1,0.3,0.5,0.7,0.9")
    p.add_argument("--groups", type=int, default=0, help="first N groups only (0: all)")
    p.add_argument("--train-images", type=int, default=3000)
    p.add_argument("--eval-batch", type=int, default=128,
                   help="evaluation batch size of every analysis timed (default 128)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the analysis runs there)")
    p.add_argument("--tf32", choices=("default", "off"), default="default",
                   help="cuda: torch's default (TF32 convolutions on Ampere and later: a "
                   "near-tie image can flip between two ways of computing a point) or off "
                   "(plain FP32 everywhere)")
    p.add_argument("--profile", metavar="B1,B2",
                   help="time only the masked analysis at these evaluation batch sizes "
                   "(cuDNN autotuner off / on) and print where its time goes")
    args = p.parse_args(argv)
    if args.quick:
        args.val_images, args.size, args.ratios, args.groups = 500, 32, "0.3,0.6", 6
    ratios = tuple(float(r) for r in args.ratios.split(","))
    if args.tf32 == "off":
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = cls.train(args.model, "fashion-mnist", epochs=1, train_limit=args.train_images,
                         eval_limit=200, input_size=args.size, batch_size=64, save_dir=tmp / "base",
                         progress=False)
        model = cls.load_model(base.baseline_path)
        val_dir = write_image_folder(tmp / "val", args.val_images)
        adapter = cls.ClassificationAdapter(None, val_dir, num_classes=10, input_size=args.size,
                                            batch_size=args.eval_batch, progress=False)
        example = adapter.example_inputs(model)
        names = [g.name for g in autoprune.prunable_groups(model, example)]
        names = names[: args.groups] if args.groups else names
        loader = DataLoader(adapter.eval_set, batch_size=args.eval_batch, shuffle=False)
        print(f"model {args.model}, {len(names)} groups x {len(ratios)} ratios, "
              f"{args.val_images} PNG validation images at {args.size}px in batches of "
              f"{args.eval_batch}, "
              f"{torch.get_num_threads()} CPU threads, device {args.device}"
              + (f", TF32 {args.tf32}" if args.device.startswith("cuda") else ""))

        model, example = model.to(args.device), example.to(args.device)
        if args.profile:
            profile_masked(model, example, adapter.eval_set, names, ratios,
                           [int(b) for b in args.profile.split(",")], args.device)
            return
        t0 = time.perf_counter()
        ref = paddleslim_style(model, example, loader, names, ratios, dev=args.device)
        t_ref = time.perf_counter() - t0
        print(f"PaddleSlim algorithm: {t_ref:.1f} s")

        times, results = {}, {}
        for mode in ("masked", "auto"):  # "auto", the default: masked on a GPU, else real prune
            results[mode], times[mode] = cached_analysis(model, example, adapter.eval_set, names,
                                                         ratios, args.eval_batch, args.device,
                                                         mode)
        t0 = time.perf_counter()  # the flow's own evaluation (its adapter), as a user gets it
        fresh = cls.ClassificationAdapter(None, val_dir, num_classes=10, input_size=args.size,
                                          batch_size=args.eval_batch, progress=False,
                                          device=args.device)
        with tempfile.TemporaryDirectory() as holder:
            adaptive = autoprune.sensitivity(
                model, example, TaskEval(fresh), groups=names, ratios=ratios,
                sensitivities_file=Path(holder) / "adaptive.json", progress=False,
                options={"adaptive": True, "target": {"loss": 0.05}})
            counts = autoprune.read_record(Path(holder) / "adaptive.json").extra["evaluation"]
        t_adaptive = time.perf_counter() - t0
        theirs, mine = (autoprune.ratios_by_loss(t, 0.05) for t in (ref, adaptive))
        differ = {g: (theirs.get(g, 0.0), mine.get(g, 0.0)) for g in names
                  if abs(theirs.get(g, 0.0) - mine.get(g, 0.0)) > 1e-9}
        print(f"autoprune adaptive (loss target 0.05): {t_adaptive:.1f} s (speedup "
              f"{t_ref / t_adaptive:.2f}, {counts.get('images_evaluated')} images evaluated of "
              f"{len(names) * len(ratios) * args.val_images}, same allocation as PaddleSlim's "
              f"table: {'yes' if not differ else 'no'})"
              + "".join(f"\n  {g}: {a:.2f} (PaddleSlim's table) vs {b:.2f} (adaptive)"
                        for g, (a, b) in differ.items()))
        diff = lambda a: max(abs(ref[n][r] - a[n][r]) for n in names for r in ratios)
        print(f"autoprune masked + batched variants: {times['masked']:.1f} s "
              f"(speedup {t_ref / times['masked']:.2f}, "
              f"max_abs_diff {diff(results['masked']):.2e})")
        print(f"autoprune default:    {times['auto']:.1f} s")
        print(f"speedup={t_ref / times['auto']:.2f} max_abs_diff={diff(results['auto']):.2e}")


if __name__ == "__main__":
    main()
