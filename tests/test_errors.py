"""Bad input gives one-line errors of the right autoprune.errors class, and changes nothing."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import autoprune as ap
from autoprune import errors
from conftest import RefEval, assert_one_line, assert_same_state, make_input, make_model, snapshot


def _sens(model, x, ev, **kw):
    kw.setdefault("groups", ["fuse.0"])
    kw.setdefault("ratios", [0.5])
    return ap.sensitivity(model, x, ev, progress=False, **kw, options={"prefix_cache": False})


def test_error_hierarchy():
    for cls in (ap.ConfigError, ap.MetricError, ap.NoPrunableGroupsError,
                ap.SensitivityFileError, ap.CheckpointError):
        assert issubclass(cls, ap.AutopruneError) and issubclass(cls, ValueError)
        assert getattr(errors, cls.__name__) is cls
    assert len({ap.ConfigError, ap.MetricError, ap.NoPrunableGroupsError,
                ap.SensitivityFileError, ap.CheckpointError}) == 5


# ---- metrics ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "0.9", None, True, [0.9],
                                   torch.tensor([0.5, 0.6]), torch.tensor(math.nan),
                                   np.float64("nan"), {"top1": 0.9}])
def test_unusable_metric_at_baseline(value, toy, x, tmp_path):
    with pytest.raises(ap.MetricError) as info:
        _sens(toy, x, lambda m: value, sensitivities_file=tmp_path / "s.json")
    assert_one_line(info)


@pytest.mark.parametrize("value", [0.9, 1, torch.tensor(0.9), torch.tensor([0.9]),
                                   np.float32(0.9), np.float64(0.9)])
def test_usable_metrics(value, toy, x):
    sens = _sens(toy, x, lambda m: value)
    assert sens == {"fuse.0": {0.5: 0.0}}


# NaN at a point: the worst loss (test_sensitivity)
@pytest.mark.parametrize("value", ["bad", None])
def test_unusable_metric_at_a_point_restores_the_model(value, toy, x, tmp_path):
    calls = []

    def ev(m):
        calls.append(1)
        return 0.8 if len(calls) == 1 else value

    snap = snapshot(toy)
    path = tmp_path / "s.json"
    with pytest.raises(ap.MetricError) as info:
        _sens(toy, x, ev, sensitivities_file=path)
    msg = assert_one_line(info)
    assert "fuse.0" in msg  # says which point
    assert_same_state(toy, snap)
    data = json.loads(path.read_text())
    assert data["metric"]["baseline"] == 0.8 and data["sensitivities"] == {}


def test_eval_fn_exception_propagates_and_model_is_restored(toy, x):
    calls = []

    def ev(m):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("data loader died")
        return 1.0

    snap = snapshot(toy)
    with pytest.raises(RuntimeError, match="data loader died"):
        _sens(toy, x, ev, groups=["stem.0", "fuse.0"])
    assert_same_state(toy, snap)
    assert toy.stem[0].out_channels == 16


@pytest.mark.parametrize("zero", [0, 0.0, -0.0, torch.tensor(0.0)])
def test_zero_baseline(zero, toy, x, tmp_path):
    with pytest.raises(ap.MetricError) as info:
        _sens(toy, x, lambda m: zero, sensitivities_file=tmp_path / "s.json")
    assert_one_line(info)


# ---- ratios, names, options ---------------------------------------------------------------------

@pytest.mark.parametrize("ratios", [[0], [1], [-0.1], [1.5], [0.001], [0.999], [0.3, 1.0],
                                    ["0.3"], [], [math.nan]])
def test_sensitivity_bad_ratios(ratios, toy, x):
    ev = RefEval(toy, x)
    with pytest.raises(ap.ConfigError) as info:
        _sens(toy, x, ev, ratios=ratios)
    assert_one_line(info)
    assert ev.calls == 0


@pytest.mark.parametrize("ratio", [1, -0.1, 1.5])
def test_prune_bad_ratios(ratio, toy, x):
    with pytest.raises(ap.ConfigError) as info:
        ap.prune(toy, x, {"fuse.0": ratio})
    assert_one_line(info)


def test_unknown_groups_in_sensitivity(resnet18, x, tmp_path):
    ev = RefEval(resnet18, x)
    path = tmp_path / "s.json"
    with pytest.raises(ap.ConfigError) as info:
        ap.sensitivity(resnet18, x, ev, groups=["conv1", "layer1.0.conv2", "nope"], ratios=[0.5],
                       sensitivities_file=path, progress=False)
    msg = assert_one_line(info)
    assert "nope" in msg and "layer1.0.conv2" in msg
    assert ev.calls == 0 and not path.exists()


def test_unknown_groups_in_prune(resnet18, x):
    with pytest.raises(ap.ConfigError) as info:
        ap.prune(resnet18, x, {"features.0.0": 0.3})
    assert "features.0.0" in assert_one_line(info)


@pytest.mark.parametrize("call", ["sensitivity", "prune", "prunable_groups"])
@pytest.mark.parametrize("ignored", [["no.such.layer"], [3]])
def test_bad_ignored_layers(call, ignored, toy, x):
    with pytest.raises(ap.ConfigError) as info:
        if call == "sensitivity":
            _sens(toy, x, RefEval(toy, x), ignored_layers=ignored)
        elif call == "prune":
            ap.prune(toy, x, {"fuse.0": 0.5}, ignored_layers=ignored)
        else:
            ap.prunable_groups(toy, x, ignored_layers=ignored)
    assert_one_line(info)


def test_unknown_criterion(toy, x):
    with pytest.raises(ap.ConfigError) as info:
        _sens(toy, x, RefEval(toy, x), criterion="taylor-magic")
    assert "l1_norm" in assert_one_line(info)


@pytest.mark.parametrize("target", [0, 1, -0.1, 1.5])
def test_pruned_flops_out_of_range(target, x1):
    model = make_model("toy")
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_flops(model, x1, {"fuse.0": {0.5: 0.1}}, target)
    assert_one_line(info)


def test_pruned_flops_unreachable(x1):
    model = make_model("toy")
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_flops(model, x1, {"fuse.0": {0.1: 0.01}, "stem.0": {0.1: 0.02}}, 0.9)
    assert_one_line(info)


# ---- sensitivity files --------------------------------------------------------------------------

def test_fingerprint_mismatch(x, tmp_path):
    path = tmp_path / "s.json"
    ap.save_sensitivities({"fuse.0": {0.5: 0.1}}, path, fingerprint="0123456789abcdef")
    toy = make_model("toy")
    ev = RefEval(toy, x)
    with pytest.raises(ap.SensitivityFileError) as info:
        _sens(toy, x, ev, sensitivities_file=path)
    assert_one_line(info)
    assert ev.calls == 0


@pytest.mark.parametrize("content", ['{"format": "autoprune-sensitivity", "vers', "\x00\x01garbage",
                                     "[]"])
def test_corrupt_sensitivity_file_is_refused_and_kept(content, toy, x, tmp_path):
    path = tmp_path / "s.json"
    path.write_text(content)
    ev = RefEval(toy, x)
    with pytest.raises(ap.SensitivityFileError) as info:
        _sens(toy, x, ev, sensitivities_file=path)
    assert_one_line(info)
    assert ev.calls == 0
    assert path.read_text() == content, "a damaged file must be left for the user to inspect"


@pytest.mark.parametrize("baseline", ["abc", 0, [1]])
def test_damaged_baseline_in_file(baseline, toy, x, tmp_path):
    path = tmp_path / "s.json"
    _sens(toy, x, RefEval(toy, x), sensitivities_file=path)
    data = json.loads(path.read_text())
    data["metric"]["baseline"] = baseline
    path.write_text(json.dumps(data))
    with pytest.raises(ap.SensitivityFileError) as info:
        _sens(toy, x, RefEval(toy, x), ratios=[0.25, 0.5], sensitivities_file=path)
    assert_one_line(info)


# ---- nothing to prune ---------------------------------------------------------------------------

NOTHING = {
    "flatten-linear": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 3)),
                       lambda: torch.randn(2, 3, 2, 2)),
    "single conv": (lambda: nn.Conv2d(3, 4, 3), lambda: torch.randn(2, 3, 8, 8)),
    "conv-bn output": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)),
                       lambda: torch.randn(2, 3, 8, 8)),
}


@pytest.mark.parametrize("kind", list(NOTHING))
def test_no_prunable_groups(kind):
    build, inputs = NOTHING[kind]
    model, x = build().eval(), inputs()
    calls = [
        lambda: ap.prunable_groups(model, x),
        lambda: ap.sensitivity(model, x, lambda m: 1.0, ratios=[0.5], progress=False),
        lambda: ap.prune(model, x, {}),
        lambda: ap.ratios_by_flops(model, x, {"0": {0.5: 0.1}}, 0.3),
    ]
    for call in calls:
        with pytest.raises(ap.NoPrunableGroupsError) as info:
            call()
        assert_one_line(info)


def test_everything_ignored_means_nothing_to_prune(x):
    toy = make_model("toy")
    names = [g.name for g in ap.prunable_groups(toy, x)]
    with pytest.raises(ap.NoPrunableGroupsError) as info:
        ap.prunable_groups(toy, x, ignored_layers=names)
    assert_one_line(info)
