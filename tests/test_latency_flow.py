"""pruned_latency= in the task APIs, the CLI and the report. Timing is replaced by a deterministic
stand-in (FLOPs kept over FLOPs of the unpruned model), so these tests check the plumbing, never the
machine's load; tests/test_latency.py times real models."""
from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

import autoprune
from autoprune import classification as cls
from autoprune.cli import main
from autoprune.engine.latency import PairedTimer
from autoprune.engine.measure import count_flops
from autoprune.flow.report import target_rows, to_console, to_csv, to_markdown

from conftest import needs_fmnist

SMALL = dict(epochs=1, batch_size=32, input_size=32, train_limit=160, eval_limit=60,
             progress=False)
RATIOS = (0.3, 0.6, 0.9)



@pytest.fixture
def timing(monkeypatch):
    """PairedTimer.compare: the candidate's FLOPs over the unpruned model's, times
    ``timing["scale"]``; counts its calls."""
    state = {"calls": 0, "scale": 1.0}

    def compare(self, candidate):
        state["calls"] += 1
        self.base_rounds.append(10.0)
        if id(self) not in state:  # the unpruned model's FLOPs, counted once per timer
            state[id(self)] = count_flops(self.base, self.inputs)
        relative = count_flops(candidate, self.inputs.to(next(candidate.parameters()).device)) \
            / state[id(self)]
        return min(1.0, relative * state["scale"])

    monkeypatch.setattr(PairedTimer, "compare", compare)
    return state


@pytest.fixture(scope="module")
def base_ckpt(tmp_path_factory):
    """A resnet18 trained for two epochs on 320 Fashion-MNIST images (top-1 well above 0)."""
    out = tmp_path_factory.mktemp("base")
    return cls.train("resnet18", "fashion-mnist", save_dir=out, warmup_epochs=0,
                     **{**SMALL, "epochs": 2, "train_limit": 320}).baseline_path


@needs_fmnist
def test_train_to_a_latency_target(base_ckpt, tmp_path, timing):
    sens = tmp_path / "s.json"
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", ratios=RATIOS,
                  pretrain_weights=base_ckpt, sensitivities_file=sens, pruned_latency=0.4,
                  latency_threads=1, **SMALL)
    record = autoprune.read_record(sens)  # the analysis timed its points by itself
    assert record.extra["latency"]["threads"] == 1 and record.extra["latency"]["device"] == "cpu"
    assert set(record.latency) == set(record.sensitivities)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["target"] == {"kind": "latency", "value": 0.4, "device": "cpu", "threads": 1,
                                "batch": 1, "runtime": "torch", "precision": "fp32"}
    assert report["latency_reduction"] == pytest.approx(0.4, abs=0.03)
    assert report["latency_allocation"]["achieved"] == pytest.approx(0.4, abs=0.03)
    assert report["latency_measured"]["input_size"] == [1, 3, 32, 32]
    assert report["ratios"] == r.ratios and r.ratios
    md = (tmp_path / "run" / "report.md").read_text()
    assert "| target | asked | achieved |" in md and "| 40.0 % |" in md
    assert (tmp_path / "run" / "latency_ratios.json").is_file()

    # resumed: the ratios chosen before are kept, even where timing would now choose others
    timing["scale"] = 0.5
    again = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", ratios=RATIOS,
                      pretrain_weights=base_ckpt, sensitivities_file=sens, pruned_latency=0.4,
                      latency_threads=1, resume=True, **SMALL)
    assert again.ratios == r.ratios


@needs_fmnist
def test_loss_cap_with_a_latency_target(base_ckpt, tmp_path, timing):
    sens = tmp_path / "s.json"
    cap = 0.3
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run", ratios=RATIOS,
                  pretrain_weights=base_ckpt, sensitivities_file=sens, pruned_latency=0.2,
                  eval_metric_loss=cap, **SMALL)
    assert r.report["target"]["max_loss_per_group"] == cap
    table = autoprune.load_sensitivities(sens)
    for group, ratio in r.ratios.items():
        # a chosen ratio lies between timed points whose (non-decreasing) losses are within the cap
        upper = min(q for q in table[group] if q >= ratio - 1e-9)
        assert max(v for q, v in table[group].items() if q <= upper) <= cap


@needs_fmnist
def test_default_profile_timed_into_a_side_file(base_ckpt, tmp_path, timing):
    r = cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run",
                  pretrain_weights=base_ckpt, sensitivities_file="DEFAULT", pruned_latency=0.3,
                  **SMALL)
    side = tmp_path / "run" / "sensitivities_latency.json"
    profile = autoprune.read_record(r.sensitivities_path)
    timed = autoprune.read_record(side)
    assert timed.sensitivities == profile.sensitivities  # the profile's losses
    assert {g: set(p) for g, p in timed.latency.items()} == \
        {g: set(p) for g, p in profile.sensitivities.items()}
    assert r.report["latency_reduction"] == pytest.approx(0.3, abs=0.03)
    first = timing["calls"]
    cls.train("resnet18", "fashion-mnist", save_dir=tmp_path / "run",
              pretrain_weights=base_ckpt, sensitivities_file="DEFAULT", pruned_latency=0.3,
              **SMALL)
    points = sum(len(p) for p in profile.sensitivities.values())
    assert timing["calls"] - first < points  # the side file was reused: no point timed again


