"""The benchmark scripts run end to end on tiny settings (their figures come from full runs)."""
import re
from pathlib import Path

import pytest
import torch

from conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    return load_benchmark(name, name)


def test_equal_flops_accuracy_prunes_all_three_ways_to_the_same_flops(capsys):
    best = _script("equal_flops_accuracy").main(
        ["--epochs", "1", "--retrain-epochs", "1", "--train-images", "256", "--val-images", "64",
         "--ratios", "0.3,0.6", "--size", "32", "--arch", "resnet10t"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (sensitivity|uniform|tp-global) \| [\d.]+M \(-([\d.]+)%\) \| "
                      r"[\d.]+M \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [r[0] for r in rows] == ["sensitivity", "uniform", "tp-global"]
    for _, reduction, before, after in rows:
        assert float(reduction) == pytest.approx(50, abs=3)
        assert 0 <= float(before) <= 1 and 0 <= float(after) <= 1
    assert out.rstrip().splitlines()[-1] == f"best={best}"


def _true_class_probability(model, batches, *, device, topk=(1,)):
    """A continuous stand-in for evaluate_topk's top-1: the mean softmax probability of the true
    class. On 64 images one prediction flipped by float noise moves top-1 by 1/64 (a relative
    loss of 1/(64 x baseline), far above 1e-4); this metric moves by float noise only."""
    model.to(device).eval()
    total, seen = 0.0, 0
    with torch.no_grad():
        for inputs, targets in batches:
            probs = model(inputs.to(device)).softmax(1)
            total += probs.gather(1, targets.to(device)[:, None]).sum().item()
            seen += len(targets)
    return {"top1": total / seen}


def test_sensitivity_speed_prints_speedup_and_difference(capsys):
    script = _script("sensitivity_speed")
    script.evaluate_topk = _true_class_probability  # both paths, the reference and autoprune's
    script.main(["--val-images", "64", "--size", "32", "--ratios", "0.5", "--groups", "2",
                 "--train-images", "128", "--eval-batch", "16"])
    out = capsys.readouterr().out
    last = out.rstrip().splitlines()[-1]
    assert "64 PNG validation images at 32px in batches of 16," in out
    assert re.search(r"^autoprune adaptive \(loss target 0\.05\): [\d.]+ s \(speedup [\d.]+, "
                     r"\d+ images evaluated of 128, same allocation as PaddleSlim's table: "
                     r"(yes|no)\)$", out, re.M), out
    m = re.fullmatch(r"speedup=([\d.]+) max_abs_diff=([\d.e+-]+)", last)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) <= 1e-4


def test_retraining_compares_the_recipes_at_equal_flops_and_epochs(capsys):
    line = _script("retraining").main(
        ["--epochs", "1", "--retrain-epochs", "3", "--train-images", "64", "--val-images", "16",
         "--ratios", "0.5,0.8", "--size", "32", "--pruned-flops", "0.5",
         "--tasks", "classification", "--arch", "resnet10t"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| classification \| (plain|distill|steps|both) \| -([\d.]+)% \| "
                      r"([\d.]+) \|", out, re.M)
    assert [r[0] for r in rows] == ["plain", "distill", "steps", "both"]
    reductions = {float(r[1]) for r in rows}
    assert len(reductions) == 1 and reductions.pop() == pytest.approx(50, abs=5)
    assert "| classification | control (unpruned) | -0.0% |" in out
    assert out.rstrip().splitlines()[-1] == line
    m = re.fullmatch(r"plain=([\d.]+) distill=([\d.]+) steps=([\d.]+) both=([\d.]+) "
                     r"control=([\d.]+)", line)
    assert m and all(0 <= float(v) <= 1 for v in m.groups())


def test_probe_speed_compares_with_one_group_at_a_time(capsys):
    rows = _script("probe_speed").main(["--models", "resnet18@32,unet-resnet18@64"])
    out = capsys.readouterr().out
    assert [r["model"] for r in rows] == ["resnet18", "unet-resnet18"]
    assert all(r["same"] and r["groups"] >= 12 and r["together_s"] > 0 for r in rows)
    assert re.fullmatch(r"models=2 same=2 total_speedup=[\d.]+", out.rstrip().splitlines()[-1])
