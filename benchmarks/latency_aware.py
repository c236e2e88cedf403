"""Latency-aware allocation against a FLOPs allocation and uniform ratios at the same measured
latency, before and after the same short retraining.

One base model is trained on Fashion-MNIST and its sensitivities are measured with each point
timed (``sensitivity_options={"latency": True}``, CPU, one thread, batch 1). Three pruned copies
then remove the same share of *measured* latency:

- ``latency-aware``: ``autoprune.ratios_by_latency`` (greedy on loss per millisecond saved,
  corrected against the measured latency) for ``--pruned-latency``; what it achieves is the
  latency the other two are brought to;
- ``flops``: ``ratios_by_flops`` (least loss per FLOP), its FLOPs target bisected until the
  measured latency reduction matches;
- ``uniform``: one ratio for every group, bisected the same way.

Each of the three pruned models is then retrained the same way (``--retrain-epochs``, same seed,
data, schedule) and evaluated again.

Every latency is timed against the unpruned model in alternating rounds
(:class:`autoprune.engine.latency.PairedTimer`), so load on a shared machine cancels out.

    python benchmarks/latency_aware.py --quick     # mobilenetv3_large_100, 64 px, CPU, ~5 min
    python benchmarks/latency_aware.py             # 12k training images, 3 epochs

Prints one table row per method and, last, ``target=<t> achieved=<a> aware_metric=<x>
flops_metric=<y> uniform_metric=<z>`` (top-1 before retraining) followed by
``aware_retrained=<x> flops_retrained=<y> uniform_retrained=<z>`` (after it).
"""
from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import torch

from autoprune import classification as cls
from autoprune.engine.allocate import ratios_by_flops
from autoprune.engine.latency import PairedTimer
from autoprune.engine.latency_target import ratios_by_latency
from autoprune.engine.measure import count_flops
from autoprune.engine.prune import prune
from autoprune.engine.store import read_record
from autoprune.errors import ConfigError


def pruned_copy(model, example, ratios, ignored):
    net = copy.deepcopy(model)
    prune(net, example, {k: v for k, v in ratios.items() if v > 0}, ignored_layers=ignored)
    return net


