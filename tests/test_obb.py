"""OBB (Ultralytics YOLO oriented boxes), a task added as one package plus one registration: names,
the angle head's fixed layers, rotated-box labels, the one-call flow pruned by FLOPs and by loss,
the pruned module kept through an interrupted and resumed training, reload in a fresh offline
process, ONNX in ONNX Runtime, and DEFAULT profiles. Tiny settings: 64 px, 24 scenes of one
large rotated garment, 1 epoch after the base."""
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn

import autoprune
from autoprune import obb
from autoprune.datasets.scenes import write_yolo_dataset
from autoprune.tasks import task_of
from autoprune.tasks.detection import models as yolo
from autoprune.tasks.obb import OBBAdapter
from autoprune.tasks.obb import models as rot

from conftest import (assert_one_line, needs_fmnist, randomize_norms, run_offline_child,
                      scenes_validated_on_train, state_shapes, stop_after_first_save)

TRAIN_ARGS = dict(nbs=8, optimizer="AdamW", lr0=0.005, warmup_epochs=0, mosaic=0.0,
                  val=False)  # Ultralytics validates the last epoch only (saves 0.5 s an epoch)
SMALL = dict(input_size=64, batch_size=8, num_workers=0, progress=False, train_args=TRAIN_ARGS)
META = {"task": "obb", "arch": "yolov8n-obb", "build": {"num_classes": 10}, "input_size": 64}

pytestmark = needs_fmnist


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory):
    return scenes_validated_on_train(tmp_path_factory.mktemp("obb_scenes"), 24, task="obb")


@pytest.fixture(scope="module")
def flow(data_yaml, tmp_path_factory):
    """The one-call flow pruned by FLOPs with a new sensitivity file: train 12 epochs
    (rotated-box mAP50-95 0.13 with seed 0), measure at ratio 0.3 on 8 val images, prune -25 %
    FLOPs, retrain 1 epoch."""
    out = tmp_path_factory.mktemp("obb_flow")
    result = obb.train("yolov8n-obb.yaml", data_yaml, epochs=1, pretrain_epochs=12,
                       save_dir=out / "run", sensitivities_file=out / "sens.json",
                       ratios=(0.3,), pruned_flops=0.25, eval_limit=8, **SMALL)
    return result, out


def test_names_belong_to_obb_only(data_yaml, tmp_path):
    for name, key in (("yolov8n-obb.yaml", "yolov8n-obb"), ("yolo11s-obb", "yolo11s-obb"),
                      ("YOLO26n-obb.pt", "yolo26n-obb")):
        assert task_of(name) == "obb"
        assert OBBAdapter().arch_key(name) == key
    for name, words in (("yolov8n.yaml", "is a detection model"),
                        ("yolo12n-obb.yaml", "is not an OBB model autoprune prunes"),
                        ("yolo11n-pose.yaml", "is not an OBB model autoprune prunes"),
                        ("resnet18", "unknown model name")):
        with pytest.raises(autoprune.ConfigError, match=words) as e:
            obb.train(name, data_yaml, save_dir=tmp_path, **SMALL)
        assert_one_line(e)
    with pytest.raises(autoprune.ConfigError, match="autoprune.obb prunes it") as e:
        autoprune.detection.train("yolov8n-obb.yaml", save_dir=tmp_path, **SMALL)
    assert_one_line(e)


@pytest.mark.parametrize("arch", ["yolov8n-obb", "yolo11n-obb", "yolo26n-obb"])
def test_pruned_angle_head_keeps_its_outputs_and_runs(arch):
    """Every group at 0.3: FLOPs fall, the angle outputs (cv4's last conv, one per anchor) and
    the class outputs keep their width, and the model runs in eval and train mode."""
    adapter = OBBAdapter(num_classes=10, input_size=64)
    model = randomize_norms(adapter.build(arch))
    assert adapter.arch_of(model) == arch and yolo.is_patched(model)
    x = adapter.example_inputs(model)
    ignored = adapter.ignored_layers(model)
    names = [g.name for g in autoprune.prunable_groups(model, x, ignored)]
    assert any(".cv4.0.0" in n for n in names)  # the angle branch's inner convs do prune
    result = autoprune.prune(model, x, {n: 0.3 for n in names}, ignored_layers=ignored)
    assert result.flops_after < 0.75 * result.flops_before
    head = rot.obb_head(model)
    assert all(b[-1].out_channels == head.ne == 1 for b in head.cv4)
    with torch.no_grad():
        y, _ = model.eval()(torch.rand(2, 3, 64, 64))
    assert y.shape[:2] == (2, 4 + 10 + 1)
    model.train()(torch.rand(2, 3, 64, 64))


