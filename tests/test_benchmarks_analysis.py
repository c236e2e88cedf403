"""benchmarks/adaptive_replay.py (issue 41) at --quick: a base model trained, its full table
measured once with every point's per-image scores kept, then the real adaptive analysis replayed
against them per target; a second run measures nothing again and gives the same counts. And
benchmarks/analysis_cost.py's main path (full against adaptive analysis) on tiny settings."""
from __future__ import annotations

import argparse
import json
import re

import pytest
import torch

import autoprune
from autoprune.engine import adaptive as adaptive_module
from autoprune.engine import latency as latency_module
from autoprune.engine.latency import PairedTimer
from conftest import load_benchmark, needs_fmnist

pytestmark = needs_fmnist


def _bench():
    return load_benchmark("adaptive_replay", on_path=True)


def test_the_replayed_adaptive_analysis_counts_images_as_the_real_one(tmp_path, capsys,
                                                                       monkeypatch):
    bench = _bench()
    threads, real_compare = torch.get_num_threads(), PairedTimer.compare
    try:
        rows = bench.main(["--quick", "--out", str(tmp_path)])
        out = capsys.readouterr().out
        computed = []
        real_save = bench.ReplayEval.save
        monkeypatch.setattr(bench.ReplayEval, "save",
                            lambda self: (computed.append(self.computed), real_save(self)))
        again = bench.main(["--quick", "--out", str(tmp_path)])
        capsys.readouterr()
        retrained = bench.main(["--quick", "--out", str(tmp_path), "--retrain", "1"])
        printed = capsys.readouterr().out
        # --measure-only (what scripts/gpu/check.sh replay runs on a GPU): the full table and its
        # kept scores, no replay
        (tmp_path / "resnet18" / "full.json").unlink()
        measured = bench.main(["--quick", "--out", str(tmp_path), "--measure-only"])
        assert measured == [] and "min_fewer=" not in capsys.readouterr().out
        assert (tmp_path / "resnet18" / "full.json").is_file()
        # bound_levers.py reads the kept scores: every point decided under each bound
        levers = load_benchmark("bound_levers", on_path=True).main(
            ["--quick", "--replay", str(tmp_path), "--thresholds", "0.02,0.1"])
        printed_levers = capsys.readouterr().out
        # --points: only the points each named analysis measured, against its final threshold
        levers_points = load_benchmark("bound_levers", on_path=True).main(
            ["--quick", "--replay", str(tmp_path), "--points",
             "adaptive-flops=0.3.json,adaptive-loss=0.05.json"])
        printed_points = capsys.readouterr().out
        # eta_groups.py replays the flops=0.3 analysis again: the estimate's plan group by group
        eta = load_benchmark("eta_groups", on_path=True).main(
            ["--quick", "--replay", str(tmp_path), "--targets", "flops=0.3"])
        printed_eta = capsys.readouterr().out
        # eta_rows.py: the same replays on a copy of the folder (the original's analyses left
        # as they were), the images said against those evaluated, summed up
        kept_analysis = tmp_path / "resnet18" / "adaptive-flops=0.3.json"
        written = kept_analysis.stat().st_mtime_ns
        eta_rows = load_benchmark("eta_rows", on_path=True)
        checked = eta_rows.main(["--quick", "--runs", str(tmp_path)])
        printed_check = capsys.readouterr().out
        assert kept_analysis.stat().st_mtime_ns == written
        with pytest.raises(SystemExit, match="no replay folder m12 under"):
            eta_rows.main(["--runs", str(tmp_path), "--only", "m12"])
        with pytest.raises(SystemExit, match="no replay folder r224_2k_g4 under"):
            eta_rows.main(["--runs", str(tmp_path), "--only", "r224_2k_g4"])  # AT_224's
        named = eta_rows.main(["--runs", str(tmp_path.parent), "--only", "none", "--extra",
                               f"{tmp_path.name}: --quick --targets flops=0.3"])  # a folder
        capsys.readouterr()
        # adaptive_oracle.py reads the same folder: a FLOPs target as run, with its threshold
        # known from the start, and only the brackets at that threshold
        estimate = adaptive_module.Thresholds.estimate
        oracle = load_benchmark("adaptive_oracle", on_path=True).main(
            ["--quick", "--replay", str(tmp_path), "--targets", "flops=0.3"])
        printed_oracle = capsys.readouterr().out
        assert adaptive_module.Thresholds.estimate is estimate  # put back
        # isotonic_curves.py reads the same folder: both readings of each FLOPs target; the
        # allocations' scores go to a file of their own, the full table's stay as they were
        kept = torch.load(tmp_path / "resnet18" / "scores.pt", weights_only=True)
        curves = load_benchmark("isotonic_curves", on_path=True).main(
            ["--quick", "--replay", str(tmp_path)])
        printed_curves = capsys.readouterr().out
        assert torch.load(tmp_path / "resnet18" / "scores.pt", weights_only=True).keys() == \
            kept.keys()
        assert (tmp_path / "resnet18" / "allocation_scores.pt").is_file()
        # --latency: every grid point timed once (--latency-clock: a latency of 1 - 0.5 x the
        # FLOPs removed stands in for the clock), a latency target allocated by
        # ratios_by_latency on both tables; a rerun times no point again
        counted_saves = list(computed)
        monkeypatch.undo()
        timed_now, time_points = [], latency_module.measure_point_latencies
        monkeypatch.setattr(latency_module, "measure_point_latencies", lambda *a, **k: (
            timed_now.append(len(a[4])), time_points(*a, **k)))
        timing = ["--quick", "--out", str(tmp_path), "--latency", "--targets", "latency=0.1",
                  "--latency-clock", "0.5", "--latency-tolerance", "0.005"]
        timed = bench.main(timing)
        printed_latency = capsys.readouterr().out
        assert bench.main(timing) == timed and timed_now == [18, 0]
        capsys.readouterr()
        kept_timings = tmp_path / "resnet18" / "latency-clock-0.5.json"
        assert PairedTimer.compare is real_compare  # the clock is back
    finally:
        torch.set_num_threads(threads)
    assert [r["target"] for r in rows] == ["loss=0.05", "flops=0.3"]
    for r in rows:
        # 2 groups x 9 ratios x 128 images, plus the unpruned model's passes
        assert r["groups"] == 2 and r["images"] == 128
        assert 18 * 128 <= r["full_images"] <= 18 * 128 + 3 * 128
        assert 0 < r["adaptive_images"] <= r["full_images"] and 0 < r["points"] <= 18
        assert 0 <= r["decided_early"] <= r["points"]  # points left as intervals
        assert r["loss_full"] >= 0 and r["steps_apart"] >= 0 and r["halves_apart"] >= 0
        assert r["said_images"] > 0  # the estimate said before the points, in images
    # the second, third and fourth runs served every point from the kept scores
    assert counted_saves == [0, 0, 0]
    assert [{k: v for k, v in r.items()} for r in again] == rows
    for half in (0, 1):  # the full analysis on each half: 64 images a point, from the kept scores
        record = autoprune.read_record(tmp_path / "resnet18" / f"full-half{half}.json")
        assert record.extra["eval_images"] == 64 and len(record.sensitivities) == 2
    scores = torch.load(tmp_path / "resnet18" / "scores.pt", weights_only=True)
    assert len(scores) >= 18 and all(len(v) == 128 for v in scores.values())
    assert [(r["model"], r["threshold"]) for r in levers] == [("resnet18", 0.02),
                                                              ("resnet18", 0.1)]
    points = len(scores) - 1  # the unpruned model's scores are kept too
    for r in levers:  # each point decided at its first look (32 images) or later, at most 128
        images = r["images"]
        assert all(points * 32 <= n <= points * 128 for n in images.values()), images
        # an indifference zone only adds a way to stop: never more images than the bound now
        assert images["zone +-50 %"] <= images["zone +-25 %"] <= images["now"]
    assert re.search(r"^\| resnet18 \| 0\.02 \| [\d,]+ \| [\d,]+ \([\d.]+x\) \|",
                     printed_levers, re.M)
    assert "share in lowest 10 % / 20 % / 50 % margins" in printed_levers
    for r in levers_points:  # the replay's flops=0.3, then loss=0.05, analyses
        record = autoprune.read_record(tmp_path / "resnet18" / r["points"])
        assert r["threshold"] == record.extra["adaptive"]["thresholds"][-1]
        measured = sum(len(p) for p in record.sensitivities.values())
        assert all(measured * 32 <= n <= measured * 128 for n in r["images"].values())
    assert [r["points"] for r in levers_points] == ["adaptive-flops=0.3.json",
                                                    "adaptive-loss=0.05.json"]
    assert levers_points[1]["threshold"] == 0.05
    assert "| resnet18 (adaptive-flops=0.3.json) |" in printed_points
    [e] = eta  # the same analysis as the replay's: the same images said and evaluated
    assert (e["said"], e["real"]) == (rows[1]["said_images"], rows[1]["adaptive_images"])
    flops_record = autoprune.read_record(tmp_path / "resnet18" / "adaptive-flops=0.3.json")
    assert {g["group"]: set(g["measured"]) for g in e["groups"]} == {
        g: {float(r) for r in points} for g, points in flops_record.sensitivities.items()}
    assert all(g["top_pilot"] is not None and g["predicted"] for g in e["groups"])
    assert f"said {e['said']:,} images, evaluated {e['real']:,}" in printed_eta
    assert [(r["target"], r["said"], r["evaluated"]) for r in checked["rows"]] == \
        [(r["target"], r["said_images"], r["adaptive_images"]) for r in rows]
    assert [(r["set"], r["target"], r["said"]) for r in named["rows"]] == \
        [(tmp_path.name, "flops=0.3", rows[1]["said_images"])]
    summed = checked["summary"]
    assert summed["rows"] == 2 and summed["evaluated"] == sum(r["adaptive_images"] for r in rows)
    assert summed["largest"] >= summed["mean"] >= abs(summed["signed"])
    assert re.search(r"^2 rows: mean error [\d.]+%, largest \d+%, [012] outside \+-30 %, mean "
                     r"signed [+-][\d.]+%, [\d,]+ images evaluated$", printed_check, re.M)
    # each point's neighbour a ratio step below, within its group; none for a group's first
    neighbours = load_benchmark("bound_levers", on_path=True).neighbours
    tables = [torch.full((4,), float(i)) for i in range(18)]
    below = neighbours(tables, 9)
    assert sorted(below) == sorted(id(t) for i, t in enumerate(tables) if i % 9)
    assert all(below[id(tables[i])] is tables[i - 1] for i in range(18) if i % 9)
    assert neighbours(tables[:17], 9) is None
    [o] = oracle
    assert o["threshold_used"] == [o["threshold"]]  # the known threshold, every round
    assert o["as_run"] == rows[1]["adaptive_images"]  # the replay's flops=0.3 analysis
    assert 1 <= o["points"] <= 4 and o["full"] == rows[1]["full_images"]
    assert o["points"] * 32 <= o["bracket"] <= o["points"] * 128  # each decided, first look on
    assert 0 < o["known"] <= o["full"]
    assert re.search(r"^\| resnet18 \| flops=0\.3 \| [\d.]+ \([\d., ]+\) \| [\d,]+ \| [\d,]+ "
                     r"\([\d.]+x\) \|", printed_oracle, re.M), printed_oracle
    assert re.search(r"^\| resnet18 \(2, 128\) \| loss=0\.05 \| [\d,]+ \| [\d,]+ \| [\d.]+x \|",
                     out, re.M)
    assert out.rstrip().splitlines()[-1].startswith("min_fewer=")
    assert [(r["model"], r["target"]) for r in curves] == [("resnet18", "flops=0.3")]
    for label in ("running max", "isotonic"):
        figures = curves[0][label]
        assert figures["steps_apart"] >= 0 and figures["halves_apart"] >= 0
        assert -1 <= figures["lost_full"] <= 1 and -1 <= figures["lost_held_out"] <= 1
    assert re.search(r"^\| resnet18 \| flops=0\.3 \| [\d.]+ / [\d.]+ \|", printed_curves, re.M)
    assert printed_curves.rstrip().splitlines()[-1].startswith("max_steps_running_max=")
    # --latency: each table's allocation lands on the target as measured (here: as the clock
    # reads FLOPs, so it removes twice the target's FLOPs), from every full-table point's timing
    full_table = autoprune.read_record(tmp_path / "resnet18" / "full.json").sensitivities
    timed_points = autoprune.read_record(kept_timings).latency
    assert {g: set(p) for g, p in timed_points.items()} == \
        {g: set(p) for g, p in full_table.items()}
    assert [r["target"] for r in timed] == ["latency=0.1"]
    for which in ("full", "adaptive"):
        landed = timed[0]["latency"][which]
        assert abs(landed["achieved"] - 0.1) <= 0.005, landed
        assert abs(landed["flops_removed"] - 2 * landed["achieved"]) <= 0.01, landed
    assert re.search(r"^resnet18 latency=0\.1: measured -\d+\.\d% / -\d+\.\d% \((greedy|"
                     r"threshold) / (greedy|threshold)\), FLOPs removed [\d.]+% / [\d.]+%, the "
                     r"analysis's band of FLOPs goals 10%-14%$", printed_latency, re.M), \
        printed_latency
    # --retrain 1: both allocations of each target pruned and trained, their metrics printed
    for r in retrained:
        full, ours = r["retrained"]["full"], r["retrained"]["adaptive"]
        assert 0 <= full <= 1 and 0 <= ours <= 1
        assert (tmp_path / "resnet18" / f"retrain-{r['target']}-adaptive" / "metric.json").is_file()
        assert f"| {full:.4f} / {ours:.4f} ({100 * (ours - full):+.2f}) |" in printed


