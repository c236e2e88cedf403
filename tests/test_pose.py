"""Pose (Ultralytics YOLO pose), a task added as one package plus one registration: names, the
keypoint head's fixed layers, keypoint labels and kpt_shape checks, the one-call flow pruned by
FLOPs and by loss, the pruned module kept through an interrupted and resumed training, reload in
a fresh offline process, ONNX in ONNX Runtime, and DEFAULT profiles. Tiny settings: 64 px, 24
scene images of one large garment (5 keypoints: its box corners and centre), 1 epoch after the
base."""
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn
import yaml

import autoprune
from autoprune import pose
from autoprune.datasets.scenes import write_yolo_dataset
from autoprune.tasks import task_of
from autoprune.tasks.detection import models as yolo
from autoprune.tasks.pose import PoseAdapter
from autoprune.tasks.pose import models as kp

from conftest import (assert_one_line, check_flow_bounded_map, needs_fmnist, randomize_norms,
                      run_offline_child, scenes_validated_on_train, state_shapes,
                      stop_after_first_save)

TRAIN_ARGS = dict(nbs=8, optimizer="AdamW", lr0=0.005, warmup_epochs=0, mosaic=0.0,
                  val=False)  # Ultralytics validates the last epoch only (saves 0.5 s an epoch)
SMALL = dict(input_size=64, batch_size=8, num_workers=0, progress=False, train_args=TRAIN_ARGS)
META = {"task": "pose", "arch": "yolov8n-pose", "build": {"num_classes": 10,
                                                          "kpt_shape": [5, 3]},
        "input_size": 64}
NK = 5 * 3  # the scenes' keypoint values per object

pytestmark = needs_fmnist


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory):
    return scenes_validated_on_train(tmp_path_factory.mktemp("pose_scenes"), 24, task="pose")


@pytest.fixture(scope="module")
def flow(data_yaml, tmp_path_factory):
    """The one-call flow pruned by FLOPs with a new sensitivity file: train 20 epochs (keypoint
    mAP50-95 0.14 with seed 0), measure at ratio 0.3 on 8 val images, prune -25 % FLOPs,
    retrain 1 epoch."""
    out = tmp_path_factory.mktemp("pose_flow")
    result = pose.train("yolov8n-pose.yaml", data_yaml, epochs=1, pretrain_epochs=20,
                        save_dir=out / "run", sensitivities_file=out / "sens.json",
                        ratios=(0.3,), pruned_flops=0.25, eval_limit=8, **SMALL)
    return result, out


def test_names_belong_to_pose_only(data_yaml, tmp_path):
    for name, key in (("yolov8n-pose.yaml", "yolov8n-pose"), ("yolo11s-pose", "yolo11s-pose"),
                      ("YOLO26n-pose.pt", "yolo26n-pose"),
                      ("yolov8n-pose-p6.yaml", "yolov8n-pose-p6")):
        assert task_of(name) == "pose"
        assert PoseAdapter().arch_key(name) == key
    assert task_of("yolov8n") == "detection"
    for name, words in (("yolov8n.yaml", "is a detection model"),
                        ("yolo12n-pose.yaml", "is not a pose model autoprune prunes"),
                        ("yolo11n-pose-p6.yaml", "is not a pose model autoprune prunes"),
                        ("yolo11n-obb.yaml", "is not a pose model autoprune prunes"),
                        ("resnet18", "unknown model name")):
        with pytest.raises(autoprune.ConfigError, match=words) as e:
            pose.train(name, data_yaml, save_dir=tmp_path, **SMALL)
        assert_one_line(e)
    with pytest.raises(autoprune.ConfigError, match="autoprune.pose prunes it") as e:
        autoprune.detection.train("yolov8n-pose.yaml", save_dir=tmp_path, **SMALL)
    assert_one_line(e)


