"""Latency timed in a deploy runtime (``runtime="onnxruntime"``), not only in torch eager: the
setting recorded, a table timed in another runtime refused, models the runtime cannot run
refused in one line, ``ratios_by_latency`` landing in ONNX Runtime, and the ``max_loss`` message
of an unreachable target."""
from __future__ import annotations

import copy
import json
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import autoprune as ap  # noqa: E402
from autoprune.engine import latency_target, runtimes  # noqa: E402
from autoprune.engine.checkpoint import export_onnx  # noqa: E402
from autoprune.engine.groups import PruningGraph  # noqa: E402
from autoprune.engine.latency import (PairedTimer, check_latency_options,  # noqa: E402
                                      check_latency_table, describe, latency_setting,
                                      measure_latencies, merge_records, paired_reduction,
                                      setting_differences)
from autoprune.engine.measure import latency_ms  # noqa: E402
from autoprune.engine.store import SensitivityRecord, read_record, write_record  # noqa: E402
from conftest import TOY_GROUPS, assert_one_line, make_input, make_model  # noqa: E402

ORT = "onnxruntime"
GROUPS = [name for name, _ in TOY_GROUPS]


def _pruned(model, x, ratio):
    pruned = copy.deepcopy(model)
    ap.prune(pruned, x, {g: ratio for g in GROUPS})
    return pruned


# ---- timing in ONNX Runtime ---------------------------------------------------------------

def test_ort_times_a_pruned_copy_faster_and_records_its_setting():
    model, x = make_model("toy"), make_input(batch=1, size=64)
    timer = PairedTimer(model, x, threads=1, rounds=3, runtime=ORT)
    relative = timer.compare(_pruned(model, x, 0.75))
    assert 0 < relative < 1.0
    assert timer.exports == 2  # the unpruned model once, the candidate once
    timer.compare(_pruned(model, x, 0.75))  # a copy pruned alike: its graph is reused
    assert timer.exports == 2
    timer.compare(_pruned(model, x, 0.5))
    assert timer.exports == 3
    setting = timer.setting
    assert setting["runtime"] == ORT and setting["threads"] == 1
    assert setting["clock"] == "thread cpu time"  # ORT runs its kernels on the calling thread
    own = setting["runtime_setting"]
    assert own["runtime"] == ORT and own["version"] == onnxruntime.__version__
    assert own["intra_op_threads"] == 1 and own["inter_op_threads"] == 1
    assert own["providers"] == ["CPUExecutionProvider"] and own["opset"] == 17
    assert own["graph_optimization"] == "ORT_ENABLE_ALL"
    assert describe(setting).endswith(", onnxruntime")
    assert timer.baseline_ms > 0


def test_torch_stays_the_default_and_records_its_runtime():
    model, x = make_model("toy"), make_input(batch=1)
    setting = latency_setting(x)
    assert setting["runtime"] == "torch" and setting["runtime_setting"]["runtime"] == "torch"
    assert "onnxruntime" not in describe(setting)
    assert PairedTimer(model, x, rounds=1).runtime == "torch"
    out = paired_reduction(model, model, x, threads=1, rounds=1)
    assert out["setting"]["runtime"] == "torch"


def test_with_one_intra_op_thread_ort_computes_on_the_calling_thread():
    # what makes the thread's CPU time a valid clock for ORT with one thread
    model, x = make_model("resnet18"), make_input(batch=1, size=64)
    runner = runtimes.compile_model(model, x, runtime=ORT, threads=1)
    runner()
    import time
    wall, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(5):
        runner()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    process = time.process_time() - process
    assert cpu == pytest.approx(process, rel=0.15)  # no other thread of this process worked
    assert cpu <= wall * 1.05


