"""benchmarks/int8.py (issue 40) runs end to end at --quick with smaller flags: the "pretrained"
start, the FP32 and INT8 latency targets, the control, the table quantized and evaluated in ONNX
Runtime and timed for real, and the landing re-measured in a new process. The sensitivity
points and allocations are timed by FLOPs ratios here (deterministic and fast; the full runs time
them), the search for blocks to keep in FP32 for speed is skipped and the flow's own INT8 report
section left out (tests/test_int8_engine.py and tests/test_int8_flow.py cover them); a rerun
with the same --work-dir reuses every stage."""
from __future__ import annotations

import json
import re

import pytest
import torch

from autoprune.engine.int8 import speed
from autoprune.engine.latency import PairedTimer
from autoprune.flow import run as flow_run
from autoprune.tasks import weights

from conftest import flops_ratio, load_benchmark, needs_fmnist

pytestmark = needs_fmnist
SMALL = ["--quick", "--size", "32", "--train-images", "40", "--val-images", "40",
         "--pretrain-images", "60", "--table-images", "20", "--calibration-images", "8",
         "--fresh-runs", "1", "--rounds", "3"]


def _bench():
    return load_benchmark("int8", on_path=True)


def _all_int8(quantizer, fp32_onnx, *args, **kwargs):
    """exclude_for_speed without its profiling and timing: every block in INT8."""
    return speed.SpeedChoice((), 1.0, 1.0, 1.0, True, {}, {}, [], "INT8 (search skipped)")


@pytest.fixture
def offline(monkeypatch):
    def refuse(url, timeout=weights.PROBE_TIMEOUT):
        raise AssertionError(f"a test asked whether {url} is reachable")

    monkeypatch.setattr(weights, "reachable", refuse)
    monkeypatch.setattr(weights, "_probes", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


def test_the_int8_benchmark_quick_then_a_rerun_reuses_every_stage(tmp_path, capsys,
                                                                  monkeypatch, offline):
    monkeypatch.setattr(PairedTimer, "compare", flops_ratio)
    monkeypatch.setattr(flow_run, "quantize_sides", lambda *a, **k: None)
    monkeypatch.setattr(speed, "exclude_for_speed", _all_int8)
    bench = _bench()
    threads = torch.get_num_threads()
    # --int8-speedup 3: the INT8 run's target from this CPU's FP32 / INT8 base times (the fixed
    # pruned_latency=0.5 of the default takes the same path with a constant)
    argv = [*SMALL, "--work-dir", str(tmp_path / "w"), "--int8-speedup", "3"]
    try:
        (row,) = bench.main(argv)
        out = capsys.readouterr().out
        (again,) = bench.main(argv)
        second = capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)
    # the two targets: FP32 and INT8 tables, aligned as each precision wants
    assert row["fp32"]["round_to"] == 8 and row["int8"]["round_to"] == 16
    assert abs(row["fp32"]["allocation_achieved"] - 0.5) <= 0.03  # FLOPs stand in for ms
    assert row["int8"]["baseline_path"] == row["fp32"]["baseline_path"]  # the same base model
    # the table: every row quantized / evaluated in ONNX Runtime and timed
    q = row["quantized"]
    assert {"fp32", "int8"} <= set(q["base"]) and "int8" not in q["control"]
    assert 0 <= q["pruned_int8"]["int8"]["metrics"]["top1"] <= 1
    assert q["base"]["int8"]["size_mb"] < q["base"]["fp32"]["size_mb"]
    assert q["base"]["int8"]["quantization"]["cpu_summary"]
    ms = row["timing"]["1x1"]["ms"]
    assert set(ms) == {label for label, _, _ in bench.ROWS} and min(ms.values()) > 0
    # the landing: a new process timed both INT8 graphs, with reused and with own ranges
    fresh = row["fresh"]
    assert len(fresh["runs"]) == 1 and fresh["ranges_reused"] >= 1
    assert -1 < fresh["reduction"] < 1 and -1 < fresh["own_calibration"] < 1
    assert row["landing"]["pruned_path"] != row["int8"]["pruned_path"]
    # what is printed
    assert re.search(r"^\| INT8 pruned \| [\d.]+ MB \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", out, re.M)
    assert re.search(r"^\| resnet18 \| 32 \| -[\d.]+% \| -[\d.]+% \| \*\*-[\d.]+%\*\*", out, re.M)
    assert re.fullmatch(r"models=1 int8_3x=[01] mobilenet_int8_not_slower=- landed=[01] "
                        r"stopped=0", out.rstrip().splitlines()[-1])
    # the rerun trains, quantizes and times nothing again
    assert again["timing"] == row["timing"] and again["fresh"] == row["fresh"]
    assert "[autoprune] data:" not in second and "INT8 (search skipped)" not in second
    allowed, total = bench.cores()
    assert ("allxb8" in row["timing"]) == (allowed >= total)  # skipped under taskset
    # the INT8 target: from the base's FP32 / INT8 graphs timed first; its stages in their folder
    ms = row["int8_vs_fp32_base"]["ms"]
    assert row["int8_target"] == bench.int8_target(3, ms["FP32 base"], ms["INT8 base"])
    assert 0.1 <= row["int8_target"] <= 0.7
    assert f"asks pruned_latency={row['int8_target']} in INT8" in out
    assert "/int8-x3/int8/" in row["int8"]["pruned_path"] and again["int8"] == row["int8"]
    results = list((tmp_path / "w").rglob("result.json"))
    # pretraining, 3 flows, control, 4 quantized, the base's timing, the table's timings, the
    # fresh processes
    assert len(results) == 11 + len(row["timing"])


