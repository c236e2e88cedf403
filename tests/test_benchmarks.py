"""The benchmark scripts run end to end on tiny settings (their figures come from full runs)."""
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_equal_flops_accuracy_prunes_all_three_ways_to_the_same_flops(capsys):
    best = _script("equal_flops_accuracy").main(
        ["--epochs", "1", "--retrain-epochs", "1", "--train-images", "256", "--val-images", "64",
         "--ratios", "0.3,0.6", "--size", "32"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (sensitivity|uniform|tp-global) \| [\d.]+M \(-([\d.]+)%\) \| "
                      r"[\d.]+M \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [r[0] for r in rows] == ["sensitivity", "uniform", "tp-global"]
    for _, reduction, before, after in rows:
        assert float(reduction) == pytest.approx(50, abs=3)
        assert 0 <= float(before) <= 1 and 0 <= float(after) <= 1
    assert out.rstrip().splitlines()[-1] == f"best={best}"


def test_sensitivity_speed_prints_speedup_and_difference(capsys):
    _script("sensitivity_speed").main(["--val-images", "64", "--size", "32", "--ratios", "0.5",
                                       "--groups", "2", "--train-images", "128"])
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    m = re.fullmatch(r"speedup=([\d.]+) max_abs_diff=([\d.e+-]+)", last)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) <= 1e-4
