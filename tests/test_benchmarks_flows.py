"""benchmarks/task_flows.py on tiny settings: the task flows prune for real, the control does
not, and the table reports each. Instance segmentation and segmentation run (instance segmentation
goes through the script's YOLO path that detection takes too; detection's own one-call flow is
tests/test_detection.py's ``flow`` fixture), which keeps the test at two thirds of the three."""
import importlib.util
from pathlib import Path

import pytest

from autoprune.engine.checkpoint import read_pruned_metadata, read_state_dict

from conftest import needs_fmnist

ROOT = Path(__file__).resolve().parents[1]
pytestmark = needs_fmnist


def test_task_flows_quick(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("task_flows", ROOT / "benchmarks" / "task_flows.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tasks = ["segmentation", "instance_segmentation"]
    rows = [row for task in tasks for row in bench.main(
        ["--quick", "--task", task, "--out", str(tmp_path), "--device", "cpu"])]
    assert [r["task"] for r in rows] == tasks
    for r in rows:
        assert r["flops"][1] < r["flops"][0] and r["params"][1] < r["params"][0]
        assert all(0 <= m <= 1 for m in (*r["metric_values"], r["control_metric"]))
    yolo = rows[1]
    assert yolo["flops"][1] / yolo["flops"][0] == pytest.approx(0.6, abs=0.05)  # 0.4
    assert yolo["metric"] == "map50_95_mask"
    for task in tasks:  # the control kept the base model's shapes
        # every training run keeps its model in baseline/ (control: trained, not pruned)
        best = {d: tmp_path / task / d / "baseline" / "best.pt" for d in ("base", "control")}
        shapes = [{k: v.shape for k, v in read_state_dict(path).items()} for path in best.values()]
        assert shapes[0] == shapes[1]
        assert not read_pruned_metadata(best["control"]).get("pruned")
    out = capsys.readouterr().out
    assert "| segmentation |" in out
    assert "| instance_segmentation | `pruned_flops=0.4` |" in out
