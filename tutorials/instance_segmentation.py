"""Tutorial: prune an Ultralytics YOLO-seg model the PaddleX way, in three steps, on CPU (~4 min).

    python tutorials/instance_segmentation.py [--out runs/tutorial_iseg] [--model yolo11n-seg.yaml]

0. write a small YOLO-seg data set: Fashion-MNIST garments pasted on 96 px canvases, one polygon
   per garment traced from its pixels (``write_yolo_dataset(..., task="segment")``);
1. train a base model from its YAML (nothing is downloaded; Ultralytics' segment trainer);
2. measure how sensitive each prunable group is — the relative loss of mask mAP50-95 on the val
   images — into a JSON file (rerun the script after Ctrl-C: finished points are kept);
3. train again from the base weights with ``sensitivities_file`` and ``pruned_flops`` (or
   ``--eval-metric-loss``): the model is pruned (the prototype head's output and each head
   branch's last conv keep their channels), retrained, and a before/after table is printed
   (FLOPs, CPU latency, mask and box mAP).

The pruned model then loads weights-only with ``iseg.load_model``, as a normal Ultralytics
checkpoint with ``YOLO(path)`` (``.predict`` gives masks), and exports to ONNX (boxes + mask
coefficients, prototypes). Everything runs offline.
"""
import argparse
from pathlib import Path

from autoprune import instance_segmentation as iseg
from autoprune.datasets.scenes import write_yolo_dataset

RATIOS = (0.3, 0.6)  # pruning ratios measured per group (more points: finer allocation, slower)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="runs/tutorial_iseg")
    p.add_argument("--model", default="yolov8n-seg.yaml",
                   help="yolov8n/s-seg.yaml, yolo11n/s-seg.yaml or yolo26n/s-seg.yaml")
    # 12 epochs on 96 scenes left mask mAP50-95 at 0.002 (too little to measure sensitivities);
    # 25 epochs on 128 scenes reached 0.128 in benchmarks/task_flows.py
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--retrain-epochs", type=int, default=15)
    p.add_argument("--input-size", type=int, default=96)
    p.add_argument("--pruned-flops", type=float, default=0.4)
    p.add_argument("--eval-metric-loss", type=float, default=None,
                   help="prune by a tolerated relative mask-mAP loss per group instead")
    args = p.parse_args()
    out = Path(args.out)
    # Ultralytics' defaults suit large sets; a small CPU run wants a step per batch and AdamW
    train_args = dict(optimizer="AdamW", lr0=0.003, warmup_epochs=1, nbs=16)
    common = dict(input_size=args.input_size, batch_size=16, train_args=train_args)

    # Step 0: a YOLO-seg data set (images/, labels/ with polygons, data.yaml)
    data = write_yolo_dataset(out / "scenes", train=128, val=32, size=args.input_size, seed=0,
                              task="segment")
    print(f"step 0: data set {data}")

    # Step 1: plain training (no sensitivities_file): out/baseline/best.pt (+ its ultralytics/)
    base = iseg.train(args.model, data, epochs=args.epochs, save_dir=out, **common)
    print(f"step 1: base model {base.baseline_path}, mask mAP50-95 "
          f"{base.metrics['map50_95_mask']:.4f}, box mAP50-95 {base.metrics['map50_95_box']:.4f}")

    # Step 2: sensitivities of the trained model on the val images
    sens = iseg.analyze_sensitivity(base.baseline_path, data, out / "sensitivities.json",
                                    ratios=RATIOS, batch_size=16)
    print(f"step 2: {len(sens)} groups measured -> {out / 'sensitivities.json'}")

    # Step 3: prune (FLOPs target, or a tolerated loss per group), then retrain
    target = dict(pruned_flops=args.pruned_flops) if args.eval_metric_loss is None \
        else dict(eval_metric_loss=args.eval_metric_loss, pruned_flops=None)
    result = iseg.train(base.baseline_path, data, epochs=args.retrain_epochs,
                        save_dir=out,  # adds pruned/ and the report beside baseline/
                        sensitivities_file=out / "sensitivities.json", ratios=RATIOS,
                        **target, **common)
    print(f"step 3: pruned model {result.pruned_path}; FLOPs "
          f"-{result.report['flops_reduction']:.1%}; report in {out / 'report.md'}")

    # Any checkpoint autoprune wrote loads in a fresh process, weights-only:
    model = iseg.load_model(result.pruned_path)
    print(f"reloaded: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")

    # Ultralytics' own checkpoint of the pruned run works with the usual YOLO API:
    from ultralytics import YOLO

    yolo = YOLO(str(out / "pruned" / "ultralytics" / "weights" / "best.pt"))
    image = next((out / "scenes" / "images" / "val").glob("*.png"))
    found = yolo.predict(str(image), imgsz=args.input_size, conf=0.1, verbose=False)[0]
    print(f"YOLO(...).predict: {0 if found.masks is None else len(found.masks)} masks on "
          f"{image.name}")
    onnx = iseg.export_onnx(result.pruned_path, out / "pruned.onnx")
    print(f"ONNX: {onnx}")


if __name__ == "__main__":
    main()