def test_upright_boxes_are_refused_in_one_line(tmp_path):
    boxes = write_yolo_dataset(tmp_path, train=2, val=1, size=32, seed=0)
    with pytest.raises(autoprune.ConfigError, match="is an upright box .* OBB needs") as e:
        obb.train("yolov8n-obb.yaml", boxes, epochs=1, save_dir=tmp_path / "o", **SMALL)
    assert_one_line(e)


def test_one_call_flow_by_flops(flow):
    result, out = flow
    run = out / "run"
    rep = json.loads((run / "report.json").read_text())
    assert rep["task"] == "obb" and rep["arch"] == "yolov8n-obb"
    for key in ("baseline", "pruned"):
        assert set(rep[key]["metrics"]) == {"map50_95_obb", "map50_obb"}
        assert set(rep[key]) >= {"params", "flops", "size_mb", "latency_cpu_ms"}
    assert rep["baseline"]["metrics"]["map50_95_obb"] > 0
    assert rep["flops_reduction"] == pytest.approx(0.25, abs=0.02)
    for name in ("report.md", "report.csv", "sensitivity.png", "baseline/best.pt",
                 "pruned/best.pt", "pruned/last.pt", "pruned/ultralytics/weights/best.pt"):
        assert (run / name).is_file(), name
    record = json.loads((out / "sens.json").read_text())
    assert record["metric"]["name"] == "map50_95_obb" and record["extra"]["eval_images"] == 8
    pruned = obb.load_model(result.pruned_path)
    assert state_shapes(pruned) == state_shapes(result.model)
    assert _params(pruned) < _params(obb.load_model(result.baseline_path))
    assert all(b[-1].out_channels == 1 for b in rot.obb_head(pruned).cv4)
    ul_best = run / "pruned" / "ultralytics" / "weights" / "best.pt"
    ul, _ = yolo.read_ultralytics(ul_best)
    assert not any(isinstance(m, yolo.SPLIT_FREE) for m in ul.modules())  # native blocks:
    assert b"autoprune.tasks" not in ul_best.read_bytes()  # YOLO(path) needs no autoprune
    assert state_shapes(yolo.patch_model(ul)) == state_shapes(pruned)


def test_one_call_flow_by_loss(flow, data_yaml, tmp_path):
    """The measured file, a tolerated loss: the ratios are PaddleSlim's by-loss ones of it (a
    tolerance of 0.99 takes nearly every group to its largest measured ratio) and retraining
    keeps them."""
    result, out = flow
    sens = autoprune.load_sensitivities(out / "sens.json")
    r = obb.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "run",
                  sensitivities_file=out / "sens.json", ratios=(0.3,), eval_metric_loss=0.99,
                  eval_limit=8, **SMALL)
    want = {k: v for k, v in autoprune.ratios_by_loss(sens, 0.99).items() if v > 0}
    assert {k: v for k, v in r.ratios.items() if v > 0} == want and want
    assert r.report["flops_reduction"] > 0.1
    assert state_shapes(obb.load_model(r.pruned_path)) == state_shapes(r.model)


def test_interrupted_training_resumes_with_the_pruned_module(flow, data_yaml, tmp_path,
                                                             monkeypatch, capsys):
    """A stage continues from Ultralytics' last.pt with the pruned module itself (OBB trainer);
    run again, the finished stage is not trained; obb.resume does the same by file."""
    result, _ = flow
    model = obb.load_model(result.pruned_path)
    shapes = state_shapes(model)
    adapter = OBBAdapter(data_yaml, input_size=64, batch_size=8, progress=False,
                         train_args=TRAIN_ARGS)
    stop_after_first_save(monkeypatch, rot.KeepModuleOBBTrainer)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(model, 2, tmp_path / "run", meta=META)
    monkeypatch.undo()
    results = tmp_path / "run" / "ultralytics" / "results.csv"
    assert len(results.read_text().strip().splitlines()) == 2  # header + epoch 1
    capsys.readouterr()
    resumed = adapter.fit(model, 2, tmp_path / "run", meta=META, resume=True)
    assert "resuming" in capsys.readouterr().out and state_shapes(resumed) == shapes
    assert len(results.read_text().strip().splitlines()) == 3  # + the resumed epoch 2
    adapter.fit(obb.load_model(result.pruned_path), 2, tmp_path / "run", meta=META, resume=True)
    assert "already finished its 2 epochs" in capsys.readouterr().out
    stop_after_first_save(monkeypatch, rot.KeepModuleOBBTrainer)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(obb.load_model(result.pruned_path), 2, tmp_path / "again", meta=META)
    monkeypatch.undo()
    again = obb.resume(tmp_path / "again" / "ultralytics" / "weights" / "last.pt",
                       progress=False)
    assert state_shapes(again) == shapes
    assert autoprune.read_pruned_metadata(tmp_path / "again" / "best.pt")["task"] == "obb"