@pytest.mark.parametrize("arch", ["yolov8n-pose", "yolo11n-pose", "yolo26n-pose"])
def test_pruned_keypoint_head_keeps_its_outputs_and_runs(arch):
    """Every group at 0.3: FLOPs fall, the keypoint outputs (cv4's last conv; YOLO26's keypoint
    and spread convs after it) and the class outputs keep their width, and the model runs in
    eval and train mode (YOLO26's spread convs run in training only)."""
    adapter = PoseAdapter(num_classes=10, kpt_shape=[5, 3], input_size=64)
    model = randomize_norms(adapter.build(arch))
    assert adapter.arch_of(model) == arch and yolo.is_patched(model)
    assert kp.kpt_shape_of(model) == [5, 3]
    x = adapter.example_inputs(model)
    ignored = adapter.ignored_layers(model)
    names = [g.name for g in autoprune.prunable_groups(model, x, ignored)]
    assert any(".cv4.0.0" in n for n in names)  # the keypoint branch's inner convs do prune
    assert not any("kpts" in n or "sigma" in n or "flow_model" in n for n in names)
    result = autoprune.prune(model, x, {n: 0.3 for n in names}, ignored_layers=ignored)
    assert result.flops_after < 0.75 * result.flops_before
    head = kp.pose_head(model)
    outputs = head.cv4_kpts if hasattr(head, "cv4_kpts") else [b[-1] for b in head.cv4]
    assert all(conv.out_channels == NK for conv in outputs)
    with torch.no_grad():
        y, _ = model.eval()(torch.rand(2, 3, 64, 64))
    assert y.shape[:2] == (2, 4 + 10 + NK)
    out = model.train()(torch.rand(2, 3, 64, 64))
    if hasattr(head, "cv4_sigma"):  # each keypoint's x and y spread, in both heads
        for branch in ("one2many", "one2one"):
            assert out[branch]["kpts_sigma"].shape[1] == 5 * 2


def test_pruned_yolo26_pose_trains_with_its_flow_loss(data_yaml, tmp_path):
    """YOLO26-pose's loss also trains the keypoint spread convs and a normalising flow (training
    only, not in the eval-mode graph): pruned at 0.3 per group, it trains an epoch with
    Ultralytics' pose trainer and reloads with its pruned shapes."""
    adapter = PoseAdapter(data_yaml, input_size=64, batch_size=8, progress=False,
                          train_args=TRAIN_ARGS)
    model = adapter.build("yolo26n-pose")
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    names = [g.name for g in autoprune.prunable_groups(model, x, ignored)]
    autoprune.prune(model, x, {n: 0.3 for n in names}, ignored_layers=ignored)
    shapes = state_shapes(model)
    trained = adapter.fit(model, 1, tmp_path / "run", meta={**META, "arch": "yolo26n-pose"})
    assert state_shapes(trained) == shapes
    assert state_shapes(pose.load_model(tmp_path / "run" / "best.pt")) == shapes


def _edit_first_label(data: Path, edit) -> None:
    label = sorted((data.parent / "labels" / "train").glob("*.txt"))[0]
    label.write_text(edit(label.read_text()))


@pytest.mark.parametrize("case,words", [
    ("boxes", "is a box without keypoints: pose needs"),
    ("count", "has 17 values but kpt_shape \\[5, 3\\] .* needs 20"),
    ("no_kpt_shape", "has no 'kpt_shape:'"),
    ("bad_kpt_shape", "kpt_shape: \\[5, 4\\] must be \\[keypoints, 2 or 3\\]"),
    ("flip_idx", "flip_idx: \\[0, 1, 2\\] must list each of the 5 keypoints"),
    ("outside", "has a keypoint outside \\[0, 1\\]"),
])
def test_labels_and_kpt_shape_are_checked_in_one_line(case, words, tmp_path):
    if case == "boxes":
        data = write_yolo_dataset(tmp_path, train=2, val=1, size=32, seed=0)
    else:
        data = write_yolo_dataset(tmp_path, train=2, val=1, size=32, seed=0, task="pose")
        cfg = yaml.safe_load(data.read_text())
        if case == "count":
            _edit_first_label(data, lambda t: "\n".join(
                " ".join(line.split()[:17]) for line in t.splitlines()))
        elif case == "outside":
            _edit_first_label(data, lambda t: "\n".join(
                " ".join(line.split()[:5] + ["1.5"] + line.split()[6:])
                for line in t.splitlines()))
        elif case == "no_kpt_shape":
            del cfg["kpt_shape"]
        elif case == "bad_kpt_shape":
            cfg["kpt_shape"] = [5, 4]
        elif case == "flip_idx":
            cfg["flip_idx"] = [0, 1, 2]
        data.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(autoprune.ConfigError, match=words) as e:
        pose.train("yolov8n-pose.yaml", data, epochs=1, save_dir=tmp_path / "o", **SMALL)
    assert_one_line(e)


