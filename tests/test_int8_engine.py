"""INT8 in the deploy runtime, engine side (issue 40), with ONNX Runtime's real quantizer on tiny
models: the QDQ file (int8 weights, runs in a plain onnxruntime process, close to FP32), ranges
reused for a pruned variant, the atomic write, one-line refusals (int4, empty calibration, an
operator ONNX Runtime cannot run), mixed precision by measured accuracy and by timing, the CPU
features, and the precision in compile_model / runtime_setting."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn as nn

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import autoprune as ap  # noqa: E402
from autoprune.engine import runtimes  # noqa: E402
from autoprune.engine.int8 import quantizer as quantizer_module  # noqa: E402
from autoprune.engine.int8.speed import block_of, paired_ms  # noqa: E402
from autoprune.engine.quantize import (AccuracyChoice, Int8Quantizer,  # noqa: E402
                                       QuantizeSettings, SpeedChoice, check_precision,
                                       cpu_choice, exclude_for_accuracy, exclude_for_speed,
                                       graph_summary, parse_cpu_flags, write_int8)
from autoprune.errors import ConfigError, MetricError  # noqa: E402
from conftest import TOY_GROUPS, assert_one_line, make_input, make_model  # noqa: E402

SIZE = 32


@pytest.fixture(scope="module")
def toy():
    """The conftest ToyNet, its FP32 ONNX bytes and calibration batches (8 images)."""
    model = make_model("toy")
    x = make_input(batch=1, size=SIZE)
    calibration = [make_input(batch=4, size=SIZE, seed=s) for s in (1, 2)]
    return model, x, runtimes.onnx_model(model, x), calibration


def _session(data: bytes):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _run(data: bytes, x: torch.Tensor) -> np.ndarray:
    session = _session(data)
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def _op_counts(data: bytes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in onnx.load_from_string(data).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


# ---- the quantized graph ------------------------------------------------------------------

def test_write_int8_gives_a_qdq_file_with_int8_weights_that_plain_onnxruntime_runs(toy,
                                                                                  tmp_path):
    model, x, data, calibration = toy
    out = tmp_path / "model_int8.onnx"
    info = write_int8(data, out, calibration)
    assert info.path == out and out.is_file() and info.size_mb == pytest.approx(
        out.stat().st_size / 1e6)
    graph = onnx.load(str(out)).graph
    ops = {n.op_type for n in graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    eight = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    conv_weights = [i for i in graph.initializer if len(i.dims) == 4]
    assert conv_weights and all(i.data_type == onnx.TensorProto.INT8 for i in conv_weights)
    assert any(i.data_type in eight and len(i.dims) == 1 for i in graph.initializer)  # zero pts
    assert info.graph["int8_weights"] >= 6 and info.graph["quantize_linear"] > 0
    record = info.record
    assert record["format"] == "QDQ" and record["per_channel"] is True
    assert record["types"] in ("S8S8", "U8S8") and record["calibration"]["images"] == 8
    assert not [f for f in tmp_path.iterdir() if f.name != out.name]  # no temp file left
    # a plain onnxruntime process, autoprune not imported, runs the file
    np.save(tmp_path / "x.npy", x.numpy())
    code = textwrap.dedent(f"""
        import sys, numpy as np, onnxruntime as ort
        s = ort.InferenceSession({str(out)!r}, providers=["CPUExecutionProvider"])
        y = s.run(None, {{s.get_inputs()[0].name: np.load({str(tmp_path / 'x.npy')!r})}})[0]
        assert "autoprune" not in sys.modules
        print(y.shape)""")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "(1, 10)"


def test_int8_outputs_stay_close_to_fp32_on_calibration_like_data(toy):
    model, _, data, calibration = toy
    int8 = Int8Quantizer(calibration).quantize(data)
    x = make_input(batch=4, size=SIZE, seed=7)  # drawn like the calibration images
    fp32 = _run(data, x)
    got = _run(int8, x)
    assert np.abs(got - fp32).max() <= 0.1 * np.abs(fp32).max()
    assert np.allclose(fp32, model(x).detach().numpy(), atol=1e-4)


def test_a_pruned_variant_reuses_the_ranges_and_matches_a_fresh_calibration(toy):
    """Tensors are named alike in a pruned export, so the first model's activation ranges
    quantize it without calibrating again (for timing): the same graph as a fresh calibration,
    outputs close on ToyNet (see engine/int8/quantizer.py for resnet18 and mobilenetv3). Once a
    model was calibrated on its own, its own ranges serve its later quantizations."""
    model, x, data, calibration = toy
    pruned = copy.deepcopy(model)
    ap.prune(pruned, x, {name: 0.5 for name, _ in TOY_GROUPS})
    pruned_onnx = runtimes.onnx_model(pruned, x)
    q = Int8Quantizer(calibration)
    q.quantize(data)
    assert (q.calibrations, q.reused) == (1, 0)
    reused = q.quantize(pruned_onnx)
    assert (q.calibrations, q.reused) == (1, 1)
    fresh = q.quantize(pruned_onnx, fresh=True)
    assert (q.calibrations, q.reused) == (2, 1)
    assert _op_counts(reused) == _op_counts(fresh)
    probe = make_input(batch=4, size=SIZE, seed=9)
    a, b, ref = _run(reused, probe), _run(fresh, probe), _run(pruned_onnx, probe)
    scale = np.abs(ref).max()
    assert np.abs(a - b).max() <= 0.1 * scale
    assert np.abs(a - ref).max() <= 0.15 * scale
    assert q.quantize(pruned_onnx) is fresh  # its own ranges now, cached
    layer = q.layer_nodes(pruned_onnx)[0]
    q.quantize(pruned_onnx, exclude=[layer], fresh=True)  # other layers in FP32: no new calibration
    assert (q.calibrations, q.reused) == (2, 1)
    assert q.record()["calibration"]["reused"] == 1


def test_a_variant_with_unknown_tensors_is_calibrated_afresh(toy):
    _, x, data, calibration = toy
    other = runtimes.onnx_model(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).eval(), x)
    q = Int8Quantizer(calibration)
    q.quantize(data)
    q.quantize(other)
    assert (q.calibrations, q.reused) == (2, 0)


def test_an_operator_the_quantizer_does_not_handle_stays_in_fp32(toy):
    _, x, _, calibration = toy

    class WithErf(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, t):
            return self.b(torch.erf(self.a(t)))

    data = runtimes.onnx_model(WithErf().eval(), x)
    int8 = Int8Quantizer(calibration).quantize(data)
    summary = graph_summary(int8)
    assert "Erf" in summary["float_ops"] and summary["int8_weights"] == 2
    assert _run(int8, x).shape == (1, 8, SIZE, SIZE)


class _TwoScales(nn.Module):
    """Two heads concatenated into one output, one in the hundreds, one in hundredths (a YOLO
    head's boxes in pixels beside its class scores)."""

    def __init__(self):
        super().__init__()
        self.big, self.small = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, padding=1)
        with torch.no_grad():
            self.big.weight.mul_(300.0)
            self.small.weight.mul_(0.03)

    def forward(self, t):
        return torch.cat([self.big(t), torch.sigmoid(self.small(t)) * 0.01], 1)


