"""INT8 in the flow (``quantize="int8"``), `autoprune export --int8`, `autoprune report --quantize`
and `autoprune show` of a report: real ONNX Runtime quantization of small models, the INT8 metric
measured in the runtime, FP32 / INT8 x base / pruned rows, and one-line refusals. The quantizer
itself is tested in tests/test_int8_engine.py."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch

from autoprune import ConfigError, Timing
from autoprune import classification as cls
from autoprune.cli import main
from autoprune.flow import int8 as flow_int8
from autoprune.flow.contract import TaskAdapter
from autoprune.flow.precision import ALL_KEPT_FP32, Int8Settings, int8_label
from autoprune.flow.report import int8_rows, to_console, to_csv, to_markdown
from autoprune.tasks.classification.adapter import ClassificationAdapter

from conftest import ToyNet, needs_fmnist

pytestmark = needs_fmnist

SMALL = dict(epochs=1, batch_size=32, input_size=32, train_limit=96, eval_limit=48,
             progress=False, warmup_epochs=0)
PLAIN_ORT = """
import sys, numpy as np, onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype("float32")
out = s.run(None, {s.get_inputs()[0].name: x})[0]
assert out.shape == (2, 10), out.shape
assert "autoprune" not in sys.modules and "torch" not in sys.modules
print("ok")
"""


def _ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The one-call flow on ToyNet with quantize='int8' (a FLOPs target, one retraining epoch),
    the runtime's evaluations counted."""
    out = tmp_path_factory.mktemp("int8")
    seen = []
    evaluate = TaskAdapter.evaluate_deployed

    def counting(self, onnx_model, threads=None):
        data = onnx_model if isinstance(onnx_model, bytes) else Path(onnx_model).read_bytes()
        seen.append("QuantizeLinear" in {n.op_type for n in onnx.load_from_string(data)
                                         .graph.node})
        return evaluate(self, onnx_model, threads)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TaskAdapter, "evaluate_deployed", counting)
        torch.manual_seed(0)
        result = cls.train(ToyNet(10), "fashion-mnist", save_dir=out / "run",
                           sensitivities_file=out / "s.json", ratios=(0.3, 0.6),
                           pruned_flops=0.3, pretrain_epochs=1, quantize="int8",
                           calibration_images=24, latency_threads=1, **SMALL)
    return result, out / "run", seen


def test_the_report_has_fp32_and_int8_rows_measured_in_the_runtime(run):
    result, folder, seen = run
    section = result.report["int8"]
    for side in ("baseline", "pruned"):
        entry = section[side]
        assert set(entry["metrics"]) >= {"top1"} and 0 <= entry["metrics"]["top1"] <= 1
        assert entry["latency_ms"] > 0 and entry["size_mb"] > 0
        assert set(section["fp32"][side]["metrics"]) >= {"top1"}
        assert section["fp32"][side]["latency_ms"] > 0
        if flow_int8.nothing_quantized(entry):
            # every layer timed faster in FP32 on this CPU (timing decides it): no INT8 weight,
            # so never written or called INT8, whatever the paired timing says
            assert entry["held_back"] and not entry["shipped"] and entry["file"] is None
        else:  # INT8 weights (on a model this small the scales and zero points weigh too)
            assert entry["size_mb"] < section["fp32"][side]["size_mb"]
    # every metric of the section was computed by ONNX Runtime: the FP32 and INT8 graphs of
    # both sides (4 evaluations), the INT8 ones with QuantizeLinear nodes (but a side whose
    # every layer was kept in FP32)
    quantized = sum(not flow_int8.nothing_quantized(section[s]) for s in ("baseline", "pruned"))
    assert len(seen) >= 4 and seen.count(True) >= quantized
    q = section["quantization"]
    assert q["format"] == "QDQ" and q["per_channel"] is True
    assert q["calibration"]["images"] == 24 and "cpu" in q
    assert section["latency"]["setting"]["threads"] == 1
    assert set(section["latency"]["ms"]) == {"baseline_fp32", "baseline_int8", "pruned_fp32",
                                             "pruned_int8"}
    saved = json.loads((folder / "report.json").read_text())
    assert saved["int8"]["pruned"]["metrics"] == section["pruned"]["metrics"]


