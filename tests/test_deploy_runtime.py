"""Speed where the model runs (issue 33), in the flow: the latency runtime is a setting, the report
shows ONNX Runtime's latency beside eager's whenever onnxruntime is installed, a model it cannot
run is a row of its own (not a crash), `autoprune export` prints the exported model's latency and
its difference from torch, and the analysis times the model as the task deploys it. No timing
threshold is asserted: these tests check what is timed and recorded, not how fast."""
from __future__ import annotations


import pytest
import torch

import autoprune as ap
from autoprune import classification as cls
from autoprune.cli import main
from conftest import ToyNet, assert_one_line, make_model

pytest.importorskip("onnxruntime")


class Images(torch.utils.data.Dataset):
    classes = ["0", "1", "2"]

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(i)), i % 3


def test_the_report_has_onnx_runtime_rows_beside_eager(tmp_path, report_in_onnxruntime):
    data = Images()
    r = cls.train(ToyNet(3), data, data, epochs=1, batch_size=4, input_size=32, progress=False,
                  save_dir=tmp_path / "run", sensitivities_file=tmp_path / "s.json",
                  ratios=(0.5,), pruned_flops=0.2)
    paired = r.report["latency_paired"]
    assert paired["onnxruntime"]["runtime"] == "onnxruntime"
    assert paired["onnxruntime"]["runtime_setting"]["providers"] == ["CPUExecutionProvider"]
    assert r.report["pruned"]["latency_onnxruntime_ms"] > 0
    assert "| CPU latency, ONNX Runtime |" in (tmp_path / "run" / "report.md").read_text()
    assert "CPU latency, ONNX Runtime" in (tmp_path / "run" / "report.csv").read_text()


@pytest.mark.parametrize("value, rows", [("torch", 1), ("torch,onnxruntime", 2), ("", 2),
                                          ("onnxruntime", None), ("torch,tensorrt", None)])
def test_report_runtimes_choose_the_rows(value, rows, monkeypatch):
    """$AUTOPRUNE_REPORT_RUNTIMES: both rows by default, "torch" leaves ONNX Runtime's out (no
    export, no session), anything else is a one-line error naming the two settings."""
    from autoprune.flow.report import compare_sides
    from autoprune.tasks import get_adapter

    monkeypatch.setenv("AUTOPRUNE_REPORT_RUNTIMES", value)
    adapter, model = get_adapter("classification", num_classes=3, input_size=32), ToyNet(3).eval()
    if rows is None:
        with pytest.raises(ap.ConfigError, match="must be 'torch' or 'torch,onnxruntime'") as e:
            compare_sides(adapter, model, model, {"top1": 0.5}, {"top1": 0.5})
        assert_one_line(e)
        return
    sides = compare_sides(adapter, model, model, {"top1": 0.5}, {"top1": 0.5})
    timed = [k for k in ("latency_cpu_ms", "latency_onnxruntime_ms") if sides["pruned"][k]]
    assert len(timed) == rows and (sides["latency_paired"]["onnxruntime"] is None) == (rows == 1)


class Odd(ToyNet):
    """A model ONNX Runtime cannot run: an FFT the exporter cannot write."""

    def forward(self, x):
        return super().forward(torch.fft.fft2(x).real)


def test_a_model_onnx_runtime_cannot_run_is_a_row_not_a_crash(tmp_path, report_in_onnxruntime):
    from autoprune.flow.report import compare_sides, to_markdown
    from autoprune.tasks import get_adapter

    adapter = get_adapter("classification", num_classes=3, input_size=32)
    model = Odd(3).eval()
    sides = compare_sides(adapter, model, model, {"top1": 0.5}, {"top1": 0.5})
    assert "error" in sides["latency_paired"]["onnxruntime"]
    assert sides["pruned"]["latency_onnxruntime_ms"] is None
    md = to_markdown({**sides, "flops_reduction": 0.0})
    assert "| CPU latency, ONNX Runtime | n/a | n/a |" in md