@pytest.mark.parametrize("tail_fp32", [True, False])
def test_the_output_tail_stays_fp32_so_small_outputs_survive_beside_large_ones(toy, tmp_path,
                                                                               tail_fp32):
    _, x, _, calibration = toy
    data = runtimes.onnx_model(_TwoScales().eval(), x)
    info = write_int8(data, tmp_path / "m.onnx", calibration,
                      QuantizeSettings(tail_fp32=tail_fp32))
    fp32, int8 = _run(data, x), _run((tmp_path / "m.onnx").read_bytes(), x)
    small = np.abs(int8[:, 4:] - fp32[:, 4:]).max() / np.abs(fp32[:, 4:]).max()
    if tail_fp32:
        assert small < 0.2 and {"Concat", "Sigmoid", "Mul"} <= set(info.graph["float_ops"])
        assert info.tail and not info.excluded and info.record["tail_fp32"] is True
    else:  # one 8-bit scale over both: the small half is lost
        assert small > 0.5 and info.tail == ()


def test_an_operator_onnx_runtime_cannot_run_is_one_line(toy, tmp_path):
    from onnx import TensorProto, helper
    _, _, _, calibration = toy
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["c"], name="conv"),
         helper.make_node("Frobnicate", ["c"], ["output"], name="odd", domain="my.ops")],
        "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1], [0.1] * 12)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.ops", 1)])
    model.ir_version = 8  # one every onnxruntime in the range reads (1.30 reads up to 13, and
    # make_model writes the newest onnx's: ORT 1.30 then failed on the version, not the operator)
    out = tmp_path / "model_int8.onnx"
    with pytest.raises(ConfigError) as e:
        write_int8(model.SerializeToString(), out, calibration)
    msg = assert_one_line(e)
    assert "Frobnicate" in msg and "FP32" in msg
    assert not list(tmp_path.iterdir())


