"""benchmarks/task_flows.py on tiny settings: a task flow prunes for real, the control does not,
and the table reports it. Segmentation runs (a minute less than a YOLO task, whose 12 epochs the
YOLO tasks' own ``flow`` fixtures train: tests/test_detection.py, test_instance_segmentation.py);
the script's YOLO branch is the same one-call flow those fixtures run."""
import importlib.util
from pathlib import Path

import pytest

from autoprune.engine.checkpoint import read_pruned_metadata, read_state_dict

from conftest import needs_fmnist

ROOT = Path(__file__).resolve().parents[1]
pytestmark = needs_fmnist


def test_task_flows_quick(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("task_flows",
                                                  ROOT / "benchmarks" / "task_flows.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tasks = ["segmentation"]
    rows = bench.main(["--quick", "--task", "segmentation", "--out", str(tmp_path),
                       "--device", "cpu"])
    assert [r["task"] for r in rows] == tasks
    for r in rows:
        assert r["flops"][1] < r["flops"][0] and r["params"][1] < r["params"][0]
        assert all(0 <= m <= 1 for m in (*r["metric_values"], r["control_metric"]))
    assert rows[0]["flops"][1] / rows[0]["flops"][0] == pytest.approx(0.7, abs=0.05)  # 0.3
    assert rows[0]["metric"] == "miou"
    assert rows[0]["wall_s"] > 0 and rows[0]["latency_gpu_ms"] == [None, None]  # CPU run
    for task in tasks:  # the control kept the base model's shapes
        # every training run keeps its model in baseline/ (control: trained, not pruned)
        best = {d: tmp_path / task / d / "baseline" / "best.pt" for d in ("base", "control")}
        shapes = [{k: v.shape for k, v in read_state_dict(path).items()} for path in best.values()]
        assert shapes[0] == shapes[1]
        assert not read_pruned_metadata(best["control"]).get("pruned")
    out = capsys.readouterr().out
    assert "| segmentation |" in out