def test_a_kept_retrained_metric_is_read_back_only_for_the_same_allocation(tmp_path):
    """``--reuse`` reads a retrained metric back only when it was trained from the same ratios
    and epochs: a planner that changes an allocation gets that allocation retrained, not the
    old one's metric reported under it."""
    cost = load_benchmark("analysis_cost")
    cost.REUSE = True

    class Trained(Exception):
        pass

    class Adapter:
        def example_inputs(self, model):
            return torch.zeros(1, 3, 8, 8)

        def ignored_layers(self, model):
            return []

        def fit(self, model, epochs, out):
            raise Trained

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 4, 3))
    (tmp_path / "metric.json").write_text('{"metric": 0.5, "ratios": {"0": 0.5}, "epochs": 2}')
    assert cost.retrain(Adapter(), model, {"0": 0.5}, 2, tmp_path) == 0.5
    for ratios, epochs in (({"0": 0.25}, 2), ({"0": 0.5}, 3)):
        with pytest.raises(Trained):
            cost.retrain(Adapter(), model, ratios, epochs, tmp_path)
    with pytest.raises(Trained):  # another seed (--retrain-seeds) is trained, not read back
        cost.retrain(Adapter(), model, {"0": 0.5}, 2, tmp_path, seed=1)
    # --retrain-seeds 3: both allocations also with seeds 1 and 2, each with its own seed
    seeds = []

    class Seeded(Adapter):
        seed, metric = None, "top1"

        def fit(self, model, epochs, out):
            seeds.append(self.seed)
            out.mkdir(parents=True)  # as a real fit writes its checkpoints there
            return model

        def evaluate(self, model):
            return {"top1": 0.5 + 0.01 * self.seed}

    cost.REUSE = False
    got = {"full": {"ratios": {"0": 0.5}}, "adaptive": {"ratios": {"0": 0.25}}}
    args = argparse.Namespace(retrain_epochs=1, retrain_seeds=3)
    runs = cost.retrained_pair("m", "loss", got, Seeded, model, args, tmp_path)
    assert seeds == [0, 1, 2, 0, 1, 2] and runs["seeds"]["full"] == [0.5, 0.51, 0.52]
    assert runs["full"] == runs["adaptive"] == 0.5
    assert cost.retrained_text(runs) == \
        "0.5000 / 0.5000; 3 seeds: mean 0.5100 / 0.5100, spread 0.0200 / 0.0200"


