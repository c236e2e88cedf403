"""Tutorial: prune an Ultralytics YOLO OBB (oriented bounding box) model the PaddleX way, in three
steps, on CPU (~5 min).

    python tutorials/obb.py [--out runs/tutorial_obb] [--model yolo11n-obb.yaml]

0. write a small YOLO OBB data set: Fashion-MNIST garments, each turned by a random angle,
   pasted on 96 px canvases, one rotated box per garment around its visible pixels in the
   garment's own frame, as 4 corners (``write_yolo_dataset(..., task="obb")``);
1. train a base model from its YAML (nothing is downloaded; Ultralytics' OBB trainer);
2. measure how sensitive each prunable group is — the relative loss of rotated-box mAP50-95 on
   the val images — into a JSON file (rerun the script after Ctrl-C: finished points are kept);
3. train again from the base weights with ``sensitivities_file`` and ``pruned_flops`` (or
   ``--eval-metric-loss``): the model is pruned (the angle outputs and each head branch's last
   conv keep their channels), retrained, and a before/after table is printed (FLOPs, CPU latency,
   rotated-box mAP).

The pruned model then loads weights-only with ``obb.load_model``, as a normal Ultralytics
checkpoint with ``YOLO(path)`` (``.predict`` gives rotated boxes), and exports to ONNX (boxes,
class scores, angles). Everything runs offline.
"""
import argparse
from pathlib import Path

from autoprune import obb
from autoprune.datasets.scenes import write_yolo_dataset

RATIOS = (0.3, 0.6)  # pruning ratios measured per group (more points: finer allocation, slower)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="runs/tutorial_obb")
    p.add_argument("--model", default="yolov8n-obb.yaml",
                   help="yolov8n/s-obb.yaml, yolo11n/s-obb.yaml or yolo26n/s-obb.yaml")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--retrain-epochs", type=int, default=15)
    p.add_argument("--input-size", type=int, default=96)
    p.add_argument("--pruned-flops", type=float, default=0.4)
    p.add_argument("--eval-metric-loss", type=float, default=None,
                   help="prune by a tolerated relative rotated-box mAP loss per group instead")
    args = p.parse_args()
    out = Path(args.out)
    # Ultralytics' defaults suit large sets; a small CPU run wants a step per batch and AdamW
    train_args = dict(optimizer="AdamW", lr0=0.003, warmup_epochs=1, nbs=16)
    common = dict(input_size=args.input_size, batch_size=16, train_args=train_args)

    # Step 0: a YOLO OBB data set (images/, labels/ with 4 corners per object, data.yaml)
    data = write_yolo_dataset(out / "scenes", train=128, val=32, size=args.input_size, seed=0,
                              task="obb")
    print(f"step 0: data set {data}")

    # Step 1: plain training (no sensitivities_file): out/baseline/best.pt (+ its ultralytics/)
    base = obb.train(args.model, data, epochs=args.epochs, save_dir=out, **common)
    print(f"step 1: base model {base.baseline_path}, rotated-box mAP50-95 "
          f"{base.metrics['map50_95_obb']:.4f}")

    # Step 2: sensitivities of the trained model on the val images
    sens = obb.analyze_sensitivity(base.baseline_path, data, out / "sensitivities.json",
                                   ratios=RATIOS, batch_size=16)
    print(f"step 2: {len(sens)} groups measured -> {out / 'sensitivities.json'}")

    # Step 3: prune (FLOPs target, or a tolerated loss per group), then retrain
    target = dict(pruned_flops=args.pruned_flops) if args.eval_metric_loss is None \
        else dict(eval_metric_loss=args.eval_metric_loss, pruned_flops=None)
    result = obb.train(base.baseline_path, data, epochs=args.retrain_epochs,
                       save_dir=out,  # adds pruned/ and the report beside baseline/
                       sensitivities_file=out / "sensitivities.json", ratios=RATIOS,
                       **target, **common)
    print(f"step 3: pruned model {result.pruned_path}; FLOPs "
          f"-{result.report['flops_reduction']:.1%}; report in {out / 'report.md'}")

    # Any checkpoint autoprune wrote loads in a fresh process, weights-only:
    model = obb.load_model(result.pruned_path)
    print(f"reloaded: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")

    # Ultralytics' own checkpoint of the pruned run works with the usual YOLO API:
    from ultralytics import YOLO

    yolo = YOLO(str(out / "pruned" / "ultralytics" / "weights" / "best.pt"))
    image = next((out / "scenes" / "images" / "val").glob("*.png"))
    found = yolo.predict(str(image), imgsz=args.input_size, conf=0.1, verbose=False)[0]
    print(f"YOLO(...).predict: {len(found.obb)} rotated boxes (x, y, w, h, angle) on "
          f"{image.name}")
    onnx = obb.export_onnx(result.pruned_path, out / "pruned.onnx")
    print(f"ONNX: {onnx}")


if __name__ == "__main__":
    main()
