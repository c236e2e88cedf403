"""benchmarks/latency_aware.py runs end to end on tiny settings, with timing replaced by FLOPs
ratios (deterministic: its figures come from real timings in full runs)."""
import math
import re

import pytest

from autoprune.engine.latency import PairedTimer
from autoprune.engine.store import read_record

from conftest import flops_ratio, load_benchmark, needs_fmnist


def _bench(name):
    return load_benchmark(name)


ROW = (r"^\| (latency-aware|flops|uniform) \| -([\d.]+)% \([\d.]+ ms\) \| "
       r"[\d.]+M \(-[\d.]+%\) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$")


def _check_rows(out, row, metric):
    """The three methods' rows of ``row`` printed, brought to the same measured latency, with
    the figures returned; the metric named in the header."""
    assert f"| {metric} before retraining | {metric} after 1 epoch(s) |" in out
    rows = re.findall(ROW, out, re.M)
    assert [r[0] for r in rows] == ["latency-aware", "flops", "uniform"]
    for method, reduction, loss, before, after in rows:
        figures = row["methods"][method]
        assert float(reduction) == pytest.approx(100 * row["achieved"], abs=3)
        assert float(loss) == pytest.approx(figures["table_loss"], abs=1e-4)
        assert float(before) == pytest.approx(figures["before"], abs=1e-4)
        assert float(after) == pytest.approx(figures["after"], abs=1e-4)
        assert 0 <= figures["before"] <= 1 and 0 <= figures["after"] <= 1
    assert abs(row["achieved"] - row["target"]) <= 0.03


@needs_fmnist
def test_latency_aware_benchmark_tiny(capsys, monkeypatch, tmp_path):
    """resnet18 through the classification adapter: the table, the rows and the summary, the two
    machine-read last lines, retraining on fewer images; a rerun with the same --work-dir reuses
    the base model and the table."""
    monkeypatch.setattr(PairedTimer, "compare", flops_ratio)
    bench = _bench("latency_aware")
    args = ["--tiny", "--models", "resnet18", "--ratios", "0.3,0.6,0.9",
            "--work-dir", str(tmp_path)]
    (row,) = bench.main([*args, "--targets", "0.3", "--retrain-images", "64"])
    out = capsys.readouterr().out
    _check_rows(out, row, "top1")
    assert "retrained 1 epoch(s) on 64 images" in out
    assert re.search(r"^\| resnet18 \| 32 \| -30% \| -\d+\.\d% \|", out, re.M), out
    before, after = out.rstrip().splitlines()[-2:]
    assert re.fullmatch(r"target=0\.3 achieved=0\.\d{3} aware_metric=[\d.]+ flops_metric=[\d.]+ "
                        r"uniform_metric=[\d.]+", before), before
    assert re.fullmatch(r"aware_retrained=[\d.]+ flops_retrained=[\d.]+ uniform_retrained=[\d.]+",
                        after), after
    assert f"aware_metric={row['methods']['latency-aware']['before']:.4f}" in before

    folder = tmp_path / "resnet18-32px-128img-1ep-seed0"  # named by what the base depends on
    base, sens = (folder / f for f in ("base/baseline/best.pt", "sens.json"))
    assert (folder / "base" / "finished").is_file()  # reused only once its training finished
    stamp, table = base.stat().st_mtime_ns, read_record(sens).sensitivities
    (again,) = bench.main([*args, "--targets", "0.2", "--retrain-epochs", "0"])
    assert base.stat().st_mtime_ns == stamp and read_record(sens).sensitivities == table
    assert again["target"] == 0.2 and math.isnan(again["methods"]["flops"]["after"])


def _params_ratio(self, candidate):
    """PairedTimer.compare with the parameter count standing in for the clock (deterministic,
    and instant where counting a YOLO's FLOPs takes a third of a second)."""
    self.base_rounds.append(10.0)
    count = lambda m: sum(p.numel() for p in m.parameters())
    return count(candidate) / count(self.base)