@pytest.mark.parametrize("kwargs,match", [
    (dict(pruned_latency=0.4, pruned_flops=0.4), "both given"),
    (dict(pruned_latency=1.5), "outside"),
    (dict(pruned_latency=0.4, latency_device="tpu"), "latency_device"),
    (dict(pruned_latency=0.4, latency_batch=0), "latency_batch"),
    (dict(latency_device="cuda"), "without pruned_latency"),
])
def test_bad_latency_settings_refused_before_training(tmp_path, kwargs, match):
    with pytest.raises(autoprune.ConfigError, match=match) as info:
        cls.train("resnet18", "fashion-mnist", save_dir=tmp_path, sensitivities_file=tmp_path /
                  "s.json", **kwargs, **SMALL)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "baseline").exists()


@pytest.mark.parametrize("target", ["pruned_latency", "pruned_flops"])
def test_a_latency_or_flops_target_needs_a_sensitivity_file(tmp_path, target):
    """Without sensitivities_file the flow only trains: a FLOPs target was trained and not
    pruned, and nothing said so (found when the GPU test asked for one)."""
    with pytest.raises(autoprune.ConfigError, match=f"^{target} needs sensitivities_file"):
        cls.train("resnet18", "fashion-mnist", save_dir=tmp_path, **{target: 0.4}, **SMALL)
    assert not (tmp_path / "baseline").exists()


@pytest.mark.parametrize("task", ["classification", "detection", "segmentation"])
def test_every_task_takes_the_latency_settings(task):
    import inspect
    params = inspect.signature(getattr(autoprune, task).train).parameters
    assert {"pruned_latency", "latency_device", "latency_threads", "latency_batch"} <= set(params)
    assert params["latency_device"].default == "cpu" and params["latency_batch"].default == 1


@needs_fmnist
def test_cli_sensitivity_latency_prune_and_yaml(base_ckpt, tmp_path, capsys, timing):
    sens = tmp_path / "s.json"
    assert main(["sensitivity", str(base_ckpt), "fashion-mnist", str(sens), "--ratios",
                 "0.3,0.6,0.9", "--limit", "40", "--latency", "--latency-threads", "1"]) == 0
    record = autoprune.read_record(sens)
    assert record.latency and record.extra["latency"]["threads"] == 1
    pruned = tmp_path / "pruned.pt"
    assert main(["prune", str(base_ckpt), str(sens), str(pruned), "--pruned-latency", "0.3",
                 "--latency-threads", "1"]) == 0
    assert "latency -" in capsys.readouterr().out
    assert main(["prune", str(base_ckpt), str(sens), str(tmp_path / "p2.pt"),
                 "--pruned-latency", "0.3", "--latency-threads", "2"]) == 2
    assert "another setting" in capsys.readouterr().err
    assert main(["prune", str(base_ckpt), str(sens), str(tmp_path / "p3.pt"),
                 "--pruned-latency", "0.3", "--pruned-flops", "0.3"]) == 2
    assert "both given" in capsys.readouterr().err

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"task": "classification", "model": "resnet18",
                                   "train_data": "fashion-mnist", "save_dir": str(tmp_path / "t"),
                                   "pretrain_weights": str(base_ckpt),
                                   "sensitivities_file": str(sens), "pruned_latency": 0.3,
                                   "latency_threads": 1, "ratios": [0.3, 0.6, 0.9], **SMALL}))
    assert main(["train", str(cfg)]) == 0
    report = json.loads((tmp_path / "t" / "report.json").read_text())
    assert report["target"]["kind"] == "latency"


# ---- the report's target rows (no training) -----------------------------------------------

def _report(**extra):
    side = {"params": 10, "flops": 100, "size_mb": 1.0, "metrics": {"top1": 0.9},
            "latency_cpu_ms": 2.0, "latency_gpu_ms": None}
    return {"baseline": side, "pruned": {**side, "flops": 60}, "flops_reduction": 0.4,
            "latency_reduction": 0.31,
            "latency_measured": {"device": "cpu", "threads": 1, "batch": 1,
                                 "input_size": [1, 3, 32, 32]}, **extra}


def test_report_tables_show_target_against_achieved():
    latency = _report(target={"kind": "latency", "value": 0.3, "device": "cpu", "threads": 1,
                              "batch": 1})
    assert target_rows(latency) == [
        ("latency reduction (cpu, 1 thread, batch 1)", "30.0 %", "31.0 %")]
    md = to_markdown(latency)
    assert "| target | asked | achieved |" in md and "| 30.0 % | 31.0 % |" in md
    rows = list(csv.reader(io.StringIO(to_csv(latency))))
    assert rows[0] == ["metric", "baseline", "pruned", "change"]
    assert rows[-1] == ["target: latency reduction (cpu, 1 thread, batch 1)", "30.0 %", "31.0 %",
                        ""]
    assert "asked" in to_console(latency) and "31.0 %" in to_console(latency)
    flops = target_rows(_report(target={"kind": "flops", "value": 0.4}))
    assert flops[0] == ("FLOPs reduction", "40.0 %", "40.0 %") and flops[1][1:] == ("-", "31.0 %")
    assert target_rows(_report(target={"kind": "loss", "value": 0.05}))[0] == \
        ("tolerated loss per group", "5.0 %", "-")
    assert target_rows(_report()) == [] and "target" not in to_markdown(_report())
