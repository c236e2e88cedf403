"""benchmarks/task_flows.py on tiny settings: every task flow prunes for real, the control does
not, and the table reports each."""
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
    rows = bench.main(["--quick", "--out", str(tmp_path), "--device", "cpu"])
    tasks = ["detection", "segmentation", "instance_segmentation"]
    assert [r["task"] for r in rows] == tasks
    for r in rows:
        assert r["flops"][1] < r["flops"][0] and r["params"][1] < r["params"][0]
        assert all(0 <= m <= 1 for m in (*r["metric_values"], r["control_metric"]))
    for yolo in (rows[0], rows[2]):
        assert yolo["flops"][1] / yolo["flops"][0] == pytest.approx(0.6, abs=0.05)  # 0.4
    assert rows[2]["metric"] == "map50_95_mask"
    for task in tasks:  # the control kept the base model's shapes
        # every training run keeps its model in baseline/ (control: trained, not pruned)
        best = {d: tmp_path / task / d / "baseline" / "best.pt" for d in ("base", "control")}
        shapes = [{k: v.shape for k, v in read_state_dict(path).items()} for path in best.values()]
        assert shapes[0] == shapes[1]
        assert not read_pruned_metadata(best["control"]).get("pruned")
    out = capsys.readouterr().out
    assert "| detection | `pruned_flops=0.4` |" in out and "| segmentation |" in out
    assert "| instance_segmentation | `pruned_flops=0.4` |" in out
