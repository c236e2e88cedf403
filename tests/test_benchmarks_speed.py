"""The speed benchmarks run end to end on the tiniest settings and print their tables and last
lines (the figures themselves are not checked: they are timings on whatever machine runs this)."""
import math
import re

import pytest
import torch.distributed as dist

from conftest import load_benchmark, needs_fmnist



def _load(name: str):
    return load_benchmark(name)


def _table_rows(out: str) -> list[list[str]]:
    lines = [ln for ln in out.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[1:]]  # no header


def test_latency_vs_flops_tiny(capsys):
    bench = _load("latency_vs_flops")
    rows = bench.main(["--quick", "--tasks", "classification", "--models", "resnet18",
                       "--targets", "0.5", "--round-to", "none,8", "--runs", "2", "--warmup", "1",
                       "--size", "32", "--device", "cpu"])
    out = capsys.readouterr().out
    assert len(rows) == 2 and [r["round_to"] for r in rows] == [None, 8]
    for r in rows:
        assert abs(r["flops_red"] - 0.5) < 0.05  # uniform ratios found for the target
        assert r["params_after"] < r["params_before"]
        assert r["cpu_before"] > 0 and r["cpu_after"] > 0
        assert math.isclose(r["cpu_eff"], r["cpu_speedup"] / r["flops_x"])
    table = _table_rows(out)
    assert len(table) == 2
    assert table[0][:6] == ["classification", "resnet18", "32", "-", "0.5", "1"]
    assert table[1][3] == "8" and table[1][11].endswith("x")
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"rows=2 mean_cpu_eff=\d+\.\d{3}", last), last
    # each row's times printed as measured (a run stopped at its time limit keeps them)
    assert re.search(r"^  round_to=8 target=0\.5: ratio [\d.]+, FLOPs -[\d.]+%; batch 1 cpu "
                     r"[\d.]+ -> [\d.]+ ms \([\d.]+x\) \(", out, re.M), out


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                    reason="torch.distributed with gloo is not available")
@needs_fmnist
def test_distributed_speed_tiny(capsys):
    bench = _load("distributed_speed")
    result = bench.main(["--quick", "--model", "resnet10t", "--train-images", "128", "--limit",
                         "32", "--ratios", "0.5", "--configs", "1x1,2x1", "--timeout", "300"])
    out = capsys.readouterr().out
    assert "on 128 images at 32 px" in out and "ratios 0.5, 32 validation images" in out
    assert result["max_abs_diff"] < 1e-6  # 2 ranks measure the same numbers as 1 process
    assert set(result["walls"]) == {(1, 1), (2, 1)}
    table = _table_rows(out)
    assert [row[0] for row in table] == ["1 x 1", "2 x 1"]
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"speedup_2proc=\d+\.\d{2} max_abs_diff=\d\.\d{2}e[+-]\d{2}", last), last
