"""Accuracy after retraining at equal FLOPs: sensitivity ratios vs uniform vs global magnitude.

One base model is trained on Fashion-MNIST; three copies lose the same share of FLOPs (-50 % by
default) in three ways, and each is retrained with the same epochs and seed:

- ``sensitivity``: autoprune's per-group ratios from the measured sensitivities
  (``ratios_by_flops``);
- ``uniform``: one ratio for every group (the same allocator on a flat table);
- ``tp-global``: torch-pruning's global magnitude pruning (``MagnitudePruner``,
  ``global_pruning=True``, L1), its ratio bisected to the same FLOPs.

    python benchmarks/equal_flops_accuracy.py --quick     # a small CPU case, ~10 minutes
    python benchmarks/equal_flops_accuracy.py             # resnet18, 12k images, 3 + 3 epochs

Prints one table row per method and, last, ``best=<method>``.
"""
from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import torch
import torch_pruning as tp

from autoprune import classification as cls
from autoprune.engine.allocate import ratios_by_flops
from autoprune.engine.measure import count_flops, count_params
from autoprune.engine.prune import prune


def uniform_ratios(model, example, sens, target, ignored):
    """One ratio for every group with the same FLOPs target (a flat loss table)."""
    flat = {name: {r: r for r in points} for name, points in sens.items()}
    return ratios_by_flops(model, example, flat, target, ignored_layers=ignored)


def _classifier(model):
    """The layer producing the logits (torch-pruning must keep its outputs)."""
    if hasattr(model, "get_classifier"):
        return model.get_classifier()
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]


def tp_global(model, example, target, ignored, steps=12):
    """torch-pruning's global L1 magnitude pruning, its ratio bisected to ``target`` FLOPs."""
    base = count_flops(model, example)
    lo, hi, best = 0.0, 0.95, None
    for _ in range(steps):
        mid = (lo + hi) / 2
        candidate = copy.deepcopy(model)
        pruner = tp.pruner.MagnitudePruner(
            candidate, example, importance=tp.importance.GroupMagnitudeImportance(p=1),
            global_pruning=True, pruning_ratio=mid, max_pruning_ratio=0.95,
            ignored_layers=[dict(candidate.named_modules())[n] for n in ignored] +
            [_classifier(candidate)])
        pruner.step()
        reduction = 1 - count_flops(candidate, example) / base
        if best is None or abs(reduction - target) < abs(best[1] - target):
            best = (candidate, reduction)
        lo, hi = (mid, hi) if reduction < target else (lo, mid)
    return best[0]


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small CPU case")
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--pruned-flops", type=float, default=0.5)
    p.add_argument("--epochs", type=int, help="base training epochs (3; --quick: 2)")
    p.add_argument("--retrain-epochs", type=int, help="3 (--quick: 1)")
    p.add_argument("--train-images", type=int, help="12000 (--quick: 4000)")
    p.add_argument("--val-images", type=int, help="1000 (--quick: 500)")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--ratios", help="0.1,0.2,...,0.9 (--quick: 0.2,0.4,0.6,0.8)")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    defaults = dict(epochs=2, retrain_epochs=1, train_images=4000, val_images=500,
                    ratios="0.2,0.4,0.6,0.8") if args.quick else \
        dict(epochs=3, retrain_epochs=3, train_images=12000, val_images=1000,
             ratios="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9")
    for key, value in defaults.items():  # a flag given wins over --quick
        if getattr(args, key) is None:
            setattr(args, key, value)
    ratios = tuple(float(r) for r in args.ratios.split(","))
    common = dict(input_size=args.size, train_limit=args.train_images, eval_limit=args.val_images,
                  batch_size=128, lr=0.05, device=args.device, seed=args.seed, progress=False)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        base = cls.train(args.arch, "fashion-mnist", epochs=args.epochs, save_dir=tmp / "base",
                         **common)
        model = cls.load_model(base.baseline_path).cpu()
        sens = cls.analyze_sensitivity(base.baseline_path, "fashion-mnist", tmp / "sens.json",
                                       eval_limit=args.val_images, ratios=ratios,
                                       device=args.device, progress=False)
        adapter = cls.ClassificationAdapter(None, "fashion-mnist", num_classes=10,
                                            input_size=args.size, eval_limit=args.val_images,
                                            device=args.device, progress=False)
        example = adapter.example_inputs(model)
        ignored = [n for n, m in model.named_modules() if m in adapter.ignored_layers(model)]
        base_top1 = adapter.evaluate(model)["top1"]
        flops0 = count_flops(model, example)
        print(f"{args.arch} on Fashion-MNIST at {args.size}px: base top-1 {base_top1:.4f}, "
              f"{flops0 / 1e6:.1f}M FLOPs, target -{args.pruned_flops:.0%} "
              f"({time.perf_counter() - t0:.0f} s to train and analyse)")

        pruned = {}
        for method in ("sensitivity", "uniform"):
            chosen = ratios_by_flops(model, example, sens, args.pruned_flops,
                                     ignored_layers=ignored) if method == "sensitivity" else \
                uniform_ratios(model, example, sens, args.pruned_flops, ignored)
            pruned[method] = copy.deepcopy(model)
            prune(pruned[method], example, chosen, ignored_layers=ignored)
        pruned["tp-global"] = tp_global(model, example, args.pruned_flops, ignored)

        print("| method | FLOPs | params | top-1 before retraining | top-1 after retraining |")
        print("|---|---:|---:|---:|---:|")
        after = {}
        for method, net in pruned.items():
            before = adapter.evaluate(net)["top1"]
            torch.manual_seed(args.seed)
            result = cls.train(net, "fashion-mnist", epochs=args.retrain_epochs,
                               save_dir=tmp / method, **common)
            after[method] = result.metrics["top1"]
            flops = count_flops(net.cpu(), example)
            print(f"| {method} | {flops / 1e6:.2f}M (-{1 - flops / flops0:.1%}) | "
                  f"{count_params(net) / 1e6:.3f}M | {before:.4f} | {after[method]:.4f} |",
                  flush=True)
        best = max(after, key=after.get)
        print(f"best={best}")
        return best


if __name__ == "__main__":
    main()