def test_the_exported_graph_is_what_autoprune_export_writes(tmp_path):
    import onnx

    model, x = make_model("toy"), make_input(batch=2, size=32)
    data = runtimes.onnx_model(model, x)
    written = onnx.load(str(export_onnx(model, x, tmp_path / "m.onnx")))
    in_memory = onnx.load_from_string(data)
    assert [n.op_type for n in in_memory.graph.node] == [n.op_type for n in written.graph.node]
    assert in_memory.opset_import[0].version == written.opset_import[0].version == 17
    for a, b in ((in_memory.graph.input, written.graph.input),
                 (in_memory.graph.output, written.graph.output)):
        assert [str(v) for v in a] == [str(v) for v in b]  # names, dynamic batch, shapes
    assert in_memory.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    diff = runtimes.output_difference(model, x, runtime=ORT)
    assert diff < 1e-4
    assert model.training is False


def test_latency_ms_and_measure_latencies_in_ort(tmp_path):
    model, x = make_model("toy"), make_input(batch=1, size=32)
    assert latency_ms(model, x, runtime=ORT, warmup=1, repeats=3) > 0
    table = {g: {0.5: 0.1, 0.75: 0.2} for g in GROUPS}
    path = tmp_path / "ort.json"
    record = measure_latencies(model, x, table, path=path, threads=1, runtime=ORT,
                               progress=False)
    assert {g: set(p) for g, p in record.latency.items()} == {g: {0.5, 0.75} for g in GROUPS}
    stored = read_record(path).extra["latency"]
    assert stored["runtime"] == ORT
    assert stored["runtime_setting"]["version"] == onnxruntime.__version__
    # the same file asked for in torch eager: refused, naming the runtime
    with pytest.raises(ap.SensitivityFileError) as info:
        measure_latencies(model, x, {g: {0.25: 0.05} for g in GROUPS}, path=path, threads=1,
                          progress=False)
    msg = assert_one_line(info)
    assert "runtime 'onnxruntime' (asked: 'torch')" in msg


# ---- a table timed in another runtime -----------------------------------------------------

def _timed_record(x, runtime):
    record = SensitivityRecord(sensitivities={"g": {0.5: 0.1}}, latency={"g": {0.5: 0.7}})
    record.extra["latency"] = {**latency_setting(x, threads=1, runtime=runtime),
                               "baseline_ms": 1.0}
    return record


@pytest.mark.parametrize("timed, asked", [("torch", ORT), (ORT, "torch")])
def test_a_table_timed_in_another_runtime_is_refused(timed, asked):
    x = make_input(batch=1)
    record = _timed_record(x, timed)
    with pytest.raises(ap.SensitivityFileError) as info:
        check_latency_table(record, latency_setting(x, threads=1, runtime=asked), "t.json")
    msg = assert_one_line(info)
    assert f"runtime {timed!r} (asked: {asked!r})" in msg and "t.json" in msg
    check_latency_table(record, latency_setting(x, threads=1, runtime=timed), "t.json")


def test_an_old_table_without_the_runtime_counts_as_torch(tmp_path):
    x = make_input(batch=1)
    record = _timed_record(x, "torch")
    for key in ("runtime", "runtime_setting"):  # as written before runtimes existed
        del record.extra["latency"][key]
    path = tmp_path / "old.json"
    write_record(record, path)
    assert "runtime" not in json.loads(path.read_text())["extra"]["latency"]
    old = read_record(path)
    check_latency_table(old, latency_setting(x, threads=1), path)  # torch: accepted
    assert setting_differences(old.extra["latency"], latency_setting(x, threads=1)) == ""
    with pytest.raises(ap.SensitivityFileError, match="runtime 'torch' \\(asked: 'onnxruntime'"):
        check_latency_table(old, latency_setting(x, threads=1, runtime=ORT), path)
    # merging an old torch table with a new torch one works; with an ORT one it is refused
    new = tmp_path / "new.json"
    write_record(_timed_record(x, "torch"), new)
    assert merge_records([path, new]).latency == {"g": {0.5: 0.7}}
    ort_file = tmp_path / "ort.json"
    write_record(_timed_record(x, ORT), ort_file)
    with pytest.raises(ap.SensitivityFileError) as info:
        merge_records([path, ort_file])
    assert "runtime" in assert_one_line(info)