def test_a_target_the_table_cannot_reach_stops_that_model_and_the_run_goes_on(capsys, monkeypatch,
                                                                            tmp_path):
    """On the VNNI CPU YOLOv8n's INT8 table reached -44 % at most, and pruned_latency=0.5 ended the
    whole benchmark with a traceback; now that model's one-line reason is printed and kept in
    --json, and the next model runs."""
    from autoprune.errors import ConfigError

    bench = _bench()
    ran = []

    def journey(name, s, work, args):
        if name == "yolov8n":
            raise ConfigError("pruned_latency=0.5 is not reachable with this table: the most "
                              "it allows is 0.444")
        ran.append(name)
        raise ConfigError(f"{name}: also out of reach")

    monkeypatch.setattr(bench, "journey", journey)
    threads = torch.get_num_threads()
    try:
        rows = bench.main(["--models", "yolov8n,resnet18", "--json", str(tmp_path / "r.json")])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert rows == [] and ran == ["resnet18"]  # the second model still ran
    assert "[int8] yolov8n stopped: pruned_latency=0.5 is not reachable" in out
    assert out.rstrip().splitlines()[-1].endswith(" landed=0 stopped=2")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert [r["model"] for r in saved] == ["yolov8n", "resnet18"] and "stopped" in saved[0]


def test_the_int8_target_for_a_speedup_over_the_fp32_base():
    """--int8-speedup X: the INT8 reduction that makes the INT8 pruned model X times the FP32
    base's speed (with 10 % margin), within 0.1-0.7."""
    bench = _bench()
    # INT8 alone 2x: 3x (aimed at 3.3x) needs the INT8 graph cut to 2 / 3.3 of its time
    assert bench.int8_target(3.0, 20.0, 10.0) == pytest.approx(1 - 2 / 3.3, abs=1e-3)
    assert bench.int8_target(3.0, 16.5, 10.0) == pytest.approx(0.5, abs=1e-3)
    assert bench.int8_target(3.0, 40.0, 10.0) == 0.1  # INT8 alone is enough: a light prune
    assert bench.int8_target(6.0, 11.0, 10.0) == 0.7  # more than pruning can give: capped
    assert bench.int8_target(3.0, 15.0, 10.0) > bench.int8_target(3.0, 25.0, 10.0)
