"""Detection journey (Ultralytics YOLO): split-free twins, groups and pruning, training that keeps the
pruned module (train, last.pt, resume, val), weights-only reload in a fresh process, Ultralytics
loading and ONNX export with no network access, the one-call flow and the three sensitivities_file
modes, and bad inputs. Tiny settings: 64 px, 24 scene images, a few epochs."""
import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import yaml

import autoprune
from autoprune import detection as det
from autoprune.datasets.scenes import write_yolo_dataset
from autoprune.tasks import yolo
from autoprune.tasks.detection import DetectionAdapter

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(imgsz=64, batch=8, workers=0, progress=False,
             train_args=dict(nbs=8, optimizer="AdamW", lr0=0.01, warmup_epochs=1, mosaic=0.0))
ARCHS = ["yolov8n", "yolov8s", "yolo11n", "yolo11s"]

pytestmark = pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").is_dir() and
    not os.environ.get("AUTOPRUNE_FASHION_MNIST"), reason="dataset-fashion-mnist not installed")


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _shapes(model: nn.Module) -> dict:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory):
    """24 scenes of one large garment; validation runs on the training images, so a model trained
    for a few seconds already scores above 0 (the sensitivities need a non-zero baseline)."""
    root = tmp_path_factory.mktemp("scenes")
    path = write_yolo_dataset(root, train=24, val=4, size=64, seed=0, objects=(1, 1),
                              scale=(0.6, 0.9))
    cfg = yaml.safe_load(path.read_text())
    cfg["val"] = "images/train"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def flow(data_yaml, tmp_path_factory):
    """The one-call flow with a new sensitivity file: train, measure, prune, retrain, report."""
    out = tmp_path_factory.mktemp("flow")
    result = det.train("yolov8n.yaml", data_yaml, epochs=1, pretrain_epochs=6, save_dir=out / "run",
                       sensitivities_file=out / "sens.json", ratios=(0.3,), pruned_flops=0.25,
                       eval_limit=16, **SMALL)
    return result, out