def test_ratios_by_latency_refuses_a_torch_table_for_ort():
    model, x = make_model("toy"), make_input(batch=1)
    record = _synthetic_record(model, x)
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.ratios_by_latency(model, x, record, 0.3, timing={"runtime": ORT})
    assert "runtime 'torch' (asked: 'onnxruntime')" in assert_one_line(info)


@pytest.mark.parametrize("timed, asked", [("fp32", "int8"), ("int8", "fp32")])
def test_a_table_timed_in_another_precision_is_refused(timed, asked):
    """An INT8 latency target never allocates on a table timed in FP32, nor the reverse: the
    precision is part of the recorded setting, like device and runtime."""
    x = make_input(batch=1)
    record = SensitivityRecord(sensitivities={"g": {0.5: 0.1}}, latency={"g": {0.5: 0.7}})
    record.extra["latency"] = {**latency_setting(x, threads=1, runtime=ORT, precision=timed),
                               "baseline_ms": 1.0}
    with pytest.raises(ap.SensitivityFileError) as info:
        check_latency_table(record, latency_setting(x, threads=1, runtime=ORT, precision=asked),
                            "t.json")
    assert f"precision {timed!r} (asked: {asked!r})" in assert_one_line(info)


def test_ratios_by_latency_refuses_an_fp32_table_for_an_int8_target(tmp_path):
    model, x = make_model("toy"), make_input(batch=1)
    table = {name: {0.5: 0.05} for name, _ in TOY_GROUPS}
    record = ap.measure_latencies(model, x, table, threads=1, runtime=ORT, progress=False)
    assert record.extra["latency"]["precision"] == "fp32"
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.ratios_by_latency(model, x, record, 0.3,
                             timing=ap.Timing(threads=1, runtime=ORT, precision="int8"))
    assert "precision 'fp32' (asked: 'int8')" in assert_one_line(info)


# ---- models and runtimes that cannot be timed ---------------------------------------------