@needs_fmnist
def test_latency_aware_benchmark_detection_tiny(capsys, monkeypatch, tmp_path):
    """YOLOv8n through the detection adapter: scenes written, trained by Ultralytics, its table
    timed, the three allocations evaluated (mAP50-95) and retrained; a target out of the table's
    reach is reported as such and the run goes on. For time, the table holds the 8 widest of the
    59 groups (each point is a real prune and an Ultralytics validation): -28 % at most."""
    import autoprune.flow.sensitivities as flow_sens
    from autoprune.engine.groups import PruningGraph

    monkeypatch.setattr(PairedTimer, "compare", _params_ratio)
    measure = flow_sens.sensitivity

    def widest_groups(model, example_inputs, eval_fn, **kwargs):
        graph = PruningGraph(model, example_inputs, kwargs["ignored_layers"])
        widest = sorted(graph.groups, key=lambda g: g.channels)[-8:]
        return measure(model, example_inputs, eval_fn, groups=[g.name for g in widest], **kwargs)

    monkeypatch.setattr(flow_sens, "sensitivity", widest_groups)
    bench = _bench("latency_aware")
    rows = bench.main(["--tiny", "--models", "yolov8n", "--targets", "0.2,0.6",
                       "--work-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert [r["reachable"] for r in rows] == [True, False]
    _check_rows(out, rows[0], "map50_95")
    assert "pruned_latency=0.6 is not reachable with this table" in rows[1]["why"]
    assert re.search(r"^\| yolov8n \| 64 \| -60% \| unreachable \|", out, re.M), out
    assert (tmp_path / "yolov8n-64px-24img-12ep-seed0" / "retrain" / "0.2" / "uniform"
            / "best.pt").is_file()
    assert out.rstrip().splitlines()[-2].startswith("target=0.2 achieved=0.")


def _check_resnet18_at_32px(monkeypatch, *args: str) -> list[dict]:
    """latency_target_check.py on resnet18 at 32 px, FLOPs standing in for in-process timing."""
    monkeypatch.setattr(PairedTimer, "compare", flops_ratio)
    bench = _bench("latency_target_check")
    return bench.main(["--models", "resnet18", "--size", "32", *args])  # its own size: 128


def test_latency_target_check_remeasures_in_a_fresh_process(capsys, monkeypatch):
    """latency_target_check.py: the DEFAULT profile's points timed (here: FLOPs ratios), the
    allocation pruned and saved, and a child process reloading the checkpoint to time it for real
    (one: the median over several is the same code, and each costs a process start)."""
    rows = _check_resnet18_at_32px(monkeypatch, "--ratios", "0.4,0.8", "--target", "0.3",
                                   "--fresh-runs", "1")
    out = capsys.readouterr().out
    (row,) = rows
    assert abs(row["achieved"] - 0.3) <= 0.03  # the FLOPs stand-in for the in-process timing
    assert -1 < row["fresh"] < 1 and row["baseline_ms"] > 0 and row["pruned_ms"] > 0
    assert row["fresh_runs"] == [row["fresh"]]  # one new process (--fresh-runs 1)
    assert row["points"] > 0 and 0 < row["flops_removed"] < 1
    assert re.search(r"^resnet18 +32 +0\.300 ", out, re.M), out
    assert re.fullmatch(r"device=cpu batch=1 models=1 within=[01] target=0\.3 "
                        r"tolerance=0\.03",
                        out.rstrip().splitlines()[-1])


def test_latency_target_check_goes_on_after_an_unreachable_target(capsys, monkeypatch):
    """A target one model cannot reach on the device is that model's one-line row, and the
    check goes on (on the H100 the first model's refusal ended the run before yolov8n)."""
    rows = _check_resnet18_at_32px(monkeypatch, "--ratios", "0.2", "--target", "0.9",
                                   "--fresh-runs", "1")
    out = capsys.readouterr().out
    assert rows[0]["within"] is False and "not reachable" in rows[0]["refused"]
    assert re.search(r"^resnet18 +pruned_latency=0\.9 is not reachable", out, re.M), out
    assert out.rstrip().splitlines()[-1].startswith("device=cpu batch=1 models=1 within=0 ")
