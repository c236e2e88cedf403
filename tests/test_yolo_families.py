"""Every Ultralytics YOLO detection family autoprune names (yolo_names.YOLO_FAMILIES), at its two
smallest scales: untrained, 64 px, 0.3 removed from every group, forward in eval and train mode,
save/reload through the detection task equal, ONNX export of the smallest scale; families and
variants it does not prune are refused by name before any work; a pruned YOLO26n retrains through
the kept-module trainer."""
from __future__ import annotations

import re

import pytest
import torch

import autoprune
from autoprune import detection as det
from autoprune.datasets.scenes import write_yolo_dataset
from autoprune.tasks.detection import models as yolo
from autoprune.tasks.detection import DetectionAdapter
from autoprune.tasks.detection.names import YOLO_FAMILIES, resolve_arch
from conftest import state_shapes


def _two_smallest(family: str, scales: str) -> list[str]:
    return [resolve_arch(family + s) for s in (scales[:2] or [""])]


ARCHS = [a for family, scales in YOLO_FAMILIES.items() for a in _two_smallest(family, scales)]
SMALLEST = {a for family, scales in YOLO_FAMILIES.items()
            for a in _two_smallest(family, scales)[:1]}



def test_every_family_is_listed_at_two_scales():
    assert {"yolov3-tinyu", "yolov5nu", "yolov5su", "yolov6n", "yolov8s", "yolov9t", "yolov9s",
            "yolov10n", "yolo11s", "yolo12n", "yolo26n", "yolo26s"} <= set(ARCHS)


@pytest.mark.parametrize("arch", ARCHS)
def test_family_prunes_runs_and_reloads(arch, tmp_path):
    torch.manual_seed(0)
    adapter = DetectionAdapter(nc=3, input_size=64)
    model = adapter.build(arch)
    assert yolo.is_patched(model)
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = autoprune.prunable_groups(model, example, ignored)
    assert len(groups) >= 15
    result = autoprune.prune(model, example, {g.name: 0.3 for g in groups}, ignored_layers=ignored)
    assert result.flops_after < 0.8 * result.flops_before
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    model.train()(x)  # the training forward (both branches of an end-to-end head) still runs
    model.eval()
    with torch.no_grad():
        y = model(x)
    y = y[0] if isinstance(y, (list, tuple)) else y
    if isinstance(y, dict):  # end-to-end heads (v10, 26) return their one-to-one branch first
        y = next(iter(y.values()))
    assert y.shape[0] == 2 and torch.isfinite(y).all()

    path = tmp_path / "pruned.pt"
    autoprune.save_pruned(model, path, task="detection", arch=arch, build={"nc": 3},
                          input_size=64, pruned=True)
    again = det.load_model(path)
    assert state_shapes(again) == state_shapes(model)
    with torch.no_grad():
        z = again(x)
    z = z[0] if isinstance(z, (list, tuple)) else z
    if isinstance(z, dict):
        z = next(iter(z.values()))
    assert torch.equal(y, z)
    if arch in SMALLEST:
        onnx = pytest.importorskip("onnx")
        out = det.export_onnx(path, tmp_path / "pruned.onnx", input_size=64)
        onnx.checker.check_model(onnx.load(str(out)))


@pytest.mark.parametrize("name, reason", [
    ("yolo11n-p2.yaml", "Ultralytics ships P2 heads only for yolov8, yolo26"),
    ("yolov8n-seg.yaml", "not a plain detection model (instance segmentation)"),
    ("yolo11n-pose", "not a plain detection model (pose): autoprune.detection prunes"),
    ("yolo11n-obb.yaml", "(autoprune.obb prunes it)"),
    ("yolov8n-cls.yaml", "(autoprune.classification prunes it)"),
    ("yolov8n-ghost.yaml", "not a plain detection model (ghost convs)"),
    ("yolov8q.yaml", "unknown model name 'yolov8q.yaml'"),
])
def test_unsupported_families_are_refused_by_name_before_any_work(name, reason, tmp_path):
    data = write_yolo_dataset(tmp_path / "scenes", train=2, val=1, size=64, seed=0)
    with pytest.raises(autoprune.ConfigError, match=re.escape(reason)) as e:
        det.train(name, data, epochs=1, save_dir=tmp_path / "o")
    assert "\n" not in str(e.value)


def test_pruned_yolo26n_retrains_with_the_kept_module_and_both_heads(tmp_path):
    """YOLO26's end-to-end head (one-to-many and one-to-one branches) stays consistent after
    pruning: the pruned module itself trains through Ultralytics (not a rebuild from YAML), the
    autoprune and Ultralytics checkpoints hold its shapes, and it validates."""
    from ultralytics.nn.tasks import load_checkpoint

    data = write_yolo_dataset(tmp_path / "scenes", train=8, val=2, size=64, seed=0,
                              objects=(1, 1), scale=(0.6, 0.9))
    adapter = DetectionAdapter(data, input_size=64, batch_size=4, workers=0, progress=False,
                               train_args=dict(nbs=4, warmup_epochs=0, mosaic=0.0))
    torch.manual_seed(0)
    model = adapter.build("yolo26n")
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    names = [g.name for g in autoprune.prunable_groups(model, example, ignored)]
    autoprune.prune(model, example, {n: 0.3 for n in names}, ignored_layers=ignored)
    head = yolo.detect_head(model)
    assert head.one2one_cv2 is not None and len(head.one2one_cv2) == len(head.cv2)
    shapes = state_shapes(model)
    meta = {"task": "detection", "arch": "yolo26n", "build": adapter.build_kwargs(model)}
    trained = adapter.fit(model, epochs=1, save_dir=tmp_path / "run", meta=meta)
    assert state_shapes(trained) == shapes
    assert state_shapes(det.load_model(tmp_path / "run" / "best.pt")) == shapes
    ul, _ = load_checkpoint(str(tmp_path / "run" / "ultralytics" / "weights" / "last.pt"))
    assert not any(isinstance(m, yolo.SPLIT_FREE) for m in ul.modules())  # Ultralytics' blocks
    assert state_shapes(yolo.patch_model(ul)) == shapes
    metrics = adapter.evaluate(trained)
    assert 0.0 <= metrics["map50_95"] <= 1.0
