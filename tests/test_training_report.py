"""The shared training loop learns; top-k evaluation; report tables."""
import importlib.util
import json

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from autoprune.flow.report import to_console, to_csv, to_markdown, write_reports
from autoprune.flow.training import FitConfig, evaluate_topk, fit, warmup_cosine


def _separable_data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return TensorDataset(x, y)


def test_fit_learns_and_evaluates():
    torch.manual_seed(0)
    data = _separable_data()
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    before = evaluate_topk(model, loader, device=torch.device("cpu"), topk=(1,))["top1"]
    losses = fit(model, loader, FitConfig(epochs=8, lr=0.1, warmup_epochs=1, progress=False),
                 device=torch.device("cpu"))
    after = evaluate_topk(model, loader, device=torch.device("cpu"), topk=(1, 3))
    assert losses[-1] < losses[0]
    assert after["top1"] > max(before, 0.85)
    assert after["top3"] >= after["top1"]


def test_fit_stops_on_nan_loss():
    model = nn.Linear(8, 4)
    loader = DataLoader(_separable_data(64), batch_size=32)
    with pytest.raises(FloatingPointError, match="lower the learning rate"):
        fit(model, loader, FitConfig(epochs=1, lr=1e30, progress=False), device=torch.device("cpu"),
            loss_fn=lambda out, y: out.sum() * float("nan"))


def test_evaluate_empty_data_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        evaluate_topk(nn.Linear(8, 4), [], device=torch.device("cpu"))


def test_warmup_cosine_schedule():
    assert warmup_cosine(0, 100, 10) == pytest.approx(0.1)
    assert warmup_cosine(10, 100, 10) == pytest.approx(1.0)
    assert warmup_cosine(100, 100, 10) == pytest.approx(0.0)


def test_reports(tmp_path):
    m = lambda p, f, acc: {"params": p, "flops": f, "size_mb": p * 4e-6, "metrics": {"top1": acc},
                           "latency_cpu_ms": f / 1e7, "latency_gpu_ms": None}
    report = {"task": "classification", "baseline": m(1_000_000, 2e8, 0.9),
              "pruned": m(500_000, 1e8, 0.88), "flops_reduction": 0.5}
    text = to_console(report)
    assert "-50.0 %" in text and "-0.0200" in text and "GPU latency" not in text
    assert to_markdown(report).count("\n") == 2 + 5
    assert to_csv(report).splitlines()[0] == "metric,baseline,pruned,change"
    paths = write_reports(report, tmp_path / "out")
    assert json.loads(paths["json"].read_text())["flops_reduction"] == 0.5


def test_report_times_both_sides_in_pairs_and_shows_the_spread(monkeypatch,
                                                              report_in_onnxruntime):
    """Both latencies of a report come from one paired measurement (no separate timing of each
    side minutes apart), and the table shows the spread over the paired rounds."""
    import autoprune.flow.report as report_mod
    from autoprune.engine.latency import PairedTimer
    from autoprune.engine.measure import count_flops
    from autoprune.tasks import get_adapter

    calls = []

    def compare(self, candidate):  # FLOPs ratio stands in for the clock; spread 0.48..0.52
        calls.append(candidate)
        self.base_rounds.append(10.0)
        relative = count_flops(candidate, self.inputs) / count_flops(self.base, self.inputs)
        self.last_ratios = [relative - 0.02, relative, relative + 0.02]
        return relative

    monkeypatch.setattr(PairedTimer, "compare", compare)
    monkeypatch.setattr(report_mod.torch.cuda, "is_available", lambda: False)
    torch.manual_seed(0)
    wide = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3))
    narrow = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 16, 3))
    adapter = get_adapter("classification", num_classes=10, input_size=32)
    sides = report_mod.compare_sides(adapter, wide, narrow, {"top1": 0.9}, {"top1": 0.8})
    # one paired measurement for both columns (and one in ONNX Runtime when it is installed)
    ort = importlib.util.find_spec("onnxruntime") is not None
    assert len(calls) == 1 + ort
    if ort:
        assert sides["latency_paired"]["onnxruntime"]["runtime"] == "onnxruntime"
    paired = sides["latency_paired"]["cpu"]
    assert sides["baseline"]["latency_cpu_ms"] == pytest.approx(10.0)
    assert sides["pruned"]["latency_cpu_ms"] == pytest.approx(10.0 * (1 - paired["reduction"]))
    assert paired["threads"] == torch.get_num_threads() and paired["device"] == "cpu"
    relative = 1 - paired["reduction"]
    assert paired["reduction_range"] == pytest.approx([1 - relative - 0.02, 1 - relative + 0.02])
    report = {"task": "classification", **sides, "flops_reduction": 0.5}
    change = (relative - 1) * 100
    row = next(line for line in to_console(report).splitlines() if line.startswith("CPU latency"))
    assert f"{change:+.1f} % ({change - 2:+.1f} to {change + 2:+.1f})" in row, row


def test_the_sensitivity_plot_leaves_the_users_matplotlib_alone(tmp_path):
    """sensitivity.png is drawn on a Figure of its own: the backend the user chose (it was
    switched to Agg by every run) and pyplot's open figures stay as they were; the PNG is whole."""
    import subprocess
    import sys

    code = f"""
import matplotlib
matplotlib.use("svg")
import matplotlib.pyplot as plt
mine = plt.figure()
from autoprune.flow.plots import plot_sensitivities
path = plot_sensitivities({{"a": {{0.1: 0.0, 0.5: 0.2}}, "b": {{0.1: 0.01, 0.5: 0.4}}}},
                          {str(tmp_path / "s.png")!r}, threshold=0.05)
print(matplotlib.get_backend(), plt.get_fignums(),
      open(path, "rb").read(8) == b"\\x89PNG\\r\\n\\x1a\\n")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["svg", "[1]", "True"]