def test_one_call_flow_by_flops(flow):
    result, out = flow
    run = out / "run"
    rep = json.loads((run / "report.json").read_text())
    assert rep["task"] == "pose" and rep["arch"] == "yolov8n-pose"
    for key in ("baseline", "pruned"):
        assert set(rep[key]["metrics"]) == {"map50_95_pose", "map50_pose", "map50_95_box",
                                            "map50_box"}
        assert set(rep[key]) >= {"params", "flops", "size_mb", "latency_cpu_ms"}
    assert rep["baseline"]["metrics"]["map50_95_pose"] > 0
    assert rep["flops_reduction"] == pytest.approx(0.25, abs=0.02)
    for name in ("report.md", "report.csv", "sensitivity.png", "baseline/best.pt",
                 "pruned/best.pt", "pruned/last.pt", "pruned/ultralytics/weights/best.pt"):
        assert (run / name).is_file(), name
    record = json.loads((out / "sens.json").read_text())
    assert record["metric"]["name"] == "map50_95_pose" and record["extra"]["eval_images"] == 8
    assert record["metric"]["baseline"] > 0  # the val subset's yaml kept kpt_shape
    # the model stays pruned through training, its keypoint outputs intact
    pruned = pose.load_model(result.pruned_path)
    assert state_shapes(pruned) == state_shapes(result.model)
    assert _params(pruned) < _params(pose.load_model(result.baseline_path))
    assert all(b[-1].out_channels == NK for b in kp.pose_head(pruned).cv4)
    meta = autoprune.read_pruned_metadata(result.pruned_path)
    assert meta["build"] == {"num_classes": 10, "kpt_shape": [5, 3]}
    ul_best = run / "pruned" / "ultralytics" / "weights" / "best.pt"
    ul, _ = yolo.read_ultralytics(ul_best)
    assert not any(isinstance(m, yolo.SPLIT_FREE) for m in ul.modules())  # native blocks:
    assert b"autoprune.tasks" not in ul_best.read_bytes()  # YOLO(path) needs no autoprune
    assert state_shapes(yolo.patch_model(ul)) == state_shapes(pruned)


def test_one_call_flow_by_loss_with_distillation(flow, data_yaml, tmp_path):
    """The measured file, a tolerated loss: the ratios are PaddleSlim's by-loss ones of it (a
    tolerance of 0.99 takes nearly every group to its largest measured ratio) and retraining
    keeps them; distill=True runs Ultralytics' feature distillation in the pose trainer."""
    result, out = flow
    sens = autoprune.load_sensitivities(out / "sens.json")
    r = pose.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "run",
                   sensitivities_file=out / "sens.json", ratios=(0.3,), eval_metric_loss=0.99,
                   eval_limit=8, distill=True, **SMALL)
    want = {k: v for k, v in autoprune.ratios_by_loss(sens, 0.99).items() if v > 0}
    assert {k: v for k, v in r.ratios.items() if v > 0} == want and want
    assert r.report["flops_reduction"] > 0.1
    assert state_shapes(pose.load_model(r.pruned_path)) == state_shapes(r.model)
    assert r.report["recipe"]["distill"]["method"] == "ultralytics-features"
    results = (tmp_path / "run" / "pruned" / "ultralytics" / "results.csv").read_text()
    assert "train/dis_loss" in results.splitlines()[0]