def test_a_model_newer_than_onnx_runtime_reads_names_the_ir_version(toy, tmp_path):
    """onnx newer than onnxruntime (both in the ranges): ORT's C++ message cut at 200
    characters hid the cause; now it is the IR version and the upgrade."""
    from onnx import TensorProto, helper
    _, _, _, calibration = toy
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["output"], name="conv")],
        "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1], [0.1] * 12)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 99
    with pytest.raises(ConfigError) as e:
        write_int8(model.SerializeToString(), tmp_path / "model_int8.onnx", calibration)
    msg = assert_one_line(e)
    assert "IR version 99 is newer than it reads" in msg and "pip install -U onnxruntime" in msg
    assert not list(tmp_path.iterdir())


def test_an_opset_too_old_for_per_channel_is_one_line(toy):
    _, x, _, calibration = toy
    data = runtimes.onnx_model(nn.Conv2d(3, 4, 1).eval(), x, opset=11)
    with pytest.raises(ConfigError) as e:
        Int8Quantizer(calibration).quantize(data)
    assert "opset" in assert_one_line(e)


# ---- bad input, atomic files ---------------------------------------------------------------

def test_write_int8_is_atomic_when_interrupted_mid_write(toy, tmp_path, monkeypatch):
    _, _, data, calibration = toy
    out = tmp_path / "model_int8.onnx"
    out.write_bytes(b"the earlier file")

    def interrupted(fd):
        raise KeyboardInterrupt("simulated Ctrl-C")

    monkeypatch.setattr(quantizer_module.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_int8(data, out, calibration)
    assert out.read_bytes() == b"the earlier file"
    assert [f.name for f in tmp_path.iterdir()] == ["model_int8.onnx"]  # no temp file


@pytest.mark.parametrize("source", ["missing.onnx", b"not a model"])
def test_a_model_that_cannot_be_read_is_one_line_and_writes_nothing(toy, tmp_path, source):
    _, _, _, calibration = toy
    if isinstance(source, str):
        source = tmp_path / source
    out = tmp_path / "model_int8.onnx"
    with pytest.raises(ConfigError) as e:
        write_int8(source, out, calibration)
    assert "export" in assert_one_line(e)
    assert not out.exists()


@pytest.mark.parametrize("calibration", [[], [torch.empty(0, 3, SIZE, SIZE)], None])
def test_calibration_on_an_empty_split_is_one_line_and_writes_nothing(toy, tmp_path,
                                                                      calibration):
    _, _, data, _ = toy
    out = tmp_path / "model_int8.onnx"
    with pytest.raises(ConfigError) as e:
        write_int8(data, out, calibration)
    assert "calibration on an empty split" in assert_one_line(e)
    assert not list(tmp_path.iterdir())


def test_calibration_batches_may_carry_labels_and_are_limited_to_the_images_asked(toy):
    _, _, data, _ = toy
    batches = [(make_input(batch=4, size=SIZE, seed=s), torch.zeros(4)) for s in range(5)]
    q = Int8Quantizer(iter(batches), QuantizeSettings(calibration_images=6))
    q.quantize(data)
    assert q.images == 6 and q.record()["calibration"]["images"] == 6


@pytest.mark.parametrize("precision,runtime,words", [
    ("int4", "onnxruntime", "pick 'fp32' or 'int8'"), (8, "onnxruntime", "pick"),
    ("int8", "torch", "latency_runtime='onnxruntime'")])
def test_check_precision_refuses_in_one_line(precision, runtime, words):
    with pytest.raises(ConfigError) as e:
        check_precision(precision, runtime)
    assert words in assert_one_line(e)


def test_check_precision_names_the_setting_and_accepts_case():
    assert check_precision("INT8") == "int8" and check_precision("fp32", "torch") == "fp32"
    with pytest.raises(ConfigError) as e:
        check_precision("int4", name="quantize")
    assert assert_one_line(e).startswith("quantize='int4'")


def test_int8_in_openvino_without_nncf_names_the_pip_command(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "nncf" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        check_precision("int8", "openvino")
    assert "pip install openvino nncf" in assert_one_line(e)


@pytest.mark.parametrize("field,value", [("method", "kl"), ("calibration_images", 0),
                                         ("per_channel", "yes"), ("activations", "int4"),
                                         ("exclude", [3])])
def test_bad_quantize_settings_are_one_line(field, value):
    with pytest.raises(ConfigError) as e:
        QuantizeSettings(**{field: value}).check()
    assert_one_line(e)


def test_excluding_a_node_the_graph_lacks_is_one_line(toy):
    _, _, data, calibration = toy
    with pytest.raises(ConfigError) as e:
        Int8Quantizer(calibration).quantize(data, exclude=["/no/such/Conv"])
    assert "layer_nodes" in assert_one_line(e)


# ---- CPU features --------------------------------------------------------------------------

def test_cpu_features_are_parsed_from_a_flags_line():
    epyc = parse_cpu_flags("model name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 fma",
                           "x86_64")
    assert epyc["avx2"] and not epyc["vnni"] and not epyc["avx512f"] and not epyc["amx"]
    assert epyc["model"] == "AMD EPYC"
    xeon = parse_cpu_flags("avx2 avx512f avx512bw avx512_vnni amx_int8", "x86_64")
    assert xeon["vnni"] and xeon["avx512bw"] and xeon["amx"]
    assert parse_cpu_flags("avx2 avx_vnni", "x86_64")["vnni"]
    arm = parse_cpu_flags("Features\t: fp asimd asimddp i8mm", "aarch64")
    assert arm["arm_dotprod"] and arm["arm_i8mm"] and not arm["avx2"]
    assert cpu_choice(epyc)[:2] == ("uint8", True)  # no VNNI: U8S8, 7-bit weights
    # VNNI: U8S8 still (ONNX Runtime fuses QDQ convolutions on x86 for uint8 only), full range
    assert cpu_choice(xeon)[:2] == ("uint8", False)
    assert cpu_choice(parse_cpu_flags("avx2 avx_vnni", "x86_64"))[:2] == ("uint8", False)
    assert cpu_choice(arm)[:2] == ("int8", False)
    assert QuantizeSettings().record(xeon)["types"] == "U8S8"
    record = QuantizeSettings().record(epyc)
    assert record["types"] == "U8S8" and record["reduce_range"] is True
    assert "no VNNI" in record["why"] and record["cpu"]["avx2"] is True
    asked = QuantizeSettings(activations="int8", reduce_range=False).record(epyc)
    assert asked["types"] == "S8S8" and "set by the caller" in asked["why"]


# ---- mixed precision -----------------------------------------------------------------------

def _agreement(fp32_onnx: bytes, images: torch.Tensor):
    """An ``evaluate(onnx) -> metric`` on a real ORT session: 1 - the mean absolute difference
    of the class probabilities from the FP32 model's on ``images`` (its soft labels). FP32
    scores 1.0 exactly; any quantization noise scores below."""
    def probs(data: bytes) -> np.ndarray:
        return torch.softmax(torch.from_numpy(_run(data, images)), 1).numpy()

    labels = probs(fp32_onnx)
    calls = []

    def evaluate(data: bytes) -> float:
        calls.append(data)
        return 1.0 - float(np.abs(probs(data) - labels).mean())

    return evaluate, calls


def test_accuracy_within_a_huge_tolerance_keeps_every_layer_int8(toy):
    _, _, data, calibration = toy
    evaluate, calls = _agreement(data, make_input(batch=8, size=SIZE, seed=5))
    choice = exclude_for_accuracy(Int8Quantizer(calibration), data, evaluate, 1.0, 0.5)
    assert isinstance(choice, AccuracyChoice)
    assert choice.excluded == () and choice.reached and choice.evaluations == len(calls) == 1
    assert choice.metric == choice.int8_metric < 1.0 and "every layer" in choice.message


def test_accuracy_tolerance_zero_measures_each_layer_and_keeps_the_helpful_in_fp32(toy):
    _, _, data, calibration = toy
    q = Int8Quantizer(calibration)
    evaluate, calls = _agreement(data, make_input(batch=8, size=SIZE, seed=5))
    choice = exclude_for_accuracy(q, data, evaluate, 1.0, 0.0)
    layers = q.layer_nodes(data)
    assert set(choice.sensitivity) == set(layers)  # each measured, one layer in FP32 at a time
    assert choice.evaluations == len(calls) >= 1 + len(layers)
    assert choice.excluded and set(choice.excluded) <= set(layers)
    assert choice.metric > choice.int8_metric  # keeping layers in FP32 helped, measured
    # the layer whose FP32 copy helped most goes first
    assert choice.excluded[0] == min(choice.sensitivity, key=choice.sensitivity.get)
    if not choice.reached:
        assert "cannot reach" in choice.message and "\n" not in choice.message


class _StubQuantizer:
    """A quantizer whose 'INT8 model' is the set of layers kept in FP32 (logic tests only)."""

    def layer_nodes(self, fp32_onnx):
        return ["a", "b", "c"]

    def quantize(self, fp32_onnx, *, exclude=(), fresh=False):
        return ",".join(sorted(exclude)).encode()


@pytest.mark.parametrize("tolerance,excluded,metric,reached", [
    (0.06, ("a",), 0.95, True),       # the most helpful layer alone is enough: the fewest
    (0.01, ("a",), 0.95, False)])     # none reaches: the best set measured, not the last
def test_accuracy_greedy_keeps_the_fewest_helpful_layers(tolerance, excluded, metric, reached):
    metrics = {"": 0.90, "a": 0.95, "b": 0.93, "c": 0.80, "a,b": 0.94}
    choice = exclude_for_accuracy(_StubQuantizer(), b"", lambda d: metrics[d.decode()], 1.0,
                                  tolerance)
    assert (choice.excluded, choice.metric, choice.reached) == (excluded, metric, reached)
    assert choice.sensitivity == pytest.approx({"a": 0.05, "b": 0.07, "c": 0.20})
    assert choice.evaluations == (4 if reached else 5)  # all-INT8, 3 alone, (a, b) if needed
    assert ("cannot reach" in choice.message) != reached


def test_accuracy_measures_at_most_max_layers_ordered_by_quantization_noise(toy):
    _, _, data, calibration = toy
    evaluate, _ = _agreement(data, make_input(batch=4, size=SIZE, seed=5))
    choice = exclude_for_accuracy(Int8Quantizer(calibration), data, evaluate, 1.0, 0.0,
                                  max_layers=2)
    assert len(choice.sensitivity) == 2


def test_accuracy_refuses_a_zero_or_nan_metric(toy):
    _, _, data, calibration = toy
    with pytest.raises(MetricError):
        exclude_for_accuracy(Int8Quantizer(calibration), data, lambda d: 1.0, 0.0, 0.1)
    with pytest.raises(MetricError) as e:
        exclude_for_accuracy(Int8Quantizer(calibration), data, lambda d: float("nan"), 1.0, 0.1)
    assert_one_line(e)


def test_speed_choice_is_structured_and_timed_in_the_runtime(toy):
    _, x, data, calibration = toy
    q = Int8Quantizer(calibration)
    choice = exclude_for_speed(q, data, x, rounds=2, profile_runs=2)
    assert isinstance(choice, SpeedChoice)
    assert choice.fp32_ms > 0 and choice.all_int8_ms > 0 and choice.int8_ms > 0
    assert choice.int8_faster == (choice.int8_ms < choice.fp32_ms)
    assert choice.trials[0]["nodes_in_fp32"] == 0
    assert choice.int8_ms == min(t["ms"] for t in choice.trials)
    every = {n.name for n in onnx.load_from_string(q.prepare(data)).graph.node}
    assert set(choice.excluded) <= every
    assert choice.costly_ops and all(v >= 0 for v in choice.costly_ops.values())
    assert all(v > 0 for v in choice.blocks.values())
    assert "\n" not in choice.message
    assert ("ship the FP32 model" in choice.message) != choice.int8_faster
    json.dumps(choice.trials)


def test_paired_ms_scales_each_run_by_its_median_ratio_to_the_first():
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731 - a stub clock: each run advances it by its cost

    def cost(ms):
        def run():
            now[0] += ms / 1000.0
        return run

    assert paired_ms([cost(10), cost(5), cost(20)], rounds=3, clock=clock) == pytest.approx(
        [10.0, 5.0, 20.0])


def test_block_of_reads_the_module_path():
    assert block_of("/layer1/layer1.0/conv1/Conv") == "/layer1/layer1.0"
    assert block_of("/conv1/Conv") == "/conv1"
    assert block_of("/blocks/blocks.5/blocks.5.0/se/conv_reduce/Conv_token_3") == \
        "/blocks/blocks.5/blocks.5.0/se"
    assert block_of("QLinearMul_12") == ""


# ---- the precision in the runtimes -------------------------------------------------------

def test_compile_model_runs_the_int8_graph_and_the_setting_records_it(toy):
    model, x, data, calibration = toy
    q = Int8Quantizer(calibration)
    runner = runtimes.compile_model(model, x, threads=1, precision="int8", quantizer=q,
                                    onnx=data)
    assert runner.precision == "int8" and "QuantizeLinear" in _op_counts(runner.onnx)
    fp32 = runtimes.compile_model(model, x, threads=1, onnx=data)
    assert fp32.precision == "fp32"
    assert np.abs(runner()[0] - fp32()[0]).max() <= 0.1 * np.abs(fp32()[0]).max()
    timing_only = runtimes.compile_model(model, x, threads=1, precision="int8")
    assert timing_only.precision == "int8"
    setting = runtimes.runtime_setting("onnxruntime", 1, precision="int8", quantize=q)
    assert setting["precision"] == "int8" and setting["intra_op_threads"] == 1
    quant = setting["quantization"]
    assert quant["format"] == "QDQ" and "vnni" in quant["cpu"] and quant["calibration"]
    assert "precision" not in runtimes.runtime_setting("onnxruntime", 1)  # fp32 as before
    with pytest.raises(ConfigError) as e:
        runtimes.compile_model(model, x, runtime="torch", precision="int8")
    assert_one_line(e)


def test_openvino_int8_through_nncf_when_installed(toy):
    pytest.importorskip("openvino", reason="optional: pip install openvino nncf")
    pytest.importorskip("nncf", reason="optional: pip install openvino nncf")
    model, x, data, calibration = toy
    q = Int8Quantizer(calibration)
    runner = runtimes.compile_model(model, x, runtime="openvino", threads=1, precision="int8",
                                    quantizer=q, onnx=data)
    fp32 = runtimes.compile_model(model, x, runtime="openvino", threads=1, onnx=data)
    assert runner.precision == "int8"
    assert np.abs(runner()[0] - fp32()[0]).max() <= 0.1 * np.abs(fp32()[0]).max()
    quant = runtimes.runtime_setting("openvino", 1, precision="int8", quantize=q)["quantization"]
    assert quant["quantizer"] == "nncf.quantize" and quant["nncf"]


def test_openvino_and_nncf_are_imported_with_their_telemetry_declined(tmp_path):
    """Importing openvino or nncf writes a client id under ~/intel and sends usage data unless
    their consent check declines; autoprune imports them so that it does (nothing leaves the
    machine unless the user asks)."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    import os
    import subprocess
    import sys

    code = ("from autoprune.engine.runtimes import _module; _module('openvino'); "
            "from autoprune.engine.int8.openvino import import_without_telemetry; "
            "import_without_telemetry('nncf'); import os; assert os.environ.get('CI') is None")
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("CI", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-800:]
    assert not (tmp_path / "intel").exists()


@pytest.mark.parametrize("said, named", [
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:Fatal error: my.ops:Frobnicate"
     "(-1) is not a registered function/op", "it does not know the operator my.ops:Frobnicate"),
    ("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:" + "x" * 300 + " No Op "
     "registered for Frobnicate with domain_version of 1", "does not know the operator Frobnicate"),
    ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
     "ConvInteger(10) node with name 'conv'",
     "no kernel for the operator ConvInteger (node 'conv')"),
])
def test_onnx_runtimes_wordings_name_the_operator(said, named):
    """ONNX Runtime's releases word an unknown operator differently (1.30 on the GPU machine
    did not match the 1.32 wording): each known wording names the operator, past 200 chars too."""
    from autoprune.engine.int8.quantizer import quantize_error

    msg = str(quantize_error(RuntimeError(said), "calibrate"))
    assert named in msg and "\n" not in msg and msg.startswith("ONNX Runtime cannot calibrate")