def test_a_deploy_runtime_rounds_channels_to_multiples_of_8_unless_told(tmp_path):
    from dataclasses import replace

    from autoprune.flow.config import FlowSettings, from_flat
    from autoprune.flow.run import check
    from autoprune.tasks.classification.adapter import ClassificationAdapter

    adapter = ClassificationAdapter(Images(), Images(), input_size=32)
    flow = from_flat(FlowSettings, dict(sensitivities_file=str(tmp_path / "s.json"),
                                        pruned_latency=0.3, latency_runtime="onnxruntime",
                                        save_dir=str(tmp_path)))
    run = check(adapter, flow)
    assert run.flow.round_to == 8 and run.targets.latency.timing.runtime == "onnxruntime"
    told = check(adapter, replace(flow, round_to=1))
    assert told.flow.round_to == 1
    with pytest.raises(ap.ConfigError, match="latency_runtime='tensorrt2' is not"):
        check(adapter, replace(flow, latency=replace(flow.latency, runtime="tensorrt2")))
    with pytest.raises(ap.ConfigError) as info:
        check(adapter, replace(flow, pruned_latency=None, pruned_flops=0.3))
    assert "latency_runtime='onnxruntime' is given without pruned_latency" in \
        assert_one_line(info)


def test_the_analysis_times_each_point_in_the_runtime_asked(tmp_path):
    """`autoprune sensitivity --latency --latency-runtime onnxruntime`: the points are timed in
    ONNX Runtime (recorded), and a later run asking for eager latencies refuses the table."""
    ckpt = ap.save_pruned(make_model("toy"), tmp_path / "c.pt", task="classification",
                          arch=None, build={"num_classes": 10}, input_size=32)
    from autoprune.engine.latency import latency_setting
    from autoprune.flow.checkpoints import load_model
    from autoprune.tasks import get_adapter

    adapter = get_adapter("classification", num_classes=10, input_size=32)
    model = load_model(ckpt, adapter, base_model=make_model("toy"))
    record = ap.read_record(_timed_file(tmp_path, model, adapter))
    assert record.extra["latency"]["runtime"] == "onnxruntime" and record.latency
    with pytest.raises(ap.SensitivityFileError, match="runtime 'onnxruntime' \\(asked: 'torch'\\)"):
        ap.ratios_by_latency(model, adapter.example_inputs(model), record, 0.3)
    assert latency_setting(adapter.example_inputs(model))["runtime"] == "torch"


def _timed_file(tmp_path, model, adapter):
    from autoprune.flow.sensitivities import get_sensitivities

    adapter.eval_set = Images()
    adapter.evaluate = lambda m: {"top1": 0.5 + 0.01 * sum(p.numel() for p in m.parameters())
                                  / 1e6}
    path = tmp_path / "s.json"
    get_sensitivities(adapter, model, path, arch=None, ratios=(0.5,), progress=False,
                      options={"latency": True, "latency_runtime": "onnxruntime",
                               "latency_threads": 1})
    return path


def test_export_prints_the_onnx_latency_and_its_difference_from_torch(tmp_path, capsys):
    base = ap.save_pruned(make_model("toy"), tmp_path / "base.pt", task="classification",
                          arch=None, build={"num_classes": 10}, input_size=32)
    assert main(["export", str(base), str(tmp_path / "m.onnx")]) == 2  # a custom model object
    capsys.readouterr()
    ckpt = ap.save_pruned(make_model("resnet18"), tmp_path / "r.pt", task="classification",
                          arch="timm/resnet18", build={"num_classes": 10}, input_size=32)
    assert main(["export", str(ckpt), str(tmp_path / "r.onnx"), "--baseline", str(ckpt)]) == 0
    out = capsys.readouterr().out
    assert "ONNX Runtime (CPU" in out and " -> " in out and "outputs differ from torch's by at " \
        "most" in out
    assert float(out.rsplit("at most ", 1)[1].split()[0]) < 1e-3