def test_fresh_process_reload_predict_and_export_offline(flow, data_yaml, tmp_path):
    """In a fresh process with every network call refused: reload the pruned checkpoint (equal
    outputs), predict rotated boxes with YOLO(...) on Ultralytics' pruned best.pt, export
    ONNX."""
    result, out = flow
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    torch.save(x, tmp_path / "x.pt")
    want, _ = obb.load_model(result.pruned_path)(x)
    ul_best = out / "run" / "pruned" / "ultralytics" / "weights" / "best.pt"
    image = next((Path(data_yaml).parent / "images" / "train").glob("*.png"))
    child = run_offline_child(tmp_path, f"""
        from autoprune import obb
        model = obb.load_model({str(result.pruned_path)!r})
        y, _ = model(torch.load({str(tmp_path / 'x.pt')!r}, weights_only=True))
        torch.save(y.detach(), {str(tmp_path / 'y.pt')!r})
        from ultralytics import YOLO
        found = YOLO({str(ul_best)!r}).predict({str(image)!r}, imgsz=64, conf=0.0,
                                                verbose=False)[0]
        onnx = obb.export_onnx({str(result.pruned_path)!r}, {str(tmp_path / 'm.onnx')!r})
        print("RESULT", json.dumps({{"attempts": attempts, "obb": list(found.obb.xywhr.shape),
                                    "onnx": str(onnx)}}))
    """)
    assert child["attempts"] == [] and child["obb"][1:] == [5]  # x y w h angle
    assert torch.equal(torch.load(tmp_path / "y.pt", weights_only=True), want.detach())
    assert Path(child["onnx"]).is_file()


def test_export_onnx_runs_in_onnx_runtime_and_matches_torch(flow, tmp_path):
    result, _ = flow
    path = obb.export_onnx(result.pruned_path, tmp_path / "pruned.onnx")
    import onnx
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    assert len(graph.graph.output) == 1
    pruned = obb.load_model(result.pruned_path)
    stored = sum(int(np.prod(i.dims)) for i in graph.graph.initializer)
    assert stored <= _params(pruned) + 100  # the pruned (smaller) convolutions
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    net = OBBAdapter(input_size=64).deploy_module(pruned)
    for batch in (1, 3):
        x = torch.rand(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            want = net(x).numpy()
        got = session.run(None, {"input": x.numpy()})[0]
        assert got.shape == want.shape == (batch, 4 + 10 + 1, 84)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_build_profile_and_default_resolves(tmp_path, monkeypatch):
    """``autoprune profiles build`` for a YOLO OBB model on 8 rotated scenes, 1 epoch: the mAP of
    such a model is 0, so the evaluation is replaced by a made-up non-zero score (the real one
    runs in the flow above); DEFAULT then resolves for the model and a YOLO object."""
    from autoprune.flow.sensitivities import check_sensitivities_file
    from autoprune.profiles.build import build_profile

    def fake_evaluate(self, model):
        score = 0.5 + 1e-9 * sum(float(p.abs().sum()) for p in model.parameters())
        return {"map50_95_obb": score, "map50_obb": score}

    monkeypatch.setattr(OBBAdapter, "evaluate", fake_evaluate)
    out = tmp_path / "profiles"
    path = build_profile("yolov8n-obb.yaml", out, epochs=1, train_images=8, val_images=4,
                         input_size=64, batch_size=8, ratios=(0.5,), progress=False,
                         work_dir=tmp_path)
    assert path == out / "obb-yolov8n-obb.json"
    record = autoprune.read_record(path)
    assert record.metric["name"] == "map50_95_obb" and record.model["arch"] == "yolov8n-obb"
    assert "rotated" in record.extra["how"]["dataset"]
    assert "--task obb" in record.extra["how"]["command"]
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: out)
    adapter = OBBAdapter(num_classes=10, input_size=64)
    from ultralytics import YOLO
    with yolo.quiet():
        wrapper = YOLO("yolov8n-obb.yaml")
    assert adapter.arch_key(wrapper) == "yolov8n-obb"
    module = adapter.build("yolov8n-obb")
    assert check_sensitivities_file(adapter, module, "DEFAULT", "yolov8n-obb") == path


