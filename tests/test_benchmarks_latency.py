"""benchmarks/latency_aware.py runs end to end on tiny settings, with timing replaced by FLOPs
ratios (deterministic: its figures come from real timings in full runs)."""
import importlib.util
import re
from pathlib import Path

import pytest

from autoprune.engine.latency import PairedTimer
from autoprune.engine.measure import count_flops

from conftest import needs_fmnist

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _flops_ratio(self, candidate):
    """PairedTimer.compare with FLOPs standing in for the clock (deterministic)."""
    self.base_rounds.append(10.0)
    return count_flops(candidate, self.inputs) / count_flops(self.base, self.inputs)


@needs_fmnist
def test_latency_aware_benchmark_tiny(capsys, monkeypatch):
    monkeypatch.setattr(PairedTimer, "compare", _flops_ratio)
    spec = importlib.util.spec_from_file_location("bench_latency_aware",
                                                  BENCH / "latency_aware.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--arch", "resnet18", "--epochs", "1", "--train-images", "128",
                         "--val-images", "32", "--size", "32", "--ratios", "0.3,0.6,0.9",
                         "--pruned-latency", "0.3", "--retrain-epochs", "1"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (latency-aware|flops|uniform) \| -([\d.]+)% \([\d.]+ ms\) \| "
                      r"[\d.]+M \(-[\d.]+%\) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [r[0] for r in rows] == ["latency-aware", "flops", "uniform"]
    for method, reduction, top1, retrained in rows:  # all brought to the same measured latency
        assert float(reduction) == pytest.approx(100 * result["achieved"], abs=3)
        assert 0 <= float(top1) <= 1 and 0 <= float(retrained) <= 1
        assert float(retrained) == pytest.approx(result["retrained"][method], abs=1e-4)
    assert abs(result["achieved"] - 0.3) <= 0.03
    before, after = out.rstrip().splitlines()[-2:]
    assert re.fullmatch(r"target=0\.3 achieved=0\.\d{3} aware_metric=[\d.]+ flops_metric=[\d.]+ "
                        r"uniform_metric=[\d.]+", before), before
    assert re.fullmatch(r"aware_retrained=[\d.]+ flops_retrained=[\d.]+ uniform_retrained=[\d.]+",
                        after), after


def test_latency_target_check_remeasures_in_a_fresh_process(capsys, monkeypatch):
    """latency_target_check.py: the DEFAULT profile's points timed (here: FLOPs ratios), the
    allocation pruned and saved, and a child process reloading the checkpoint to time it for real."""
    monkeypatch.setattr(PairedTimer, "compare", _flops_ratio)
    spec = importlib.util.spec_from_file_location("bench_latency_check",
                                                  BENCH / "latency_target_check.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    task, arch, _, kwargs = bench.MODELS["resnet18"]
    monkeypatch.setitem(bench.MODELS, "resnet18", (task, arch, 32, kwargs))
    rows = bench.main(["--models", "resnet18", "--ratios", "0.4,0.8", "--target", "0.3",
                       "--fresh-runs", "2"])
    out = capsys.readouterr().out
    (row,) = rows
    assert abs(row["achieved"] - 0.3) <= 0.03  # the FLOPs stand-in for the in-process timing
    assert -1 < row["fresh"] < 1 and row["baseline_ms"] > 0 and row["pruned_ms"] > 0
    assert len(row["fresh_runs"]) == 2 and row["fresh"] in row["fresh_runs"]  # two processes
    assert row["points"] > 0 and 0 < row["flops_removed"] < 1
    assert re.search(r"^resnet18 +32 +0\.300 ", out, re.M), out
    assert re.fullmatch(r"models=1 within=[01] target=0\.3 tolerance=0\.03",
                        out.rstrip().splitlines()[-1])