def test_the_cost_benchmark_runs_its_full_and_adaptive_analyses_and_prints_the_tables(
        tmp_path, capsys):
    """analysis_cost.py's main path on tiny settings: a base model, the full analysis, an
    adaptive one per target (-50 % FLOPs is out of reach of two groups: said on its line and in
    the table, the run goes on), the table, the ETA lines and results.json; --reuse then reads
    every analysis back instead of measuring it again."""
    cost = load_benchmark("analysis_cost")
    args = ["--models", "resnet18", "--targets", "loss,flops", "--size", "32", "--val-images",
            "128", "--train-images", "128", "--base-epochs", "1", "--groups", "2",
            "--retrain", "none", "--paddleslim", "none", "--no-growth", "--out", str(tmp_path)]
    threads = torch.get_num_threads()
    try:
        results = cost.main(args)
        out = capsys.readouterr().out
        again = cost.main([*args, "--reuse"])
        reread = capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)
        cost.REUSE = False
    (row,) = results["models"]
    full, loss, flops = row["full"], row["targets"]["loss"], row["targets"]["flops"]
    assert row["groups"] == 2 and row["images_per_point"] == 128
    assert 18 * 128 <= full["images"] <= 23 * 128  # plus a few passes of the unpruned model
    # (how many fewer depends on a barely trained model's curves: not asserted; its pilot
    # may add up to a step a group)
    assert 0 < loss["run"]["images"] <= full["images"] + 2 * 128
    assert loss["saving"] == pytest.approx(full["images"] / loss["run"]["images"])
    assert loss["steps"] == cost.steps_apart(loss["full"]["ratios"], loss["adaptive"]["ratios"])
    assert loss["full"]["loss"] <= 2 * 0.05 + 1e-9  # each group's ratio within the tolerance
    assert "not reachable" in flops["error"] and "steps" not in flops
    assert re.search(r"^resnet18 flops: [\d,]+ images .*; no allocation: .*not reachable", out,
                     re.M)
    assert re.search(r"^\| resnet18 \(2 groups, 128 img\) \| loss \| [\d,]+ \| [\d,]+ \| "
                     r"[\d.]+x \|", out, re.M)
    assert "| no allocation (its line above says why) |" in out
    assert re.search(r"^  resnet18 loss: ETA \d+ s, took \d+ s$", out, re.M)
    assert out.rstrip().splitlines()[-1].startswith("min_saving=")
    kept = json.loads((tmp_path / "results.json").read_text())
    assert kept["models"][0]["targets"]["loss"]["run"]["images"] == loss["run"]["images"]
    # --reuse: the same figures, and no analysis said its cost again (nothing was measured)
    drop = lambda run: {k: v for k, v in run.items() if k != "wall"}  # reread: points' wall
    assert drop(again["models"][0]["targets"]["loss"]["run"]) == drop(loss["run"])
    assert again["models"][0]["full"]["images"] == full["images"]
    assert "analysis cost:" not in reread
