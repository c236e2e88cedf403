"""The ``autoprune`` command line. Errors of bad input are printed as one line (exit code 2)."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .errors import AutopruneError


def _demo(args: argparse.Namespace) -> None:
    from .demo import run_demo

    run_demo(args.save_dir, arch=args.arch, epochs=args.epochs,
             finetune_epochs=args.finetune_epochs, train_images=args.train_images,
             val_images=args.val_images, size=args.size, eval_metric_loss=args.eval_metric_loss,
             seed=args.seed, device=args.device)


def _show(args: argparse.Namespace) -> None:
    from .store import read_record

    rec = read_record(args.file)
    print(f"arch: {rec.model.get('arch')}  fingerprint: {rec.model.get('fingerprint')}  "
          f"criterion: {rec.criterion}")
    print(f"metric: {rec.metric.get('name')}  baseline: {rec.metric.get('baseline')}  "
          f"higher_is_better: {rec.metric.get('higher_is_better')}")
    ratios = sorted({r for pts in rec.sensitivities.values() for r in pts})
    print("group".ljust(32) + "".join(f"{r:>8.2f}" for r in ratios))
    for group, pts in rec.sensitivities.items():
        cells = "".join(f"{pts[r]:>8.4f}" if r in pts else f"{'-':>8}" for r in ratios)
        print(group[:31].ljust(32) + cells)


def _merge(args: argparse.Namespace) -> None:
    from .store import merge_sensitivities, read_record, save_sensitivities

    first = read_record(args.inputs[0])
    merged = merge_sensitivities(args.inputs)
    save_sensitivities(merged, args.output, **first.model, criterion=first.criterion,
                       metric_name=first.metric.get("name"), baseline=first.metric.get("baseline"),
                       higher_is_better=first.metric.get("higher_is_better", True))
    print(f"merged {len(args.inputs)} files into {args.output} ({len(merged)} groups)")


def _convert(args: argparse.Namespace) -> None:
    from .store import import_paddleslim, save_sensitivities

    sens = import_paddleslim(args.input, allow_pickle=args.allow_pickle)
    save_sensitivities(sens, args.output, arch=args.arch, source="paddleslim")
    print(f"wrote {args.output} ({len(sens)} groups) from PaddleSlim pickle {args.input}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``autoprune`` command."""
    p = argparse.ArgumentParser(prog="autoprune", description="Sensitivity-driven structured "
                                "channel pruning for PyTorch CNNs.")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="train, analyse, prune and fine-tune a torchvision model on "
                       "Fashion-MNIST (CPU, a few minutes) and print the before/after table")
    d.add_argument("--save-dir", default="runs/demo", help="output folder (default: runs/demo)")
    d.add_argument("--arch", default="resnet18", help="torchvision model name (default: resnet18)")
    d.add_argument("--epochs", type=int, default=3, help="training epochs (default: 3)")
    d.add_argument("--finetune-epochs", type=int, default=2, help="epochs after pruning (default: 2)")
    d.add_argument("--train-images", type=int, default=12000, help="training subset (default: 12000)")
    d.add_argument("--val-images", type=int, default=1000, help="validation subset (default: 1000)")
    d.add_argument("--size", type=int, default=32, help="input size in pixels (default: 32)")
    d.add_argument("--eval-metric-loss", type=float, default=0.05,
                   help="tolerated relative top-1 loss per group (default: 0.05)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default="auto", help="auto, cpu or cuda")
    d.set_defaults(func=_demo)

    s = sub.add_parser("show", help="print a sensitivity file as a table")
    s.add_argument("file")
    s.set_defaults(func=_show)

    m = sub.add_parser("merge", help="merge sensitivity files (union; later files win)")
    m.add_argument("output")
    m.add_argument("inputs", nargs="+")
    m.set_defaults(func=_merge)

    c = sub.add_parser("convert-paddleslim", help="convert a PaddleSlim sensitivities pickle to "
                       "an autoprune JSON file (needs --allow-pickle)")
    c.add_argument("input")
    c.add_argument("output")
    c.add_argument("--allow-pickle", action="store_true",
                   help="confirm that you trust the file: pickle files can run code when read")
    c.add_argument("--arch", default=None, help="architecture to record in the file")
    c.set_defaults(func=_convert)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``autoprune`` console script."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except AutopruneError as e:
        print(f"autoprune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autoprune: interrupted (finished points are saved; rerun to resume)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
