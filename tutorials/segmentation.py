"""Tutorial: prune a segmentation-models-pytorch Unet the PaddleX way, on Fashion-MNIST scenes
(CPU, < 10 min).

    python tutorials/segmentation.py [--out runs/tutorial_seg] [--model unet] [--encoder resnet18]

The scenes are Fashion-MNIST garments pasted on textured backgrounds; each pixel's class is
0 (background) or 1 + the garment's class: 11 classes, measured with mIoU.

1. train a base model (Dice + cross-entropy, AdamW, cosine; the best-mIoU epoch is kept);
2. measure how sensitive each prunable group is, on the validation scenes, into a JSON file
   (rerun the script after Ctrl-C: finished points are kept);
3. train again from the base weights with ``sensitivities_file`` and ``eval_metric_loss``: the
   model is pruned at the start, retrained, and a before/after table (FLOPs, CPU latency, mIoU and
   per-class IoU) is printed and written to ``<out>/pruned/report.md``.

The short schedule here (600 scenes, 3 + 3 epochs, about 6 minutes on two busy CPU cores) gives a
low mIoU (~0.12 -> 0.16); 2000 scenes with 4 + 2 epochs took 15 minutes and gave 0.32 -> 0.38 at
-61 % FLOPs (an unpruned model trained the same 2 extra epochs: 0.39).

Your own data: ``train_data="path/train"`` with ``path/train/images/*.png|jpg`` and
``path/train/masks/*.png`` (class indices, same file names, 255 = ignore), and ``num_classes``.
"""
import argparse
from pathlib import Path

import torch

from autoprune import segmentation as seg


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="runs/tutorial_seg")
    p.add_argument("--model", default="unet", help="smp architecture: unet, fpn, deeplabv3plus...")
    p.add_argument("--encoder", default="resnet18",
                   help="resnet18, mobilenet_v2, efficientnet-b0...")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--eval-metric-loss", type=float, default=0.05)
    args = p.parse_args()
    out = Path(args.out)
    data = dict(train_data="fashion-scenes", input_size=64, train_limit=600, eval_limit=64,
                batch_size=16, lr=2e-3, warmup_epochs=0.2)
    ratios = (0.3, 0.6)  # fewer points than the default 0.1...0.9: a quicker, coarser profile

    # Step 1: plain training (no sensitivities_file): out/baseline/best.pt
    base = seg.train(args.model, args.encoder, epochs=args.epochs, save_dir=out, **data)
    print(f"step 1: base model {base.baseline_path}, mIoU {base.metrics['miou']:.4f}")

    # Step 2: sensitivities of the trained model on the validation scenes
    sens = seg.analyze_sensitivity(base.baseline_path, "fashion-scenes", out / "sensitivities.json",
                                   ratios=ratios, eval_limit=data["eval_limit"])
    print(f"step 2: {len(sens)} groups measured -> {out / 'sensitivities.json'}")

    # Step 3: prune with a tolerated mIoU loss of eval_metric_loss per group, then retrain into
    # the same save_dir: out/pruned/best.pt beside out/baseline/, the one-call flow's layout
    result = seg.train(args.model, args.encoder, epochs=args.epochs, save_dir=out,
                       pretrain_weights=base.baseline_path,
                       sensitivities_file=out / "sensitivities.json", ratios=ratios,
                       eval_metric_loss=args.eval_metric_loss, **data)
    print(f"step 3: pruned model {result.pruned_path}; FLOPs "
          f"-{result.report['flops_reduction']:.1%}; report in {out / 'report.md'}")

    # Any checkpoint autoprune wrote loads in a fresh process, weights-only, and exports to ONNX:
    model = seg.load_model(result.pruned_path)
    print(f"reloaded: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")
    try:
        import autoprune

        onnx_path = autoprune.export_onnx(model, torch.randn(1, 3, 64, 64), out / "pruned.onnx")
        print(f"exported {onnx_path}")
    except ImportError:
        print("pip install onnx to export the pruned model to ONNX")


if __name__ == "__main__":
    main()
