"""``benchmarks/zoo.py --flow``: the one-call flow of one model on small data, then its pruned
checkpoint exported to ONNX and run in ONNX Runtime, and reloaded in a fresh process.

- a classifier (timm, torchvision, a YOLO ``-cls`` model): Fashion-MNIST, 512 train / 128 val
  images at 32 px, 2 epochs before and 1 after pruning;
- a YOLO task or RT-DETR: Fashion-MNIST scenes of one large garment whose val split is the
  training images (a model trained for a minute then scores above 0, which the sensitivities
  need), 16 images at the task's least size (64 px; RT-DETR 128), 12 epochs before and 2
  after pruning (RT-DETR: 40 before: a transformer decoder learns slowly; P2 / P6 heads: 128 px,
  30 / 60 epochs before, :data:`HEAD_RECIPES`);

each with a sensitivity analysis at ratio 0.3 into a new file and ``pruned_flops=0.3``. The
result holds the FLOPs removed, the metric before and after, the groups measured, the ONNX
Runtime check and the fresh process's largest output difference."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CLASSIFIER = dict(epochs=1, pretrain_epochs=2, batch_size=32, input_size=32, train_limit=512,
                  eval_limit=128)
YOLO = dict(epochs=2, pretrain_epochs=12, batch_size=8, eval_limit=16,
            train_args=dict(nbs=8, optimizer="AdamW", lr0=0.005, warmup_epochs=0, mosaic=0.0))
PRETRAIN_EPOCHS = {"rtdetr": 40}
# P2 / P6 heads (a stride-4 level, a stride-64 level) score 0 after 12 epochs at 64 px: 128 px
# and more epochs (measured on these scenes, mAP50-95: yolov8n-p2 0.051 after 30 epochs;
# yolo26n-p6 0.0009 after 30, 0.033 after 60)
HEAD_RECIPES = {"-p2": dict(size=128, pretrain_epochs=30),
                "-p6": dict(size=128, pretrain_epochs=60)}
SCENES_TASK = {"instance_segmentation": "segment"}  # the scenes' labels (boxes otherwise)

_RELOAD = """
import json, sys, torch
torch.set_num_threads(1)
from autoprune.flow.checkpoints import adapter_for_checkpoint, load_model
path, io = sys.argv[1], torch.load(sys.argv[2], weights_only=True)
model = load_model(path, adapter_for_checkpoint(path, progress=False)[0]).eval()
with torch.no_grad():
    y = model(io["x"])
while isinstance(y, (list, tuple)):
    y = y[0]
print("RESULT", json.dumps((y - io["y"]).abs().max().item()))
"""


def scenes(root: Path, size: int, task: str) -> Path:
    """16 scenes of one large garment at ``size`` px whose val split is the training images."""
    from autoprune.datasets.scenes import write_yolo_dataset

    path = write_yolo_dataset(root, train=16, val=4, size=size, seed=0, objects=(1, 1),
                              scale=(0.8, 1.0), task=SCENES_TASK.get(task, "detect"))
    cfg = yaml.safe_load(path.read_text())
    cfg["val"] = "images/train"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def head_recipe(model: str) -> dict:
    """The input size and epochs of a P2 / P6 head variant (``yolov8n-p2.yaml``), else {}."""
    stem = Path(str(model)).stem.lower()
    return next((r for suffix, r in HEAD_RECIPES.items() if stem.endswith(suffix)), {})


def _first(out):
    while isinstance(out, (list, tuple)):
        out = out[0]
    return out


def flow_one(task: str, model: str, size: int, reach) -> dict:
    """The one-call flow of ``model`` (a name ``task`` resolves) and its checks; ``reach(stage)``
    is told each stage (data, train, onnx, reload). Returns the result's fields."""
    import torch

    from autoprune.flow.checkpoints import adapter_for_checkpoint, load_model

    api = importlib.import_module(f"autoprune.{task}")
    work = Path(tempfile.mkdtemp(prefix="autoprune-zoo-flow-"))
    times, start = {}, time.time()
    reach("data")
    if task == "classification":
        data, settings, size = "fashion-mnist", dict(CLASSIFIER), CLASSIFIER["input_size"]
    else:
        recipe = head_recipe(model)
        size = max(size, recipe.get("size", size))
        data = scenes(work / "scenes", size, task)
        settings = {**YOLO, "input_size": size,
                    "pretrain_epochs": recipe.get("pretrain_epochs") or
                    PRETRAIN_EPOCHS.get(task, YOLO["pretrain_epochs"])}
    times["data"] = time.time() - start
    reach("train")
    result = api.train(model, data, save_dir=work / "run", sensitivities_file=work / "sens.json",
                       ratios=(0.3,), pruned_flops=0.3, progress=False, **settings)
    times["train"] = time.time() - start
    report = json.loads((work / "run" / "report.json").read_text())
    metric = next(iter(report["baseline"]["metrics"]))
    reach("onnx")
    adapter = adapter_for_checkpoint(result.pruned_path, progress=False)[0]
    pruned = load_model(result.pruned_path, adapter).eval()
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    onnx = adapter.export_onnx(pruned, work / "pruned.onnx")
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    out = session.run(None, {session.get_inputs()[0].name: x.repeat(2, 1, 1, 1).numpy()})[0]
    with torch.no_grad():
        want = _first(adapter.deploy_module(pruned)(x))
    onnx_ok = out.shape[0] == 2 and tuple(out.shape[1:]) == tuple(want.shape[1:])
    times["onnx"] = time.time() - start
    reach("reload")
    with torch.no_grad():
        torch.save({"x": x, "y": _first(pruned(x))}, work / "io.pt")
    child = subprocess.run([sys.executable, "-c", _RELOAD, str(result.pruned_path),
                            str(work / "io.pt")], capture_output=True, text=True, timeout=1800,
                           cwd=ROOT)
    lines = [ln for ln in child.stdout.splitlines() if ln.startswith("RESULT ")]
    reload_diff = json.loads(lines[-1][7:]) if lines else None
    times["total"] = time.time() - start
    groups = len(json.loads((work / "sens.json").read_text()).get("sensitivities", {}))
    ok = onnx_ok and reload_diff is not None and reload_diff <= 1e-4
    flow = {metric: f"{report['baseline']['metrics'][metric]:.3f} -> "
                    f"{report['pruned']['metrics'][metric]:.3f}",
            "onnx": "runs" if onnx_ok else f"shape {tuple(out.shape)}",
            "reload": "equal" if ok else f"differs by {reload_diff}"}
    res = {"status": "ok" if ok else "failed", "size": size, "groups": groups,
           "flops_red": round(report["flops_reduction"], 3), "flow": flow,
           "t": {k: round(v, 1) for k, v in times.items()}}
    if not ok:
        res["error"] = f"onnx {flow['onnx']}, reload {flow['reload']}: {child.stderr[-300:]}"
    return res


__all__ = ["flow_one", "scenes"]