def test_bundled_default_profile_prunes_the_trained_model(flow, data_yaml, tmp_path):
    """The bundled yolov8n-obb profile (10 classes, like these scenes) fits the trained model."""
    result, _ = flow
    r = obb.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "run",
                  sensitivities_file="DEFAULT", pruned_flops=0.2, eval_limit=8, **SMALL)
    assert r.sensitivities_path.name == "obb-yolov8n-obb.json"
    assert r.report["flops_reduction"] == pytest.approx(0.2, abs=0.02)


def _candidates(n: int, classes: int, seed: int, side: float = 60.0, size: int = 640):
    """Rotated candidate boxes as Ultralytics' NMS hands them to fast_nms: centres offset by
    class x max_wh, many overlapping, with tied scores."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size * 0.3 + size * 0.35  # crowded: lots overlap
    wh = torch.rand(n, 2, generator=g) * side + 2
    angle = (torch.rand(n, 1, generator=g) - 0.5) * 3.1
    cls = torch.randint(0, classes, (n, 1), generator=g).float()
    scores = torch.rand(n, generator=g).round(decimals=2)  # ties
    return torch.cat((xy + cls * 7680, wh, angle), 1), scores


def test_rotated_nms_class_by_class_keeps_exactly_what_ultralytics_keeps():
    """class_by_class: the kept boxes and their order equal Ultralytics' fast_nms over the whole
    n x n probiou matrix; boxes outside its bound (large, or agnostic: one class) and calls
    that are not the rotated one go to Ultralytics' own computation."""
    from ultralytics.utils import nms
    from ultralytics.utils.metrics import batch_probiou

    from autoprune.tasks.detection import validator

    real = nms.TorchNMS.fast_nms
    computed = []
    spy = lambda *a, **k: computed.append(len(a[0])) or real(*a, **k)  # noqa: E731
    for seed, (n, classes) in enumerate([(600, 15), (300, 2), (1200, 10)]):
        boxes, scores = _candidates(n, classes, seed)
        for thr in (0.3, 0.7):
            want = real(boxes, scores, thr, iou_func=batch_probiou)
            got = validator.class_by_class(spy)(boxes, scores, thr, iou_func=batch_probiou)
            assert torch.equal(got, want) and computed == [], (seed, thr)
    for boxes, scores in (_candidates(400, 5, 7, side=900.0), _candidates(400, 1, 8)):
        want = real(boxes, scores, 0.7, iou_func=batch_probiou)
        assert torch.equal(validator.class_by_class(spy)(boxes, scores, 0.7,
                                                         iou_func=batch_probiou), want)
    assert computed == [400, 400]  # the whole matrix, as Ultralytics computes it
    upright = torch.rand(300, 4) * 100
    upright[:, 2:] += upright[:, :2]
    upright_scores = torch.rand(300)
    assert torch.equal(validator.class_by_class(spy)(upright, upright_scores, 0.5),
                       real(upright, upright_scores, 0.5))
    assert computed == [400, 400, 300]
    # Ultralytics' whole NMS on the rotated predictions of an untrained head (10 classes, 336
    # anchors at 128 px, every class above conf): the same detections through patient_nms
    g = torch.Generator().manual_seed(5)
    pred = torch.cat((torch.rand(1, 2, 336, generator=g) * 128, torch.rand(1, 2, 336,
                      generator=g) * 40 + 2, torch.rand(1, 10, 336, generator=g) * 0.05,
                      (torch.rand(1, 1, 336, generator=g) - 0.5) * 3), 1)
    want = nms.non_max_suppression(pred.clone(), 0.001, 0.7, multi_label=True, nc=10,
                                   rotated=True, max_time_img=1e6)
    made = []
    real_grouping = validator.class_by_class
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validator, "class_by_class", lambda *a: made.append(a) or real_grouping(*a))
        with validator.patient_nms():
            got = nms.non_max_suppression(pred.clone(), 0.001, 0.7, multi_label=True, nc=10,
                                          rotated=True)
    assert made and torch.equal(got[0], want[0]) and len(want[0]) == 300  # max_det
    with validator.patient_nms():
        assert nms.TorchNMS.fast_nms is real  # swapped only while Ultralytics' NMS runs
    assert nms.TorchNMS.fast_nms is real