def test_the_int8_files_run_in_plain_onnxruntime(run, tmp_path):
    _, folder, _ = run
    for side in ("baseline", "pruned"):
        path = folder / side / "model_int8.onnx"
        entry = json.loads((folder / "report.json").read_text())["int8"][side]
        if not entry["shipped"]:  # slower than FP32 on this CPU: not written, and said so
            assert not path.exists() and "not written" in " ".join(
                json.loads((folder / "report.json").read_text())["int8"]["verdicts"])
            continue
        assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(path)
        done = subprocess.run([sys.executable, "-c", PLAIN_ORT, str(path)], capture_output=True,
                              text=True, timeout=120)
        assert done.stdout.strip() == "ok", done.stderr[-800:]


def test_the_tables_show_the_precision_axis(run):
    result, folder, _ = run
    rows = int8_rows(result.report)
    # an INT8 model whose every layer this CPU timed faster in FP32 says so (CI's CPU did that)
    labels = {side: int8_label(result.report["int8"][side]) for side in ("baseline", "pruned")}
    assert [(r[0], r[1]) for r in rows] == [("baseline", "FP32"), ("baseline", labels["baseline"]),
                                            ("pruned", "FP32"), ("pruned", labels["pruned"])]
    assert rows[0][5] == "1.00x"
    md = (folder / "report.md").read_text()
    assert "| model | precision | size | latency | metric | vs FP32 base |" in md
    assert f"| pruned | {labels['pruned']} |" in md and "CPU:" in md
    assert f"pruned {labels['pruned']}" in to_csv(result.report)
    out = subprocess.run([sys.executable, "-m", "autoprune", "show", str(folder / "report.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "precision" in out.stdout and "INT8" in out.stdout


def test_int8_metric_loss_keeps_the_layer_that_matters_in_fp32(tmp_path, monkeypatch):
    """A metric that drops unless the stem convolution stays in FP32: the exclusion path (real
    quantization, per-layer sensitivity measured through evaluate_deployed) keeps exactly that
    layer in FP32 in the file it writes."""
    adapter = ClassificationAdapter("fashion-mnist", "fashion-mnist", input_size=32,
                                        train_limit=32, eval_limit=16, batch_size=16,
                                        progress=False)
    model = ToyNet(10).eval()

    def evaluate(self, data, threads=None):
        graph = onnx.load_from_string(data if isinstance(data, bytes)
                                      else Path(data).read_bytes()).graph
        made_by = {out: n.op_type for n in graph.node for out in n.output}
        stem_in_int8 = any(n.op_type == "Conv" and n.name.startswith("/stem/") and
                           any(made_by.get(i) == "DequantizeLinear" for i in n.input[:2])
                           for n in graph.node)
        return {"top1": 0.5 if stem_in_int8 else 0.8}

    monkeypatch.setattr(type(adapter), "evaluate_deployed", evaluate)
    from autoprune.engine.int8 import speed

    timed = speed.exclude_for_speed  # no block kept in FP32 for speed: accuracy decides alone
    monkeypatch.setattr(speed, "exclude_for_speed", lambda *a, **k: dataclasses.replace(
        timed(*a, **k), excluded=()))
    settings = Int8Settings(quantize="int8", calibration_images=16, int8_metric_loss=0.05)
    calibration, _ = flow_int8.calibration_of(adapter, settings)
    done = flow_int8.quantize_model(adapter, model, calibration, settings, threads=1,
                                    log=lambda _: None)
    kept = done.entry["excluded_for_accuracy"]
    assert kept and all("/stem/" in n for n in kept), kept
    assert done.entry["accuracy_reached"] is True
    assert done.entry["metrics"]["top1"] == 0.8


def test_ship_makes_the_folder_of_the_int8_file(tmp_path):
    """A run that prunes a given checkpoint trains no base model into save_dir/baseline/: the
    base model's INT8 file is still written there (the folder made), and one that is slower than
    FP32 is not written and leaves no folder."""
    done = flow_int8.Quantized({"file": None, "shipped": False}, b"fp32", b"int8 bytes", {})
    path = tmp_path / "run" / "baseline" / flow_int8.INT8_FILE
    entry = flow_int8.ship(done, path, fp32_ms=2.0, int8_ms=1.0)
    assert entry["shipped"] and path.read_bytes() == b"int8 bytes"
    slower = tmp_path / "other" / "baseline" / flow_int8.INT8_FILE
    assert not flow_int8.ship(done, slower, fp32_ms=1.0, int8_ms=2.0)["shipped"]
    assert not slower.parent.exists()


@needs_fmnist
def test_a_model_with_every_layer_kept_in_fp32_is_never_shipped_as_int8(tmp_path, monkeypatch):
    """Where no layer runs faster in INT8 (found on a 16-core AMX machine), the timing keeps
    every layer in FP32: that "INT8" model is the FP32 one, so a paired timing that finds it
    faster by noise must not write it as INT8, nor a verdict call it INT8."""
    from autoprune.engine.int8 import speed
    from autoprune.engine.int8.quantizer import layer_nodes, load

    adapter = ClassificationAdapter("fashion-mnist", "fashion-mnist", input_size=32,
                                    train_limit=16, eval_limit=16, batch_size=16,
                                    progress=False)
    timed = speed.exclude_for_speed

    def keep_every_layer(quantizer, fp32, *a, **k):
        every = tuple(n.name for n in load(quantizer.prepare(fp32)).graph.node if n.name)
        assert layer_nodes(load(quantizer.prepare(fp32)))
        return dataclasses.replace(timed(quantizer, fp32, *a, **k), excluded=every)

    monkeypatch.setattr(speed, "exclude_for_speed", keep_every_layer)
    settings = Int8Settings(quantize="int8", calibration_images=8)
    calibration, _ = flow_int8.calibration_of(adapter, settings)
    done = flow_int8.quantize_model(adapter, ToyNet(10).eval(), calibration, settings,
                                    threads=1, log=lambda _: None)
    assert done.entry["graph"]["int8_weights"] == 0 and flow_int8.nothing_quantized(done.entry)
    path = tmp_path / flow_int8.INT8_FILE
    entry = flow_int8.ship(done, path, fp32_ms=2.0, int8_ms=1.0)  # faster, by noise
    assert not entry["shipped"] and not path.exists()
    section = {"pruned": entry, "latency": {"ms": {"pruned_fp32": 2.0, "pruned_int8": 1.0}}}
    [line] = flow_int8.verdicts(section, ["pruned"])
    assert "no layer runs faster in INT8" in line and "ship its FP32 model" in line
    quantized = dict(done.entry, graph={**done.entry["graph"], "int8_weights": 3},
                     search_faster=True)
    assert flow_int8.ship(dataclasses.replace(done, entry=quantized), path, fp32_ms=2.0,
                          int8_ms=1.0)["shipped"]  # the same timing with INT8 layers: written


def test_an_int8_model_the_two_timings_disagree_on_is_not_shipped(tmp_path):
    """The block search timed the chosen INT8 form slower than FP32 (its log said "ship the
    FP32 model"), the paired timing faster: within noise, so FP32 stays the model, in the file
    and in the verdict; where both say faster it is written."""
    entry = {"file": None, "shipped": False, "graph": {"int8_weights": 5},
             "search_faster": False, "costly_ops": {}}
    done = flow_int8.Quantized(entry, b"fp32", b"int8 bytes", {})
    path = tmp_path / flow_int8.INT8_FILE
    shipped = flow_int8.ship(done, path, fp32_ms=2.0, int8_ms=1.9)
    assert not shipped["shipped"] and not path.exists()
    assert flow_int8.held_back({**entry, "search_faster": True}) is None
    section = {"baseline": {**shipped}, "pruned": {**shipped},
               "latency": {"ms": {"baseline_fp32": 3.0, "baseline_int8": 2.9,
                                  "pruned_fp32": 2.0, "pruned_int8": 1.9}}}
    lines = flow_int8.verdicts(section, ["baseline", "pruned"])
    assert "within noise" in lines[0] and "ship its FP32 model" in lines[0]
    assert lines[-1].startswith("pruned FP32 against the FP32 base model: 1.50x")
    agreed = dataclasses.replace(done, entry={**entry, "search_faster": True})
    assert flow_int8.ship(agreed, path, fp32_ms=2.0, int8_ms=1.9)["shipped"] and path.exists()


@pytest.mark.parametrize("settings, message", [
    (dict(quantize="int4"), "quantize='int4' is not a precision autoprune quantizes to"),
    (dict(calibration_images=0, quantize="int8"), "calibration_images=0 must be a positive"),
    (dict(calibration_method="kl", quantize="int8"), "calibration_method='kl' is not one of"),
    (dict(int8_metric_loss=2.0, quantize="int8"), "int8_metric_loss=2.0 is outside (0, 1)"),
    (dict(int8_metric_loss=0.01), "int8_metric_loss=0.01 is given without quantize='int8'"),
])
def test_bad_int8_settings_are_one_line(settings, message, tmp_path):
    with pytest.raises(ConfigError) as e:
        cls.train(ToyNet(10), "fashion-mnist", save_dir=tmp_path, sensitivities_file=tmp_path
                  / "s.json", pruned_flops=0.3, **SMALL, **settings)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "baseline").exists()  # refused before any work


def test_calibration_on_an_empty_split_is_one_line(monkeypatch):
    adapter = ClassificationAdapter("fashion-mnist", "fashion-mnist", input_size=32,
                                        train_limit=8, eval_limit=8, progress=False)
    monkeypatch.setattr(type(adapter), "calibration_inputs", lambda self, n: [])
    with pytest.raises(ConfigError, match="calibration on an empty split"):
        flow_int8.calibration_of(adapter, Int8Settings(quantize="int8"))


def test_quantize_without_a_latency_target_takes_the_timing_threads(tmp_path):
    """quantize='int8' times FP32 against INT8 with latency_threads / latency_batch, so they
    are not refused as unused; latency_precision='int8' alone (no target) still is."""
    with pytest.raises(ConfigError, match="latency_runtime='onnxruntime' is given without "
                                          "pruned_latency"):
        cls.train(ToyNet(10), "fashion-mnist", save_dir=tmp_path, sensitivities_file=tmp_path
                  / "s.json", pruned_flops=0.3, latency_runtime="onnxruntime",
                  latency_precision="int8", **SMALL)
    assert Int8Settings(quantize="int8").wanted()
    assert Int8Settings().wanted(Timing(runtime="onnxruntime", precision="int8"))
    assert not Int8Settings().wanted(Timing())


@pytest.fixture(scope="module")
def named_ckpt(tmp_path_factory):
    """An (untrained) timm resnet18 checkpoint: what `autoprune export` rebuilds by name."""
    import timm

    from autoprune import save_pruned

    path = tmp_path_factory.mktemp("ckpt") / "resnet18.pt"
    torch.manual_seed(0)
    save_pruned(timm.create_model("resnet18", num_classes=10), path, task="classification",
                arch="resnet18", build={"num_classes": 10}, input_size=32, pruned=False)
    return path


def test_export_int8_on_the_command_line(named_ckpt, tmp_path, capsys):
    out = tmp_path / "model_int8.onnx"
    code = main(["export", str(named_ckpt), str(out), "--int8", "--data", "fashion-mnist",
                 "--calibration-images", "16", "--eval-limit", "32"])
    captured = capsys.readouterr()
    printed = captured.out
    assert code in (0, None), captured.err
    assert "FP32" in printed and "INT8" in printed
    assert "top1" in printed  # measured in the runtime, FP32 -> INT8
    if out.exists():
        assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(out)
        assert not [p for p in tmp_path.iterdir() if p.name != out.name]  # no temp file left
        done = subprocess.run([sys.executable, "-c", PLAIN_ORT, str(out)], capture_output=True,
                              text=True, timeout=120)
        assert done.stdout.strip() == "ok", done.stderr[-800:]
    else:  # slower in INT8, or (a many-core AMX CPU) no layer faster in INT8
        assert ("not written: the INT8 model is slower" in printed
                or "not written: no layer runs faster in INT8" in printed
                or "not written: the block search timed it slower" in printed), printed


@pytest.mark.parametrize("argv, message", [
    (["--int8"], "--int8 calibrates on training data: pass --data"),
    (["--calibration-images", "8"], "--calibration-images is for an INT8 export: add --int8"),
    (["--int8", "--data", "fashion-mnist", "--static"], "--int8 writes a dynamic-batch INT8"),
])
def test_export_int8_refuses_in_one_line(named_ckpt, tmp_path, capsys, argv, message):
    code = main(["export", str(named_ckpt), str(tmp_path / "o.onnx"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.onnx").exists()


def test_an_int8_model_with_every_layer_kept_in_fp32_is_not_shown_as_int8():
    """Where the block search timed every layer of a side faster in FP32, that side's "INT8"
    graph is the FP32 one plus a few nodes (a little bigger, as fast within noise): its row
    says so instead of reading "INT8"; the other side's row, which holds INT8 weights, does not."""
    section = {"metric": "top1",
               "latency": {"ms": {"baseline_fp32": 2.0, "baseline_int8": 1.96,
                                  "pruned_fp32": 1.0, "pruned_int8": 0.5}},
               "fp32": {"baseline": {"size_mb": 4.0, "metrics": {"top1": 0.9}},
                        "pruned": {"size_mb": 2.0, "metrics": {"top1": 0.89}}},
               "baseline": {"size_mb": 4.1, "graph": {"int8_weights": 0},
                            "metrics": {"top1": 0.9}},
               "pruned": {"size_mb": 0.6, "graph": {"int8_weights": 12},
                          "metrics": {"top1": 0.88}}}
    report = {"baseline": {"params": 10, "metrics": {"top1": 0.9}},
              "pruned": {"params": 5, "metrics": {"top1": 0.89}}, "int8": section}
    rows = int8_rows(report)
    assert [r[1] for r in rows] == ["FP32", ALL_KEPT_FP32, "FP32", "INT8"]
    assert rows[1][2:] == ("4.10 MB", "1.96 ms", "0.9000", "1.02x")
    assert rows[3][2:] == ("0.60 MB", "0.50 ms", "0.8800", "4.00x")
    assert f"| baseline | {ALL_KEPT_FP32} | 4.10 MB |" in to_markdown(report)
    assert f"baseline {ALL_KEPT_FP32}: size" in to_csv(report)
    assert flow_int8.nothing_quantized(section["baseline"])
    assert not flow_int8.nothing_quantized(section["pruned"])
    assert not flow_int8.nothing_quantized({"graph": None})  # an entry without its graph


def test_a_report_without_an_int8_section_renders_as_before():
    report = {"baseline": {"params": 10, "metrics": {"top1": 0.5}},
              "pruned": {"params": 5, "metrics": {"top1": 0.4}}}
    assert int8_rows(report) == []
    assert "precision" not in to_markdown(report) and "precision" not in to_console(report)


def test_report_quantize_int8_compares_both_precisions(named_ckpt, tmp_path, capsys):
    code = main(["report", str(named_ckpt), str(named_ckpt), "fashion-mnist", "--eval-limit",
                 "24", "--save-dir", str(tmp_path), "--quantize", "int8", "--train-data",
                 "fashion-mnist", "--calibration-images", "8"])
    assert code in (0, None), capsys.readouterr().err
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r[:2] for r in int8_rows(report)] == [
        ("baseline", "FP32"), ("baseline", int8_label(report["int8"]["baseline"])),
        ("pruned", "FP32"), ("pruned", int8_label(report["int8"]["pruned"]))]
    assert main(["report", str(named_ckpt), str(named_ckpt), "fashion-mnist", "--quantize",
                 "int8"]) == 2
    assert "--quantize int8 calibrates on training data: pass --train-data" in \
        capsys.readouterr().err


def test_a_yolo_int8_model_is_validated_by_ultralytics_and_loads_in_yolo(tmp_path, monkeypatch):
    """The YOLO family: calibration images letterboxed from the train split, the INT8 file's
    mAP from Ultralytics' validator on the ONNX file, and `YOLO("model_int8.onnx")` (plain
    Ultralytics) knows its classes and predicts. Nothing lands in the working folder (ONNX
    Runtime's shape inference, giving up on a YOLO graph, saves a model and a <uuid>.data
    file there)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    from conftest import scenes_validated_on_train

    from autoprune.tasks.detection.adapter import DetectionAdapter

    data = scenes_validated_on_train(tmp_path / "scenes", 8)
    adapter = DetectionAdapter(data, input_size=64, batch_size=4, progress=False)
    model = adapter.build("yolov8n.yaml").eval()
    # every layer INT8, whatever this CPU times (the block search is tested on its own: a CPU
    # that times every block slower in INT8 would leave no INT8 file to load here)
    from autoprune.engine.int8 import speed

    monkeypatch.setattr(speed, "exclude_for_speed", lambda *a, **k: speed.SpeedChoice(
        (), 2.0, 1.0, 1.0, True, {}, {}, [], "every layer INT8 (test)"))
    settings = Int8Settings(quantize="int8", calibration_images=6)
    calibration, images = flow_int8.calibration_of(adapter, settings)
    assert images == 6 and calibration[0].shape[1:] == (3, 64, 64)
    assert 0.0 <= float(calibration[0].min()) and float(calibration[0].max()) <= 1.0
    done = flow_int8.quantize_model(adapter, model, calibration, settings, threads=1,
                                    log=lambda _: None)
    assert set(done.entry["metrics"]) >= {adapter.metric}
    assert set(done.fp32_metrics) >= {adapter.metric}
    path = tmp_path / "model_int8.onnx"
    entry = flow_int8.ship(done, path, fp32_ms=2.0, int8_ms=1.0)  # as if timed faster
    assert entry["shipped"] and path.is_file()
    from ultralytics import YOLO

    yolo = YOLO(str(path), task="detect")
    image = next((tmp_path / "scenes" / "images" / "train").iterdir())
    result = yolo.predict(str(image), imgsz=64, verbose=False)[0]
    assert result.names == {int(k): v for k, v in adapter.names.items()}
    assert not flow_int8.ship(done, path, fp32_ms=1.0, int8_ms=2.0)["shipped"]
    assert not path.exists()  # slower: not shipped, the earlier file removed
    assert list(cwd.iterdir()) == []


def test_segmentation_int8_measures_miou_in_the_runtime(tmp_path):
    from autoprune.tasks.segmentation.adapter import SegmentationAdapter

    adapter = SegmentationAdapter("fashion-scenes", input_size=64, train_limit=8,
                                  eval_limit=6, batch_size=4, progress=False)
    model = adapter.build("unet/resnet18", num_classes=adapter.num_classes).eval()
    settings = Int8Settings(quantize="int8", calibration_images=4)
    calibration, images = flow_int8.calibration_of(adapter, settings)
    assert images == 4
    done = flow_int8.quantize_model(adapter, model, calibration, settings, threads=1,
                                    log=lambda _: None)
    assert adapter.metric in done.entry["metrics"] and adapter.metric in done.fp32_metrics
    assert done.entry["graph"]["quantize_linear"] > 0 and done.entry["graph"]["int8_weights"] > 0


def test_openvino_int8_is_quantized_by_nncf_measured_and_saved_in_openvino(tmp_path):
    """latency_runtime='openvino': NNCF's nncf.quantize makes the INT8 model, its metric is
    measured in OpenVINO, and it ships as OpenVINO IR (model_int8.xml + .bin, both or neither)."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    adapter = ClassificationAdapter("fashion-mnist", "fashion-mnist", input_size=32,
                                    train_limit=16, eval_limit=16, batch_size=16,
                                    progress=False)
    settings = Int8Settings(quantize="int8", calibration_images=8)
    calibration, _ = flow_int8.calibration_of(adapter, settings)
    done = flow_int8.quantize_model(adapter, ToyNet(10).eval(), calibration, settings, threads=1,
                                    log=lambda _: None, runtime="openvino")
    assert done.runtime == "openvino" and "top1" in done.entry["metrics"]
    assert "NNCF" in done.entry["quantization"]["format"]
    entry = flow_int8.ship(done, tmp_path / "model_int8.onnx", fp32_ms=2.0, int8_ms=1.0)
    assert entry["shipped"] and entry["file"].endswith("model_int8.xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_int8.bin", "model_int8.xml"]
    import openvino as ov

    compiled = ov.Core().compile_model(str(tmp_path / "model_int8.xml"), "CPU")
    out = compiled(torch.zeros(1, 3, 32, 32).numpy())[compiled.outputs[0]]
    assert out.shape == (1, 10)
    flow_int8.ship(done, tmp_path / "model_int8.onnx", fp32_ms=1.0, int8_ms=2.0)
    assert list(tmp_path.iterdir()) == []  # slower: neither file
    with pytest.raises(ConfigError, match="int8_metric_loss keeps layers in FP32"):
        flow_int8.quantize_model(adapter, ToyNet(10).eval(), calibration,
                                 Int8Settings(quantize="int8", int8_metric_loss=0.01), threads=1,
                                 runtime="openvino")
