"""Tutorial: prune an Ultralytics YOLO detector the PaddleX way, in three steps, on CPU (< 10 min).

    python tutorials/detection.py [--out runs/tutorial_det] [--model yolov8n.yaml]

0. write a small YOLO data set: Fashion-MNIST garments pasted on 96 px canvases (boxes exact);
1. train a base model from its YAML (nothing is downloaded; Ultralytics trains);
2. measure how sensitive each prunable group is — the relative loss of mAP50-95 on the val
   images — into a JSON file (rerun the script after Ctrl-C: finished points are kept);
3. train again from the base weights with ``sensitivities_file`` and ``pruned_flops`` (or
   ``--eval-metric-loss``): the model is pruned at the start, retrained, and a before/after table
   is printed (FLOPs, CPU latency, mAP50-95, mAP50).

The pruned model then loads weights-only with ``det.load_model``, as a normal Ultralytics
checkpoint with ``YOLO(path)``, and exports to ONNX. Everything runs offline.
"""
import argparse
from pathlib import Path

from autoprune import detection as det
from autoprune.datasets.scenes import write_yolo_dataset

RATIOS = (0.3, 0.6)  # pruning ratios measured per group (more points: finer allocation, slower)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="runs/tutorial_det")
    p.add_argument("--model", default="yolov8n.yaml", help="yolov8n/s.yaml or yolo11n/s.yaml")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--imgsz", type=int, default=96)
    p.add_argument("--pruned-flops", type=float, default=0.4)
    p.add_argument("--eval-metric-loss", type=float, default=None,
                   help="prune by a tolerated relative mAP loss per group instead of a "
                   "FLOPs target")
    args = p.parse_args()
    out = Path(args.out)
    # Ultralytics' defaults suit large sets; a small CPU run wants a step per batch and AdamW
    train_args = dict(optimizer="AdamW", lr0=0.003, warmup_epochs=1, nbs=16)
    common = dict(input_size=args.imgsz, batch_size=16, train_args=train_args)

    # Step 0: a YOLO data set (images/, labels/, data.yaml), identical for the same seed
    data = write_yolo_dataset(out / "scenes", train=128, val=32, size=args.imgsz, seed=0)
    print(f"step 0: data set {data}")

    # Step 1: plain training (no sensitivities_file): out/baseline/best.pt (+ its ultralytics/)
    base = det.train(args.model, data, epochs=args.epochs, save_dir=out, **common)
    print(f"step 1: base model {base.baseline_path}, mAP50-95 {base.metrics['map50_95']:.4f}")

    # Step 2: sensitivities of the trained model on the val images (a subset would be
    # eval_limit=N; the number of images used is recorded in the file)
    sens = det.analyze_sensitivity(base.baseline_path, data, out / "sensitivities.json",
                                   ratios=RATIOS, batch_size=16)
    print(f"step 2: {len(sens)} groups measured -> {out / 'sensitivities.json'}")

    # Step 3: prune (FLOPs target, or a tolerated loss per group), then retrain into the same
    # save_dir: out/pruned/ beside out/baseline/, the one-call flow's layout
    target = dict(pruned_flops=args.pruned_flops) if args.eval_metric_loss is None \
        else dict(eval_metric_loss=args.eval_metric_loss, pruned_flops=None)
    result = det.train(base.baseline_path, data, epochs=args.epochs, save_dir=out,
                       sensitivities_file=out / "sensitivities.json", ratios=RATIOS,
                       **target, **common)
    print(f"step 3: pruned model {result.pruned_path}; FLOPs "
          f"-{result.report['flops_reduction']:.1%}; report in {out / 'report.md'}")

    # Any checkpoint autoprune wrote loads in a fresh process, weights-only:
    model = det.load_model(result.pruned_path)
    print(f"reloaded: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")

    # Ultralytics' own checkpoint of the pruned run works with the usual YOLO API:
    from ultralytics import YOLO

    yolo = YOLO(str(out / "pruned" / "ultralytics" / "weights" / "best.pt"))
    image = next((out / "scenes" / "images" / "val").glob("*.png"))
    boxes = yolo.predict(str(image), imgsz=args.imgsz, conf=0.1, verbose=False)[0].boxes
    print(f"YOLO(...).predict: {len(boxes)} boxes on {image.name}")
    onnx = det.export_onnx(result.pruned_path, out / "pruned.onnx")
    print(f"ONNX: {onnx}")


if __name__ == "__main__":
    main()