class _Twice(torch.autograd.Function):
    """Exports as an operator of a domain no runtime knows."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def symbolic(g, x):
        return g.op("autoprune_test::Twice", x)


class _Net(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.conv, self.op = nn.Conv2d(3, 8, 3, padding=1), op

    def forward(self, x):
        return self.op(self.conv(x))


def test_a_model_ort_cannot_run_is_one_line_naming_the_operator():
    x = make_input(batch=1, size=16)
    with pytest.raises(ap.ConfigError) as info:
        paired_reduction(_Net(_Twice.apply), _Net(_Twice.apply), x, threads=1, rounds=1,
                         runtime=ORT)
    msg = assert_one_line(info)
    assert "Twice" in msg and "latency_runtime='torch'" in msg


def test_a_model_that_does_not_export_is_one_line_naming_the_operator():
    x = make_input(batch=1, size=16)
    model = _Net(lambda y: torch.fft.fft2(y).real)
    with pytest.raises(ap.ConfigError) as info:
        PairedTimer(model, x, threads=1, rounds=1, runtime=ORT).compare(model)
    msg = assert_one_line(info)
    assert "aten::fft_fft2" in msg and "opset 17" in msg and "latency_runtime='torch'" in msg


def test_unknown_runtime_and_missing_package_are_one_line(monkeypatch):
    x = make_input(batch=1)
    for bad in ("tensorrt", "ORT", None, 3):
        with pytest.raises(ap.ConfigError) as info:
            check_latency_options("cpu", 1, 1, runtime=bad)
        assert "is not a runtime" in assert_one_line(info)
        with pytest.raises(ap.ConfigError):
            latency_setting(x, runtime=bad)
    real = runtimes.importlib.import_module

    def missing(name, *args):
        if name in ("onnxruntime", "openvino"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(runtimes.importlib, "import_module", missing)
    for name in ("onnxruntime", "openvino"):  # as if never imported (restored afterwards)
        monkeypatch.delitem(sys.modules, name, raising=False)
        with pytest.raises(ap.ConfigError) as info:
            check_latency_options("cpu", 1, 1, runtime=name)
        msg = assert_one_line(info)
        assert f"pip install {name}" in msg and "latency_runtime='torch'" in msg
    assert check_latency_options("cpu", 1, 1) == "cpu"  # torch needs nothing more


def test_inputs_the_runtime_cannot_take_are_one_line():
    model = make_model("toy")
    with pytest.raises(ap.ConfigError) as info:
        runtimes.compile_model(model, {"x": make_input(batch=1)}, runtime=ORT)
    assert "tensor" in assert_one_line(info)


# ---- ratios_by_latency in ONNX Runtime ----------------------------------------------------

def test_ratios_by_latency_lands_in_ort_on_a_tiny_model():
    model, x = make_model("toy"), make_input(batch=1, size=64)
    table = {g: {r: r / 10 for r in (0.25, 0.5, 0.75)} for g in GROUPS}
    record = measure_latencies(model, x, table, threads=1, runtime=ORT, progress=False)
    assert record.extra["latency"]["runtime"] == ORT
    # a wide tolerance: this checks the plumbing on a real, timed model, not the machine's load
    result = ap.ratios_by_latency(model, x, record, 0.3, timing={"threads": 1, "runtime": ORT},
                                  search={"tolerance": 0.29, "rounds": 5})
    assert isinstance(result, ap.LatencyRatios) and result and 0 < result.achieved < 1
    assert any(r > 0 for r in result.values())
    assert result.setting["runtime"] == ORT and result.setting["threads"] == 1
    assert result.setting["runtime_setting"]["version"] == onnxruntime.__version__
    assert 0 < result.pruned_ms < result.baseline_ms
    pruned = copy.deepcopy(model)
    before = sum(p.numel() for p in pruned.parameters())
    ap.prune(pruned, x, result)
    assert sum(p.numel() for p in pruned.parameters()) < before


# ---- max_loss: an unreachable target names the cap ----------------------------------------

# group: {ratio: (loss, latency saved)}
SYNTHETIC = {
    "stem.0": {0.25: (0.01, 0.1), 0.5: (0.02, 0.2), 0.75: (0.03, 0.3)},
    "fuse.0": {0.25: (0.001, 0.05), 0.5: (0.002, 0.1), 0.75: (0.5, 0.15)},
}


def _synthetic_record(model, x):
    record = SensitivityRecord(model={"fingerprint": PruningGraph(model, x).fingerprint})
    for g, points in SYNTHETIC.items():
        for r, (loss, saved) in points.items():
            record.set_point(g, r, loss)
            record.set_latency(g, r, 1.0 - saved)
    record.extra["latency"] = {**latency_setting(x), "baseline_ms": 10.0}
    return record


def _saving(ratios):
    total = 0.0
    for g, r in ratios.items():
        pts = [(0.0, 0.0)] + [(q, s) for q, (_, s) in SYNTHETIC[g].items()]
        for (r0, s0), (r1, s1) in zip(pts, pts[1:]):
            if r0 <= r <= r1 + 1e-12:
                total += s0 + (r - r0) / (r1 - r0) * (s1 - s0)
                break
    return total


def test_an_unreachable_target_under_max_loss_names_the_cap_and_both_figures(monkeypatch):
    monkeypatch.setattr(latency_target, "measure_reduction",
                        lambda model, x, ratios, timer, **kw: _saving(ratios))
    model, x = make_model("toy"), make_input(batch=1)
    record = _synthetic_record(model, x)
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_latency(model, x, record, 0.3, max_loss=1e-6)
    msg = assert_one_line(info)
    # under the cap nothing may be pruned (0.000); without it every group to 0.75 (0.450)
    assert "max_loss=1e-06" in msg and "eval_metric_loss" in msg
    assert "the most it allows is 0.000 under that cap (0.450 without it" in msg
    assert "raise the cap" in msg
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_latency(model, x, record, 0.3, max_loss=0.01)  # stem.0 0.25, fuse.0 0.5
    assert "the most it allows is 0.200 under that cap (0.450 without it" in \
        assert_one_line(info)
    with pytest.raises(ap.ConfigError) as info:  # without a cap: the old message, no cap named
        ap.ratios_by_latency(model, x, record, 0.6)
    msg = assert_one_line(info)
    assert "the most it allows is 0.450" in msg and "max_loss" not in msg


def test_max_loss_message_with_real_ort_timings():
    model, x = make_model("toy"), make_input(batch=1, size=64)
    table = {g: {0.5: 0.5, 0.75: 0.9} for g in GROUPS}
    record = measure_latencies(model, x, table, threads=1, runtime=ORT, progress=False)
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_latency(model, x, record, 0.3, max_loss=0.1,
                             timing={"threads": 1, "runtime": ORT}, search={"rounds": 3})
    msg = assert_one_line(info)
    assert "max_loss=0.1" in msg and "the most it allows is 0.000 under that cap (" in msg
    assert "onnxruntime" in msg
    without = float(msg.split("under that cap (")[1].split(" ")[0])
    assert without > 0.1  # pruning every group to 0.75 makes the toy clearly faster


def test_the_onnx_output_matches_torch_in_ort():
    model, x = make_model("resnet18"), make_input(batch=2, size=32)
    runner = runtimes.compile_model(model, x, runtime=ORT, threads=1)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(runner()[0], expected, rtol=1e-3, atol=1e-4)


def test_openvino_times_a_pruned_copy_when_installed():
    ov = pytest.importorskip("openvino")  # optional: not a dependency
    model, x = make_model("toy"), make_input(batch=1, size=64)
    out = paired_reduction(model, _pruned(model, x, 0.75), x, threads=1, rounds=3,
                           runtime="openvino")
    assert out["reduction"] > 0
    own = out["setting"]["runtime_setting"]
    assert out["setting"]["runtime"] == "openvino" and own["version"] == ov.__version__
    assert own["inference_num_threads"] == 1 and own["inference_precision"]
    with pytest.raises(ap.ConfigError) as info:
        runtimes.compile_model(_Net(_Twice.apply), make_input(batch=1, size=16),
                               runtime="openvino", threads=1)
    assert "Twice" in assert_one_line(info)


def test_a_missing_kernel_names_the_operator_and_node():
    # ONNX Runtime's words for an operator it knows but has no kernel for (type, opset)
    e = RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an "
                     "implementation for ConvInteger(10) node with name '/conv/ConvInteger'")
    msg = str(runtimes.runtime_error(e, ORT))
    assert "\n" not in msg and "ConvInteger" in msg and "'/conv/ConvInteger'" in msg
    assert "latency_runtime='torch'" in msg


def test_deploy_benchmark_runs_on_tiny_settings(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "deploy_latency.py"
    spec = importlib.util.spec_from_file_location("bench_deploy_latency", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--models", "resnet18", "--size", "32", "--targets", "0.5",
                       "--threads", "1", "--batches", "1,2", "--rounds", "1", "--runs", "1"])
    out = capsys.readouterr().out
    assert [(r["batch"], r["threads"]) for r in rows] == [(1, 1), (2, 1)]
    for r in rows:
        assert r["flops_x"] > 1.5 and r["torch_x"] > 0 and r["onnxruntime_x"] > 0
        assert r["torch_clock"] == r["onnxruntime_clock"] == "thread cpu time"
    assert "| resnet18 | 32 | 1 | 1 | - | -50% |" in out
    assert out.rstrip().splitlines()[-1].startswith("rows=2 mean_eager_eff=")