def test_interrupted_training_resumes_with_the_pruned_module(flow, data_yaml, tmp_path,
                                                             monkeypatch, capsys):
    """A stage continues from Ultralytics' last.pt with the pruned module itself (pose trainer);
    run again, the finished stage is not trained; pose.resume does the same by file."""
    result, _ = flow
    model = pose.load_model(result.pruned_path)
    shapes = state_shapes(model)
    adapter = PoseAdapter(data_yaml, input_size=64, batch_size=8, progress=False,
                          train_args=TRAIN_ARGS)
    stop_after_first_save(monkeypatch, kp.KeepModulePoseTrainer)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(model, 2, tmp_path / "run", meta=META)
    monkeypatch.undo()
    results = tmp_path / "run" / "ultralytics" / "results.csv"
    assert len(results.read_text().strip().splitlines()) == 2  # header + epoch 1
    capsys.readouterr()
    resumed = adapter.fit(model, 2, tmp_path / "run", meta=META, resume=True)
    assert "resuming" in capsys.readouterr().out and state_shapes(resumed) == shapes
    assert len(results.read_text().strip().splitlines()) == 3  # + the resumed epoch 2
    assert "(P)" in results.read_text().splitlines()[0]  # Ultralytics' pose validator ran
    adapter.fit(pose.load_model(result.pruned_path), 2, tmp_path / "run", meta=META, resume=True)
    assert "already finished its 2 epochs" in capsys.readouterr().out
    # the same by file, after a second interruption
    stop_after_first_save(monkeypatch, kp.KeepModulePoseTrainer)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(pose.load_model(result.pruned_path), 2, tmp_path / "again", meta=META)
    monkeypatch.undo()
    again = pose.resume(tmp_path / "again" / "ultralytics" / "weights" / "last.pt",
                        progress=False)
    assert state_shapes(again) == shapes
    meta = autoprune.read_pruned_metadata(tmp_path / "again" / "best.pt")
    assert meta["task"] == "pose" and meta["build"]["kpt_shape"] == [5, 3]


def test_fresh_process_reload_predict_and_export_offline(flow, data_yaml, tmp_path):
    """In a fresh process with every network call refused and no data at hand: reload the
    pruned checkpoint (its keypoint shape from the metadata; equal outputs), predict keypoints
    with YOLO(...) on Ultralytics' pruned best.pt, export ONNX."""
    result, out = flow
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    torch.save(x, tmp_path / "x.pt")
    want, _ = pose.load_model(result.pruned_path)(x)
    ul_best = out / "run" / "pruned" / "ultralytics" / "weights" / "best.pt"
    image = next((Path(data_yaml).parent / "images" / "train").glob("*.png"))
    child = run_offline_child(tmp_path, f"""
        from autoprune import pose
        model = pose.load_model({str(result.pruned_path)!r})
        y, _ = model(torch.load({str(tmp_path / 'x.pt')!r}, weights_only=True))
        torch.save(y.detach(), {str(tmp_path / 'y.pt')!r})
        from ultralytics import YOLO
        found = YOLO({str(ul_best)!r}).predict({str(image)!r}, imgsz=64, conf=0.0,
                                                verbose=False)[0]
        onnx = pose.export_onnx({str(result.pruned_path)!r}, {str(tmp_path / 'm.onnx')!r})
        print("RESULT", json.dumps({{"attempts": attempts, "kpts": list(found.keypoints.shape),
                                    "onnx": str(onnx)}}))
    """)
    assert child["attempts"] == [] and child["kpts"][1:] == [5, 3]
    assert torch.equal(torch.load(tmp_path / "y.pt", weights_only=True), want.detach())
    assert Path(child["onnx"]).is_file()