def bisect_to_latency(make, measure, goal, lo=0.0, hi=0.95, steps=8):
    """The ``make(x)`` (ratios) whose measured latency reduction is closest to ``goal``, ``x``
    bisected in [lo, hi] (the reduction grows with ``x``)."""
    best = None
    for _ in range(steps):
        mid = (lo + hi) / 2
        try:
            ratios = make(mid)
        except ConfigError:  # a FLOPs target the table cannot reach: aim lower
            hi = mid
            continue
        reduction = measure(ratios)
        if best is None or abs(reduction - goal) < abs(best[1] - goal):
            best = (ratios, reduction)
        lo, hi = (mid, hi) if reduction < goal else (lo, mid)
    return best


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small CPU case")
    p.add_argument("--arch", default="mobilenetv3_large_100")
    p.add_argument("--pruned-latency", type=float, default=0.15)
    p.add_argument("--tolerance", type=float, default=0.03,
                   help="how close ratios_by_latency must land to the target")
    p.add_argument("--epochs", type=int, default=3, help="base training epochs")
    p.add_argument("--retrain-epochs", type=int, default=1,
                   help="epochs of the same retraining given to each pruned model (0: none)")
    p.add_argument("--train-images", type=int, default=12000)
    p.add_argument("--val-images", type=int, default=1000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--ratios", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9")
    p.add_argument("--threads", type=int, default=1, help="CPU threads while timing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", help="keep the base model and the sensitivity file here (a rerun "
                   "reuses them) instead of a temporary folder")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.train_images, args.val_images = 2, 3000, 300
        args.ratios = "0.2,0.4,0.6,0.8"
    torch.set_num_threads(args.threads)
    ratios = tuple(float(r) for r in args.ratios.split(","))
    common = dict(input_size=args.size, train_limit=args.train_images, eval_limit=args.val_images,
                  batch_size=64, lr=0.05, device="cpu", seed=args.seed, progress=False)
    timing = {"device": "cpu", "threads": args.threads, "batch": 1}

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(args.work_dir or tmp)
        t0 = time.perf_counter()
        base_path = tmp / "base" / "baseline" / "best.pt"
        if not (args.work_dir and base_path.is_file()):
            cls.train(args.arch, "fashion-mnist", epochs=args.epochs, save_dir=tmp / "base",
                      **common)
        model = cls.load_model(base_path).cpu()
        sens_path = tmp / "sens.json"
        cls.analyze_sensitivity(base_path, "fashion-mnist", sens_path,
                                eval_limit=args.val_images, ratios=ratios, device="cpu",
                                progress=False, sensitivity_options={
                                    "latency": True, "latency_threads": args.threads})
        record = read_record(sens_path)
        adapter = cls.ClassificationAdapter("fashion-mnist", "fashion-mnist", num_classes=10,
                                            **{k: v for k, v in common.items()
                                               if k != "input_size"}, input_size=args.size)
        example = adapter.example_inputs(model)
        ignored = [n for n, m in model.named_modules() if m in adapter.ignored_layers(model)]
        base_top1 = adapter.evaluate(model)["top1"]
        flops0 = count_flops(model, example)
        timer = PairedTimer(model, example, rounds=25, **timing)  # as ratios_by_latency's
        measure = lambda r: 1.0 - timer.compare(pruned_copy(model, example, r, ignored))
        print(f"{args.arch} on Fashion-MNIST at {args.size}px: base top-1 {base_top1:.4f}, "
              f"{flops0 / 1e6:.1f}M FLOPs, {record.extra['latency']['baseline_ms']:.2f} ms "
              f"(CPU, {args.threads} thread, batch 1), target -{args.pruned_latency:.0%} "
              f"latency ({time.perf_counter() - t0:.0f} s to train and analyse)", flush=True)

        aware = ratios_by_latency(model, example, record, args.pruned_latency,
                                  ignored_layers=ignored, tolerance=args.tolerance, **timing)
        goal = aware.achieved
        chosen = {"latency-aware": (dict(aware), aware.achieved)}
        most = max(max(p) for p in record.sensitivities.values())
        chosen["flops"] = bisect_to_latency(
            lambda f: ratios_by_flops(model, example, record.sensitivities, f,
                                      ignored_layers=ignored), measure, goal)
        chosen["uniform"] = bisect_to_latency(
            lambda r: {g: r for g in record.sensitivities}, measure, goal, hi=most)

        print(f"| method | latency reduction (measured) | FLOPs | top-1 before retraining | "
              f"top-1 after {args.retrain_epochs} epoch(s) |")
        print("|---|---:|---:|---:|---:|")
        metric, retrained = {}, {}
        for method, (ratios_, reduction) in chosen.items():
            net = pruned_copy(model, example, ratios_, ignored)
            metric[method] = adapter.evaluate(net)["top1"]
            flops = count_flops(net, example)
            retrained[method] = float("nan")
            if args.retrain_epochs > 0:
                torch.manual_seed(args.seed)  # the same retraining for the three
                net = adapter.fit(net, args.retrain_epochs, tmp / "retrain" / method)
                retrained[method] = adapter.evaluate(net)["top1"]
            print(f"| {method} | -{reduction:.1%} ({timer.baseline_ms * (1 - reduction):.2f} ms) "
                  f"| {flops / 1e6:.1f}M (-{1 - flops / flops0:.1%}) | {metric[method]:.4f} "
                  f"| {retrained[method]:.4f} |", flush=True)
        print(f"target={args.pruned_latency} achieved={goal:.3f} "
              f"aware_metric={metric['latency-aware']:.4f} flops_metric={metric['flops']:.4f} "
              f"uniform_metric={metric['uniform']:.4f}")
        print(f"aware_retrained={retrained['latency-aware']:.4f} "
              f"flops_retrained={retrained['flops']:.4f} "
              f"uniform_retrained={retrained['uniform']:.4f}")
        return {"target": args.pruned_latency, "achieved": goal, "metrics": metric,
                "retrained": retrained, "reductions": {m: c[1] for m, c in chosen.items()}}


if __name__ == "__main__":
    main()
