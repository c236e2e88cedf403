"""Latency in the sensitivity table (paired timings, resumable, refused in another setting) and
ratios_by_latency (greedy on loss per millisecond saved, corrected against measurements)."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import autoprune as ap
from autoprune.cli.main import main
from autoprune.engine import latency as latency_mod
from autoprune.engine.latency import PairedTimer
from conftest import RefEval, assert_one_line, assert_same_state, make_input, make_model, snapshot

RATIOS = (0.25, 0.5)


@pytest.fixture
def counted(monkeypatch):
    """PairedTimer.compare made deterministic (pruned / unpruned = parameters kept) and counted;
    ``counted.models`` holds the parameter count of every model it was given."""
    calls = []

    def compare(self, candidate):
        self.base_rounds.append(1.0)
        calls.append(sum(p.numel() for p in candidate.parameters()))
        return calls[-1] / sum(p.numel() for p in self.base.parameters())

    monkeypatch.setattr(PairedTimer, "compare", compare)
    return calls


def _analyse(model, x, path, **kwargs):
    kwargs.setdefault("ratios", RATIOS)
    return ap.sensitivity(model, x, RefEval(model, x), sensitivities_file=path, progress=False,
                          latency=True, **kwargs)


# ---- step 1: latency in the sensitivity table ----------------------------------------------

def test_each_point_records_its_latency_next_to_its_loss(toy, x, tmp_path):
    path = tmp_path / "s.json"
    sens = _analyse(toy, x, path)
    record = ap.read_record(path)
    setting = record.extra["latency"]
    assert setting["device"] == "cpu" and setting["threads"] == torch.get_num_threads()
    assert setting["batch"] == 1 and setting["input_size"] == [1, 3, 32, 32]  # x holds 2 images
    assert setting["torch"] == torch.__version__ and setting["hardware"]
    assert setting["baseline_ms"] > 0
    assert ap.load_sensitivities(path) == dict(sens)  # still {group: {ratio: loss}}
    assert set(record.latency) == set(record.sensitivities)
    raw = json.loads(path.read_text())["latency"]
    for group, points in record.sensitivities.items():
        assert set(record.latency[group]) == set(points)
        for ratio, relative in record.latency[group].items():
            assert relative > 0
            stored = raw[group][f"{ratio:.2f}"]
            assert stored["ratio"] == relative
            assert stored["latency_ms"] == pytest.approx(relative * setting["baseline_ms"])
    assert sens.record.latency == record.latency  # also returned without a file


def test_latency_batch_and_setting_recorded(toy, x, tmp_path, counted):
    record = _analyse(toy, x, tmp_path / "s.json", latency_batch=3, latency_threads=1).record
    assert record.extra["latency"]["batch"] == 3
    assert record.extra["latency"]["input_size"] == [3, 3, 32, 32]
    assert record.extra["latency"]["threads"] == 1


def test_old_files_without_latency_still_load(tmp_path):
    path = tmp_path / "old.json"
    ap.save_sensitivities({"conv1": {0.1: 0.01}}, path, fingerprint="abc")
    assert "latency" not in json.loads(path.read_text())
    record = ap.read_record(path)
    assert record.latency == {} and ap.load_sensitivities(path) == {"conv1": {0.1: 0.01}}


@pytest.mark.parametrize("bad", [[1], {"g": {"0.10": 0.9}}, {"g": {"0.10": {"ratio": -1}}},
                                 {"g": {"2.0": {"ratio": 0.9}}}, {"g": {"0.1": {"ratio": "x"}}}])
def test_damaged_latency_section_is_one_line_error(tmp_path, bad):
    path = tmp_path / "bad.json"
    ap.save_sensitivities({"g": {0.1: 0.01}}, path)
    data = json.loads(path.read_text())
    data["latency"] = bad
    path.write_text(json.dumps(data))
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.read_record(path)
    assert "latency" in assert_one_line(info)


def test_rerun_times_only_missing_points(toy, x, tmp_path, counted):
    path = tmp_path / "s.json"
    _analyse(toy, x, path, ratios=(0.5,))
    first = len(counted)
    assert first == 5  # one point per group
    _analyse(toy, x, path, ratios=(0.5, 0.75))
    assert len(counted) == first + 5  # only the new ratio
    _analyse(toy, x, path, ratios=(0.5, 0.75))
    assert len(counted) == first + 5  # complete: nothing timed again
    assert all(len(p) == 2 for p in ap.read_record(path).latency.values())


def test_latency_added_to_a_file_measured_without_it(toy, x, tmp_path, counted):
    path = tmp_path / "s.json"
    ap.sensitivity(toy, x, RefEval(toy, x), ratios=RATIOS, sensitivities_file=path,
                   progress=False)
    assert ap.read_record(path).latency == {}
    evaluations = RefEval(toy, x)
    ap.sensitivity(toy, x, evaluations, ratios=RATIOS, sensitivities_file=path, progress=False,
                   latency=True)
    assert evaluations.calls == 0  # the losses were there: only latencies measured
    assert len(counted) == 10 and len(ap.read_record(path).latency) == 5


@pytest.mark.parametrize("change", [{"latency_batch": 2}, {"latency_threads": 2}])
def test_file_timed_in_another_setting_is_refused(toy, x, tmp_path, counted, change):
    path = tmp_path / "s.json"
    _analyse(toy, x, path, ratios=(0.5,), latency_threads=1)
    evaluations = RefEval(toy, x)
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.sensitivity(toy, x, evaluations, ratios=RATIOS, sensitivities_file=path,
                       progress=False, latency=True, **{"latency_threads": 1, **change})
    msg = assert_one_line(info)
    assert "another setting" in msg and ("batch" in msg or "threads" in msg)
    assert evaluations.calls == 0  # refused before any point was measured


def test_masked_evaluation_times_a_real_prune(x, tmp_path, counted):
    model = make_model("resnet18")
    before = snapshot(model)
    full = sum(p.numel() for p in model.parameters())
    sens = ap.sensitivity(model, x, RefEval(model, x), ratios=(0.5,), groups=["layer1.0.conv1",
                          "layer2.0.conv1"], evaluation="masked", progress=False, latency=True,
                          sensitivities_file=tmp_path / "s.json")
    assert len(counted) == 2 and all(n < full for n in counted)  # really smaller models
    assert set(sens.record.latency) == {"layer1.0.conv1", "layer2.0.conv1"}
    assert_same_state(model, before)


@pytest.mark.parametrize("bad", [dict(latency_device="tpu"), dict(latency_batch=0),
                                 dict(latency_threads=-1), dict(latency_batch=1.5)])
def test_bad_latency_options_are_one_line_errors(toy, x, bad):
    with pytest.raises(ap.ConfigError) as info:
        ap.sensitivity(toy, x, RefEval(toy, x), ratios=RATIOS, latency=True, progress=False,
                       **bad)
    assert_one_line(info)


_CLOCK = {"t": 0.0, "calls": 0}  # module level: the timer's deep copy of a model shares it


class _Clocked(nn.Module):
    """A model whose forward advances a fake clock by ``cost`` x the machine's load, which rises
    with every pass (a machine getting busier during the measurement)."""

    def __init__(self, cost):
        super().__init__()
        self.w, self.cost = nn.Parameter(torch.zeros(1)), cost

    def forward(self, x):
        _CLOCK["calls"] += 1
        _CLOCK["t"] += self.cost * (1 + 0.05 * _CLOCK["calls"])
        return x


def test_paired_timing_cancels_drift_of_the_machine_load(monkeypatch):
    monkeypatch.setitem(_CLOCK, "t", 0.0)
    monkeypatch.setitem(_CLOCK, "calls", 0)
    monkeypatch.setattr(latency_mod, "_clock", lambda: _CLOCK["t"])
    timer = PairedTimer(_Clocked(2e-3), torch.zeros(1, 3), rounds=7)
    # the pruned model costs half while the load triples over the run: timing all unpruned
    # passes, then all pruned ones, would make it look slower than that; pairing does not
    relative = timer.compare(_Clocked(1e-3))
    assert _CLOCK["calls"] > 40
    assert relative == pytest.approx(0.5, rel=0.01)
    assert timer.baseline_ms > 2.0


def test_merge_keeps_latencies_and_refuses_other_settings(toy, x, tmp_path, counted):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _analyse(toy, x, a, ratios=(0.25,), groups=["stem.0"])
    _analyse(toy, x, b, ratios=(0.5,), groups=["fuse.0"])
    out = tmp_path / "m.json"
    assert main(["merge", str(a), str(b), "-o", str(out)]) == 0
    merged = ap.read_record(out)
    assert set(merged.latency) == {"stem.0", "fuse.0"} and merged.extra["latency"]["baseline_ms"]
    data = json.loads(b.read_text())
    data["extra"]["latency"]["batch"] = 4
    b.write_text(json.dumps(data))
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "m2.json")]) == 2


def test_measure_latencies_side_file_for_a_given_table(toy, x, tmp_path, counted):
    table = {"stem.0": {0.25: 0.01, 0.5: 0.02}, "fuse.0": {0.5: 0.03}}
    side = tmp_path / "side.json"
    record = ap.measure_latencies(toy, x, table, path=side, progress=False)
    assert len(counted) == 3 and record.sensitivities == table
    assert ap.read_record(side).latency == record.latency
    ap.measure_latencies(toy, x, table, path=side, progress=False)
    assert len(counted) == 3  # reused