def test_export_onnx_runs_in_onnx_runtime_and_matches_torch(flow, tmp_path):
    result, _ = flow
    path = pose.export_onnx(result.pruned_path, tmp_path / "pruned.onnx")
    import onnx
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    assert len(graph.graph.output) == 1
    pruned = pose.load_model(result.pruned_path)
    stored = sum(int(np.prod(i.dims)) for i in graph.graph.initializer)
    assert stored <= _params(pruned) + 100  # the pruned (smaller) convolutions
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    net = PoseAdapter(input_size=64).deploy_module(pruned)
    for batch in (1, 3):
        x = torch.rand(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            want = net(x).numpy()
        got = session.run(None, {"input": x.numpy()})[0]
        assert got.shape == want.shape == (batch, 4 + 10 + NK, 84)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_build_profile_and_default_resolves(tmp_path, monkeypatch):
    """``autoprune profiles build`` for a YOLO pose model on 8 keypoint scenes, 1 epoch: the
    keypoint mAP of such a model is 0, so the evaluation is replaced by a made-up non-zero score
    (the real one runs in the flow above); DEFAULT then resolves for the model and a YOLO
    object, and a COCO-pose model of 17 keypoints adopts it."""
    from autoprune.flow.sensitivities import check_sensitivities_file, read_table
    from autoprune.profiles.build import build_profile

    def fake_evaluate(self, model):
        score = 0.5 + 1e-9 * sum(float(p.abs().sum()) for p in model.parameters())
        return {"map50_95_pose": score, "map50_pose": score, "map50_95_box": score,
                "map50_box": score}

    monkeypatch.setattr(PoseAdapter, "evaluate", fake_evaluate)
    out = tmp_path / "profiles"
    path = build_profile("yolov8n-pose.yaml", out, epochs=1, train_images=8, val_images=4,
                         input_size=64, batch_size=8, ratios=(0.5,), progress=False,
                         work_dir=tmp_path)
    assert path == out / "pose-yolov8n-pose.json"
    record = autoprune.read_record(path)
    assert record.metric["name"] == "map50_95_pose" and record.model["arch"] == "yolov8n-pose"
    assert "keypoints" in record.extra["how"]["dataset"]
    assert "--task pose" in record.extra["how"]["command"]
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: out)
    adapter = PoseAdapter(num_classes=10, kpt_shape=[5, 3], input_size=64)
    from ultralytics import YOLO
    with yolo.quiet():
        wrapper = YOLO("yolov8n-pose.yaml")
    assert adapter.arch_key(wrapper) == "yolov8n-pose"
    module = adapter.build("yolov8n-pose")
    assert check_sensitivities_file(adapter, module, "DEFAULT", "yolov8n-pose") == path
    # a COCO-pose model (1 class, 17 x 3 keypoints: its keypoint branch 51 channels wide, the
    # profile's 16) adopts it, the keypoint branch read ratio for ratio
    coco = PoseAdapter(num_classes=1, kpt_shape=[17, 3], input_size=64)
    person = coco.build("yolov8n-pose")
    adopted, _ = read_table(coco, person, "DEFAULT", "yolov8n-pose", say=False)
    widened = adopted.extra["adopted"]["groups"]
    assert widened and all(".cv4." in n and w == [16, 51] for n, w in widened.items())
    assert adopted.sensitivities == record.sensitivities


def test_bundled_default_profile_prunes_the_trained_model(flow, data_yaml, tmp_path):
    """The bundled yolov8n-pose profile (10 classes, 5 x 3 keypoints, like these scenes) fits
    the trained model."""
    result, _ = flow
    r = pose.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "run",
                   sensitivities_file="DEFAULT", pruned_flops=0.2, eval_limit=8, **SMALL)
    assert r.sensitivities_path.name == "pose-yolov8n-pose.json"
    assert r.report["flops_reduction"] == pytest.approx(0.2, abs=0.02)


def test_map_batch_by_batch_bounds_the_final_value(flow, data_yaml, monkeypatch):
    """The adaptive analysis's evaluation of this task's own mAP (Ultralytics' keypoint
    statistics): see conftest.check_bounded_map."""
    check_flow_bounded_map(PoseAdapter, pose.load_model, flow, data_yaml, monkeypatch)