def _randomize_bn(model: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(0.5 + torch.rand(n, generator=g))
                m.bias.copy_(0.2 * torch.randn(n, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                m.running_var.copy_(0.5 + torch.rand(n, generator=g))
    return model


@pytest.mark.parametrize("arch", ARCHS)
def test_split_free_twins_give_identical_outputs(arch):
    torch.manual_seed(0)
    with yolo.quiet():
        original = _randomize_bn(yolo.DetectionModel(f"{arch}.yaml", nc=10, verbose=False)).eval()
    patched = yolo.patch_model(copy.deepcopy(original))
    assert yolo.is_patched(patched) and not yolo.is_patched(original)
    assert any(isinstance(m, yolo.C2fSplitFree) for m in patched.modules())
    if arch.startswith("yolo11"):
        assert any(isinstance(m, yolo.C2PSASplitFree) for m in patched.modules())
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y0, raw0 = original(x)
        y1, raw1 = patched(x)
    assert (y1 - y0).abs().max().item() == 0.0
    for key in ("boxes", "scores"):
        assert torch.equal(raw0[key], raw1[key])
    # the adapter builds patched models, with layer attributes Ultralytics reads
    model = DetectionAdapter(nc=10, input_size=64).build(arch)
    assert yolo.is_patched(model) and all(hasattr(m, "f") and hasattr(m, "i") for m in model.model)


def test_groups_and_prune_lower_flops():
    adapter = DetectionAdapter(nc=10, input_size=64)
    model = adapter.build("yolov8n.yaml")
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = autoprune.prunable_groups(model, example, ignored)
    names = [g.name for g in groups]
    assert len(groups) > 40 and "model.2.cv0.conv" in names and "model.2.cv1.conv" in names
    head = yolo.detect_head(model)
    assert not any(n.startswith("model.22.dfl") for n in names)
    result = autoprune.prune(model, example, {n: 0.3 for n in names}, ignored_layers=ignored)
    assert result.flops_after < 0.75 * result.flops_before
    assert all(b[-1].out_channels == 64 for b in head.cv2) and all(b[-1].out_channels == 10
                                                                    for b in head.cv3)
    with torch.no_grad():
        y, _ = model.eval()(torch.rand(2, 3, 64, 64))
    assert y.shape[:2] == (2, 14)
    model.train()(torch.rand(2, 3, 64, 64))


def test_one_call_flow_new_file(flow, data_yaml):
    result, out = flow
    run = out / "run"
    rep = json.loads((run / "report.json").read_text())
    assert rep["task"] == "detection" and rep["arch"] == "yolov8n"
    for key in ("baseline", "pruned"):
        assert set(rep[key]["metrics"]) == {"map50_95", "map50"}
        assert set(rep[key]) >= {"params", "flops", "size_mb", "latency_cpu_ms"}
    assert rep["baseline"]["metrics"]["map50_95"] > 0
    assert rep["pruned"]["flops"] < rep["baseline"]["flops"] and rep["flops_reduction"] > 0.2
    for name in ("report.md", "report.csv", "sensitivity.png", "baseline/best.pt",
                 "pruned/best.pt", "pruned/last.pt", "pruned/ultralytics/weights/best.pt"):
        assert (run / name).is_file(), name
    record = json.loads((out / "sens.json").read_text())
    assert record["metric"]["name"] == "map50_95" and record["extra"]["eval_images"] == 16
    assert all(list(p) == ["0.30"] for p in record["sensitivities"].values())
    meta = autoprune.read_pruned_metadata(result.pruned_path)
    assert meta["task"] == "detection" and meta["build"]["nc"] == 10 and meta["plan"]
    # the model stays pruned through training: autoprune's and Ultralytics' checkpoints alike
    pruned = det.load_model(result.pruned_path)
    assert _shapes(pruned) == _shapes(result.model)
    assert _shapes(det.load_model(run / "pruned" / "last.pt")) == _shapes(pruned)
    from ultralytics.nn.tasks import load_checkpoint
    for name in ("best.pt", "last.pt"):
        ul, _ = load_checkpoint(str(run / "pruned" / "ultralytics" / "weights" / name))
        assert _shapes(ul) == _shapes(pruned), name
    assert _params(pruned) < _params(det.load_model(result.baseline_path))


def test_existing_file_is_reused(flow, data_yaml, tmp_path, monkeypatch):
    result, out = flow
    before = (out / "sens.json").read_text()
    calls = []
    original = DetectionAdapter.evaluate
    monkeypatch.setattr(DetectionAdapter, "evaluate",
                        lambda self, m: calls.append(1) or original(self, m))
    r = det.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "run",
                  sensitivities_file=out / "sens.json", ratios=(0.3,), eval_metric_loss=0.5,
                  eval_limit=16, **SMALL)
    assert len(calls) <= 3  # baseline + report: no sensitivity point measured again
    assert json.loads((out / "sens.json").read_text())["sensitivities"] == \
        json.loads(before)["sensitivities"]
    assert r.baseline_path == result.baseline_path and r.report["flops_reduction"] > 0


def test_default_without_profile_lists_available(flow, data_yaml, tmp_path, monkeypatch):
    result, _ = flow
    # the bundled yolov8n profile (10 classes, like these scenes) fits the trained model (an
    # 80-class one is refused: tests/test_profiles.py)
    r = det.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "ok",
                  sensitivities_file="DEFAULT", pruned_flops=0.2, **SMALL)
    assert r.sensitivities_path.name == "detection-yolov8n.json"
    assert r.report["flops_reduction"] == pytest.approx(0.2, abs=0.02)
    empty = tmp_path / "no_profiles"
    empty.mkdir()
    monkeypatch.setattr("autoprune.profiles.profile_dir", lambda: empty)
    with pytest.raises(autoprune.ConfigError, match="no DEFAULT sensitivity profile for 'yolov8n'") as e:
        det.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "c",
                  sensitivities_file="DEFAULT", **SMALL)
    assert "bundled: none yet" in str(e.value) and "\n" not in str(e.value)


