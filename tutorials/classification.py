"""Tutorial: prune a classifier the PaddleX way, in three steps, on Fashion-MNIST (CPU, < 10 min).

    python tutorials/classification.py [--out runs/tutorial_cls] [--model mobilenetv3_small_100]

1. train a base model;
2. measure how sensitive each prunable group is, on the validation images, into a JSON file
   (rerun the script after Ctrl-C: finished points are kept);
3. train again from the base weights with ``sensitivities_file`` and ``eval_metric_loss``: the
   model is pruned at the start, retrained, and a before/after table is printed.

Fashion-MNIST is gray: autoprune repeats it to 3 channels so ImageNet-style models take it, and
resizes it to ``input_size`` (32 px here).
"""
import argparse
from pathlib import Path

from autoprune import classification as cls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="runs/tutorial_cls")
    p.add_argument("--model", default="resnet18", help="a timm or torchvision model name")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--eval-metric-loss", type=float, default=0.05)
    args = p.parse_args()
    out = Path(args.out)
    data = dict(train_limit=8000, eval_limit=1000, input_size=32, batch_size=128)

    # Step 1: plain training (no sensitivities_file): out/baseline/best.pt
    base = cls.train(args.model, "fashion-mnist", epochs=args.epochs, save_dir=out, **data)
    print(f"step 1: base model {base.baseline_path}, top1 {base.metrics['top1']:.4f}")

    # Step 2: sensitivities of the trained model on the validation images
    sens = cls.analyze_sensitivity(base.baseline_path, "fashion-mnist", out / "sensitivities.json",
                                   eval_limit=data["eval_limit"])
    print(f"step 2: {len(sens)} groups measured -> {out / 'sensitivities.json'}")

    # Step 3: prune with a tolerated loss of eval_metric_loss per group, then retrain into the
    # same save_dir: out/pruned/best.pt beside out/baseline/, the one-call flow's layout
    result = cls.train(args.model, "fashion-mnist", epochs=args.epochs, save_dir=out,
                       pretrain_weights=base.baseline_path,
                       sensitivities_file=out / "sensitivities.json",
                       eval_metric_loss=args.eval_metric_loss, **data)
    print(f"step 3: pruned model {result.pruned_path}; FLOPs "
          f"-{result.report['flops_reduction']:.1%}; report in {out / 'report.md'}")

    # Any checkpoint autoprune wrote loads in a fresh process, weights-only:
    model = cls.load_model(result.pruned_path)
    print(f"reloaded: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")


if __name__ == "__main__":
    main()