def test_model_object_trains_and_records_its_architecture(data_yaml, tmp_path):
    with yolo.quiet():
        module = yolo.DetectionModel("yolo11n.yaml", nc=10, verbose=False)
    r = det.train(module, data_yaml, epochs=1, save_dir=tmp_path, **SMALL)
    meta = autoprune.read_pruned_metadata(r.baseline_path)
    assert meta["arch"] == "yolo11n" and meta["build"] == {"nc": 10} and meta["pruned"] is False
    assert _shapes(det.load_model(r.baseline_path)) == _shapes(r.model)
    assert 0.0 <= r.metrics["map50_95"] <= 1.0


def test_stays_pruned_through_interrupted_training_resume_and_val(flow, data_yaml, tmp_path,
                                                                  monkeypatch):
    result, _ = flow
    model = det.load_model(result.pruned_path)
    shapes, n = _shapes(model), _params(model)
    adapter = DetectionAdapter(data_yaml, input_size=64, batch_size=8, progress=False,
                               train_args=SMALL["train_args"])
    save_model = yolo.KeepModuleTrainer.save_model

    def save_then_stop(trainer):  # a Ctrl-C right after epoch 1 of 2 was saved
        save_model(trainer)
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(yolo.KeepModuleTrainer, "save_model", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(model, 2, tmp_path / "run", meta={"task": "detection", "arch": "yolov8n",
                                                      "build": {"nc": 10}, "input_size": 64})
    monkeypatch.undo()
    last = tmp_path / "run" / "ultralytics" / "weights" / "last.pt"
    resumed = det.resume(last, progress=False)
    assert _shapes(resumed) == shapes and _params(resumed) == n
    rows = (tmp_path / "run" / "ultralytics" / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 3  # header + epoch 1 + the resumed epoch 2
    assert _shapes(det.load_model(tmp_path / "run" / "best.pt")) == shapes
    from ultralytics import YOLO
    with yolo.quiet():
        wrapper = YOLO(str(tmp_path / "run" / "ultralytics" / "weights" / "best.pt"))
        metrics = wrapper.val(data=str(data_yaml), imgsz=64, batch=8, plots=False, verbose=False)
    assert _params(wrapper.model) < n + 1 and 0.0 <= metrics.box.map <= 1.0


def test_fresh_process_reload_predict_val_train_export_offline(flow, data_yaml, tmp_path):
    """In a fresh process where every network call is refused and recorded, and no YOLO_* variable
    is set: reload the pruned checkpoint (equal outputs), YOLO(...).predict/.val on Ultralytics'
    pruned best.pt, a 1-epoch fine-tune from the autoprune checkpoint, and both ONNX exports."""
    result, out = flow
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    torch.save(x, tmp_path / "x.pt")
    expected = det.load_model(result.pruned_path)(x)[0].detach()
    ul_best = out / "run" / "pruned" / "ultralytics" / "weights" / "best.pt"
    image = next((Path(data_yaml).parent / "images" / "train").glob("*.png"))
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import json, socket, sys
        attempts = []
        def refuse(*args, **kwargs):
            attempts.append(repr(args[:2])[:120])
            raise OSError("network access refused by the test")
        socket.socket.connect = socket.socket.connect_ex = refuse
        socket.create_connection = socket.getaddrinfo = socket.gethostbyname = refuse
        import torch
        torch.set_num_threads(1)
        from autoprune import detection as det
        model = det.load_model({str(result.pruned_path)!r})
        torch.save(model(torch.load({str(tmp_path / 'x.pt')!r}, weights_only=True))[0].detach(),
                   {str(tmp_path / 'y.pt')!r})
        from ultralytics import YOLO
        y = YOLO({str(ul_best)!r})
        boxes = y.predict({str(image)!r}, imgsz=64, verbose=False)[0].boxes
        val = y.val(data={str(data_yaml)!r}, imgsz=64, batch=8, plots=False, verbose=False)
        r = det.train({str(result.pruned_path)!r}, {str(data_yaml)!r}, epochs=1,
                      save_dir={str(tmp_path / 'tune')!r}, **{SMALL!r})
        onnx_a = det.export_onnx(r.baseline_path, {str(tmp_path / 'a.onnx')!r})
        onnx_b = YOLO(str(r.baseline_path.parent / 'ultralytics' / 'weights' / 'best.pt')).export(
            format="onnx", imgsz=64)
        print("RESULT", json.dumps({{"attempts": attempts, "boxes": len(boxes),
                                    "map": float(val.box.map), "onnx": [str(onnx_a), str(onnx_b)],
                                    "tuned_params": sum(p.numel() for p in r.model.parameters())}}))
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("YOLO_")}
    env.update(PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    child = json.loads(line[len("RESULT "):])
    assert child["attempts"] == []
    assert torch.equal(torch.load(tmp_path / "y.pt", weights_only=True), expected)
    assert (tmp_path / "config" / "autoprune" / "Ultralytics" / "Arial.ttf").is_file()
    assert child["tuned_params"] == _params(result.model)  # fine-tuning kept the pruned shapes
    import onnx
    for path in child["onnx"]:
        graph = onnx.load(path)
        onnx.checker.check_model(graph)
        dims = [d.dim_value for d in graph.graph.output[0].type.tensor_type.shape.dim]
        assert dims[:2] == [1, 14], path


def test_export_onnx_pruned_matches_torch(flow, tmp_path):
    result, _ = flow
    path = det.export_onnx(result.pruned_path, tmp_path / "pruned.onnx")
    import numpy as np
    import onnx
    from onnx.reference import ReferenceEvaluator
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    pruned = det.load_model(result.pruned_path)
    stored = sum(int(np.prod(i.dims)) for i in graph.graph.initializer)
    assert stored <= _params(pruned) + 100  # the graph holds the pruned (smaller) convolutions
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = pruned(x)[0].numpy()
    got = ReferenceEvaluator(graph).run(None, {"input": x.numpy()})[0]
    assert got.shape == expected.shape == (1, 14, 84)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
    from autoprune.cli import main  # the CLI takes the detection export path for this checkpoint
    assert main(["export", str(result.pruned_path), str(tmp_path / "cli.onnx")]) == 0
    dims = [d.dim_value for d in onnx.load(str(tmp_path / "cli.onnx")).graph.output[0].type
            .tensor_type.shape.dim]
    assert dims == [1, 14, 84]


@pytest.mark.parametrize("case, match", [
    ("missing", "no data.yaml at"),
    ("empty_labels", "no label files for the train images"),
    ("bad_class", "has class id 12 but"),
    ("nc_mismatch", "the model predicts 3 classes but the data has 10"),
    ("unknown_model", "unknown model name"),
    ("reserved_arg", "train_args may not set epochs"),
])
def test_bad_inputs_one_line(case, match, data_yaml, tmp_path):
    data = data_yaml
    model = "yolov8n.yaml"
    if case == "missing":
        data = tmp_path / "nope" / "data.yaml"
    elif case in ("empty_labels", "bad_class"):
        data = write_yolo_dataset(tmp_path / "d", train=2, val=1, size=32, seed=1)
        labels = sorted((tmp_path / "d" / "labels" / "train").glob("*.txt"))
        for p in labels:
            if case == "empty_labels":
                p.unlink()
            else:
                p.write_text("12 0.5 0.5 0.2 0.2\n")
    elif case == "nc_mismatch":
        with yolo.quiet():
            model = yolo.DetectionModel("yolov8n.yaml", nc=3, verbose=False)
    elif case == "unknown_model":
        model = "yolov99z.yaml"
    kwargs = dict(SMALL, train_args={"epochs": 3}) if case == "reserved_arg" else SMALL
    with pytest.raises(autoprune.AutopruneError, match=match) as e:
        det.train(model, data, epochs=1, save_dir=tmp_path / "out", **kwargs)
    assert "\n" not in str(e.value)


def test_retraining_under_torchrun_is_refused_in_one_line(data_yaml, tmp_path, monkeypatch):
    """Two ranks would each run Ultralytics into the same folder: refused before training."""
    from autoprune.tasks import detection as det_adapter

    monkeypatch.setattr(det_adapter, "rank_and_world", lambda: (0, 2))
    with pytest.raises(autoprune.ConfigError, match="without torchrun") as e:
        det.train("yolov8n.yaml", data_yaml, epochs=1, save_dir=tmp_path / "out", **SMALL)
    assert "\n" not in str(e.value) and not (tmp_path / "out" / "ultralytics").exists()


def test_eval_subset_adapter_keeps_its_own_val_listing(data_yaml):
    """with_eval_limit (the analysis' eval_images) validates on fewer images without touching
    the listing the full adapter validates on."""
    adapter = DetectionAdapter(data_yaml, input_size=64, eval_limit=16, progress=False)
    full = adapter._val_data_yaml()
    subset = adapter.with_eval_limit(4)
    small = subset._val_data_yaml()
    listed = lambda y: len(Path(yaml.safe_load(Path(y).read_text())["val"]).read_text().split())
    assert (listed(full), listed(small)) == (16, 4) and len(subset.eval_set) == 4
    assert adapter._val_data_yaml() == full and listed(full) == 16
    assert adapter.with_eval_limit(100).eval_limit == 16  # never more than the adapter has


def test_load_model_missing_checkpoint_is_clear(tmp_path):
    with pytest.raises(autoprune.CheckpointError, match="no checkpoint"):
        det.load_model(tmp_path / "nope.pt")


def test_masked_variants_through_the_ultralytics_validator_equal_real_pruning(flow, data_yaml,
                                                                             tmp_path):
    # what evaluation="auto" does on a GPU, run on the CPU: mAP of masked, batched variants
    # equals mAP of really pruned models (float noise aside)
    result, _ = flow
    model = det.load_model(result.baseline_path)
    adapter = DetectionAdapter(data_yaml, input_size=64, batch_size=8, device="cpu",
                               eval_limit=16, progress=False)
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    names = [g.name for g in autoprune.prunable_groups(model, example, ignored)][:3]
    score = lambda m: adapter.evaluate(m)[adapter.metric]
    out = {}
    for mode in ("prune", "masked"):
        path = tmp_path / f"{mode}.json"
        out[mode] = autoprune.sensitivity(model, example, score, groups=names, ratios=(0.3, 0.6),
                                          ignored_layers=ignored, evaluation=mode,
                                          sensitivities_file=path, progress=False)
        out[mode + "_points"] = autoprune.read_record(path).extra["evaluation"]["points"]
    assert out["masked_points"]["masked"] >= 4 and out["prune_points"]["masked"] == 0
    assert max(abs(out["prune"][n][r] - out["masked"][n][r]) for n in names
               for r in (0.3, 0.6)) <= 1e-4


class _RunsCode:
    """A pickle that runs code when unpickled (what a malicious .pt holds)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_foreign_pickle_is_refused_without_running_it(data_yaml, tmp_path):
    """A .pt that is neither autoprune's nor Ultralytics' (known classes) is refused before any of
    its code runs: Ultralytics checkpoints are loaded weights_only against an allow-list."""
    marker = tmp_path / "code_ran"
    evil = tmp_path / "evil.pt"
    torch.save({"model": _RunsCode(marker)}, evil)
    (tmp_path / "run" / "ultralytics" / "weights").mkdir(parents=True)
    for load, match in ((det.load_model, "holds pickled Python objects, which are never loaded"),
                        (lambda p: det.train(p, data_yaml, epochs=1, save_dir=tmp_path / "o",
                                             **SMALL), "known model classes"),
                        (det.resume, "known model classes")):
        if load is det.resume:  # where resume expects it
            evil = evil.rename(tmp_path / "run" / "ultralytics" / "weights" / "last.pt")
        with pytest.raises(autoprune.CheckpointError, match=match) as e:
            load(evil)
        assert "\n" not in str(e.value)
    assert not marker.exists()


def test_ultralytics_checkpoint_of_patched_model_loads_safely(tmp_path):
    """Ultralytics checkpoints of autoprune's own (split-free, pruned) modules pass the safe load."""
    with yolo.quiet():
        model = yolo.patch_model(yolo.DetectionModel("yolo11n.yaml", nc=3, verbose=False))
    torch.save({"model": copy.deepcopy(model).half(), "train_args": {"imgsz": 64}},
               tmp_path / "u.pt")
    loaded = yolo.load_ultralytics(tmp_path / "u.pt")
    assert any(isinstance(m, yolo.SPLIT_FREE) for m in loaded.modules())
    assert _shapes(loaded) == _shapes(model) and loaded.args["imgsz"] == 64


def test_resume_refuses_a_last_pt_outside_an_autoprune_run(tmp_path):
    """resume writes best.pt / last.pt three folders up: only from <save_dir>/ultralytics/weights."""
    stray = tmp_path / "elsewhere" / "last.pt"
    stray.parent.mkdir()
    stray.write_bytes(b"x")
    with pytest.raises(autoprune.CheckpointError, match="is not <save_dir>/ultralytics/weights"):
        det.resume(stray)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["elsewhere", "last.pt"]


def test_fit_with_resume_continues_the_stage_then_reuses_it(flow, data_yaml, tmp_path,
                                                            monkeypatch, capsys):
    """train(..., resume=True) for detection: the interrupted stage continues from Ultralytics'
    last.pt with the pruned module; run again, the finished stage is not trained."""
    result, _ = flow
    model = det.load_model(result.pruned_path)
    shapes = _shapes(model)
    adapter = DetectionAdapter(data_yaml, input_size=64, batch_size=8, progress=False,
                               train_args=SMALL["train_args"])
    meta = {"task": "detection", "arch": "yolov8n", "build": {"nc": 10}, "input_size": 64}
    save_model = yolo.KeepModuleTrainer.save_model

    def save_then_stop(trainer):
        save_model(trainer)
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(yolo.KeepModuleTrainer, "save_model", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(model, 2, tmp_path / "run", meta=meta)
    monkeypatch.undo()
    with pytest.raises(autoprune.ConfigError, match="is from a run of 2 epochs, this one has 3"):
        adapter.fit(model, 3, tmp_path / "run", meta=meta, resume=True)
    capsys.readouterr()
    resumed = adapter.fit(model, 2, tmp_path / "run", meta=meta, resume=True)
    assert "resuming" in capsys.readouterr().out and _shapes(resumed) == shapes
    results = tmp_path / "run" / "ultralytics" / "results.csv"
    assert len(results.read_text().strip().splitlines()) == 3  # header + epoch 1 + epoch 2
    best = autoprune.checkpoint.read_state_dict(tmp_path / "run" / "best.pt")
    again = adapter.fit(det.load_model(result.pruned_path), 2, tmp_path / "run", meta=meta,
                        resume=True)
    assert "already finished its 2 epochs" in capsys.readouterr().out
    assert len(results.read_text().strip().splitlines()) == 3  # nothing trained
    assert all(torch.equal(again.state_dict()[k].cpu(), v) for k, v in best.items())
    (tmp_path / "run" / "best.pt").unlink()  # stopped after Ultralytics, before autoprune wrote
    adapter.fit(det.load_model(result.pruned_path), 2, tmp_path / "run", meta=meta, resume=True)
    assert len(results.read_text().strip().splitlines()) == 3  # still nothing trained
    rewritten = autoprune.checkpoint.read_state_dict(tmp_path / "run" / "best.pt")
    assert all(torch.equal(rewritten[k], v) for k, v in best.items())
