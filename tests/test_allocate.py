"""ratios_by_loss (PaddleSlim semantics, hand-computed) and ratios_by_flops (measured, exact)."""
from __future__ import annotations

import copy
import math

import pytest

import autoprune as ap
from autoprune.engine.allocate import summed_loss
from conftest import RefEval, assert_one_line, make_input, make_model

# ---- ratios_by_loss -----------------------------------------------------------------------------

MONO = {0.1: 0.01, 0.2: 0.02, 0.3: 0.05, 0.4: 0.2}


@pytest.mark.parametrize("threshold,expected", [
    (0.03, 0.2 + (0.03 - 0.02) * (0.3 - 0.2) / (0.05 - 0.02)),   # 0.2333...
    (0.1, 0.3 + (0.1 - 0.05) * (0.4 - 0.3) / (0.2 - 0.05)),      # 0.3333...
    (0.02, 0.2),          # exactly on a point: that point, nothing added
    (0.05, 0.3),
    (0.015, 0.15),        # halfway between 0.01 and 0.02
    (0.2, 0.4),           # all points within -> largest ratio
    (5.0, 0.4),
    (0.01, 0.1),
    (0.0099, 0.0),        # even the smallest ratio is over -> 0
    (-1.0, 0.0),
])
def test_ratios_by_loss_monotone(threshold, expected):
    assert ap.ratios_by_loss({"g": MONO}, threshold)["g"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("points,threshold,expected", [
    # the scan starts at the top: 0.3 (0.02) is within, although 0.2 (0.08) is not
    ({0.1: 0.01, 0.2: 0.08, 0.3: 0.02, 0.4: 0.1}, 0.05, 0.3 + 0.03 * 0.1 / 0.08),   # 0.3375
    ({0.1: 0.0, 0.2: 0.05, 0.3: 0.04, 0.4: 0.2}, 0.045, 0.3 + 0.005 * 0.1 / 0.16),  # 0.303125
    ({0.1: 0.01, 0.2: 0.04, 0.3: 0.03}, 0.035, 0.3),      # top point within
    ({0.1: 0.01, 0.2: 0.04, 0.3: 0.03}, 0.02, 0.1 + 0.01 * 0.1 / 0.03),  # 0.1333...
    ({0.1: 0.3, 0.2: 0.01, 0.5: 0.6}, 0.1, 0.2 + 0.09 * 0.3 / 0.59),  # uneven spacing, first over
    ({0.1: -0.01, 0.3: -0.02}, 0.0, 0.3),                 # pruning helped everywhere
])
def test_ratios_by_loss_non_monotone(points, threshold, expected):
    assert ap.ratios_by_loss({"g": points}, threshold)["g"] == pytest.approx(expected, abs=1e-12)


def test_ratios_by_loss_several_groups_unordered_input():
    sens = {"a": {0.5: 0.5, 0.1: 0.01, 0.3: 0.03},   # keys given out of order
            "b": {0.1: 0.2, 0.2: 0.3},
            "c": {0.1: 0.0, 0.9: 0.01}}
    ratios = ap.ratios_by_loss(sens, 0.04)
    assert set(ratios) == {"a", "b", "c"}
    assert ratios["a"] == pytest.approx(0.3 + 0.01 * 0.2 / 0.47)
    assert ratios["b"] == 0.0
    assert ratios["c"] == 0.9
    assert all(isinstance(v, float) for v in ratios.values())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.1", None])
def test_ratios_by_loss_bad_threshold(bad):
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_loss({"g": MONO}, bad)
    assert_one_line(info)


@pytest.mark.parametrize("table", [{}, {"g": {1.5: 0.1}}, {"g": {0.0: 0.1}},
                                   {"g": {0.2: math.nan}}])
def test_ratios_by_loss_bad_table(table):
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_loss(table, 0.1)
    assert_one_line(info)


# ---- ratios_by_flops ----------------------------------------------------------------------------

def smooth_table(names, ratios=tuple(r / 10 for r in range(1, 10))):
    """A monotone synthetic profile over real group names: loss = k_g * ratio^2."""
    return {n: {r: (1 + (i * 7) % 3) * r * r for r in ratios} for i, n in enumerate(names)}


def _check_achieved(model, x, result, target, round_to=None, tol=0.01):
    assert isinstance(result, ap.FlopsRatios)
    assert result.target == target
    assert abs(result.achieved - target) <= tol, (result.achieved, target)
    assert all(0 < r <= 0.9 for r in result.values())
    # .achieved is what a real prune with these ratios does
    pruned = copy.deepcopy(model)
    real = ap.prune(pruned, x, dict(result), round_to=round_to)
    assert real.flops_reduction == pytest.approx(result.achieved, abs=1e-9)
    measured = 1 - ap.count_flops(pruned, x) / ap.count_flops(model, x)
    assert measured == pytest.approx(result.achieved, abs=1e-9)
    return real


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
@pytest.mark.parametrize("target", [0.3, 0.5])
def test_ratios_by_flops_hits_target_synthetic(name, target, x1):
    model = make_model(name)
    names = [g.name for g in ap.prunable_groups(model, x1)]
    sens = smooth_table(names)
    result = ap.ratios_by_flops(model, x1, sens, target)
    _check_achieved(model, x1, result, target)
    # the least sensitive groups are pruned hardest (loss = k * r^2, k in {1, 2, 3})
    by_k = {}
    for i, n in enumerate(names):
        by_k.setdefault(1 + (i * 7) % 3, []).append(result.get(n, 0.0))
    assert min(by_k[1]) >= max(by_k[2]) >= max(by_k[3])
    assert min(by_k[1]) > max(by_k[3])
    # groups with the same loss curve get the same ratio (only FLOPs-neutral rounding differs)
    for ratios in by_k.values():
        assert max(ratios) - min(ratios) < 1e-6
    assert math.isfinite(result.threshold)


@pytest.fixture(scope="module")
def resnet18_real_table():
    model = make_model("resnet18")
    x = make_input(batch=2)
    sens = ap.sensitivity(model, x, RefEval(model, x), ratios=[0.1, 0.3, 0.5, 0.7, 0.9],
                          progress=False)
    return model, sens


@pytest.mark.parametrize("target", [0.3, 0.5])
def test_ratios_by_flops_hits_target_real_table(resnet18_real_table, target, x1):
    model, sens = resnet18_real_table
    result = ap.ratios_by_flops(model, x1, sens, target)
    _check_achieved(model, x1, result, target)


@pytest.mark.parametrize("name,tol", [("resnet18", 0.01), ("mobilenet_v2", 0.03)])
def test_ratios_by_flops_round_to_8(name, tol, x1):
    model = make_model(name)
    names = [g.name for g in ap.prunable_groups(model, x1)]
    result = ap.ratios_by_flops(model, x1, smooth_table(names), 0.5, round_to=8)
    real = _check_achieved(model, x1, result, 0.5, round_to=8, tol=tol)
    for group, entry in real.plan.items():
        assert entry["kept"] % 8 == 0 or entry["kept"] == entry["channels"], (group, entry)


def test_ratios_by_flops_leaves_model_untouched(x1):
    from conftest import assert_same_state, snapshot
    model = make_model("resnet18")
    snap = snapshot(model)
    names = [g.name for g in ap.prunable_groups(model, x1)]
    ap.ratios_by_flops(model, x1, smooth_table(names), 0.3)
    assert_same_state(model, snap)


@pytest.mark.parametrize("flat", [0.0, 0.02])
def test_ratios_by_flops_flat_table_prunes_uniformly(flat, x1):
    # every group equally (in)sensitive, e.g. a model that scores the same whatever is pruned
    model = make_model("resnet18")
    names = [g.name for g in ap.prunable_groups(model, x1)]
    result = ap.ratios_by_flops(model, x1, {n: {0.3: flat, 0.6: flat} for n in names}, 0.4)
    _check_achieved(model, x1, result, 0.4)


def test_ratios_by_flops_unreachable_target(x1):
    model = make_model("resnet18")
    names = [g.name for g in ap.prunable_groups(model, x1)]
    sens = {n: {0.1: 0.01} for n in names}
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_flops(model, x1, sens, 0.9)
    assert "reachable" in assert_one_line(info)


@pytest.mark.parametrize("bad", [0, 0.0, 1, 1.0, -0.1, 1.5, float("nan"), "0.3", None])
def test_ratios_by_flops_target_out_of_range(bad, x1):
    model = make_model("toy")
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_flops(model, x1, {"fuse.0": {0.5: 0.1}}, bad)
    assert_one_line(info)


def test_ratios_by_flops_unknown_group(x1):
    model = make_model("toy")
    with pytest.raises(ap.ConfigError) as info:
        ap.ratios_by_flops(model, x1, {"layer9.conv": {0.5: 0.1}}, 0.3)
    assert "layer9.conv" in assert_one_line(info)


def test_ratios_by_flops_reachability_is_measured_not_predicted(x1):
    # mobilenet_v2 at 32 px: the layer-cost model predicts at most 0.959 with every group at 0.9,
    # a real prune of every group at 0.9 removes 0.976; 0.97 must not be refused as unreachable
    from autoprune.engine.groups import PruningGraph

    model = make_model("mobilenet_v2")
    names = [g.name for g in PruningGraph(model, x1).groups]
    sens = {n: {r / 10: 0.0 for r in range(1, 10)} for n in names}
    result = ap.ratios_by_flops(model, x1, sens, 0.97)
    assert result.achieved >= 0.965
    _check_achieved(model, x1, result, 0.97)


def test_summed_loss_reads_the_curve_as_the_allocations_do():
    """Anchored at (0, 0), fitted non-decreasing and at least 0 (a dip is averaged with the
    point before it, a negative loss counts as none), linear in between, flat past the largest
    ratio; groups at 0 or left out add nothing."""
    sens = {"a": {0.2: 0.1, 0.4: 0.05, 0.6: 0.3}, "b": {0.5: -0.1}, "c": {0.5: 1.0}}
    loss = summed_loss
    assert loss(sens, {"a": 0.1}) == pytest.approx(0.0375)
    assert loss(sens, {"a": 0.3}) == pytest.approx(0.075)  # 0.1 and the dip at 0.4, averaged
    assert loss(sens, {"a": 0.5}) == pytest.approx(0.1875)
    assert loss(sens, {"a": 0.8}) == pytest.approx(0.3)
    assert loss(sens, {"a": 0.5, "b": 0.25, "c": 0.0}) == pytest.approx(0.1875)
    assert loss(sens, {"c": 0.25}) == pytest.approx(0.5)


def test_a_flops_allocation_reads_noisy_flat_curves_by_their_isotonic_fit():
    """Near zero loss a flat curve's points differ by a few images' flips. The curve the FLOPs
    allocation reads is the least-squares non-decreasing fit, clipped at 0: one noisy point no
    longer caps a group (a running maximum carried it to every larger ratio)."""
    from autoprune.engine.allocate import isotonic, loss_curve, ratio_for_loss, threshold_curve

    assert isotonic([0.1, 0.3, 0.2, 0.4]) == pytest.approx([0.1, 0.25, 0.25, 0.4])
    assert isotonic([0.5, 0.1, 0.3]) == pytest.approx([0.3, 0.3, 0.3])
    flat = {0.1: 0.0, 0.2: 0.004, 0.3: -0.002, 0.4: -0.002, 0.5: 0.0, 0.6: 0.05}
    curve = loss_curve(flat)
    assert [r for r, _ in curve] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert [v for _, v in curve] == pytest.approx([0, 0, 0, 0, 0, 0, 0.05], abs=1e-12)
    # the 0.004 at 0.2 (four flips of 1,000 images) no longer holds the group near 0.1
    assert 0.5 <= ratio_for_loss(threshold_curve(flat), 0.001) < 0.6


def test_ratios_by_flops_counts_the_unpruned_flops_once(x1, monkeypatch):
    """Each measured prune of a copy counts only the pruned copy's FLOPs: the unpruned model's
    are the cost model's total, counted once (a count is a full forward pass with hooks)."""
    import autoprune.engine.allocate as allocate
    import autoprune.engine.prune as prune_module

    model = make_model("resnet18")
    sens = smooth_table([g.name for g in ap.prunable_groups(model, x1)])
    counted, prunes = [], []
    real_count, real_prune = prune_module.count_flops, allocate.prune
    monkeypatch.setattr(prune_module, "count_flops",
                        lambda m, x, **kw: counted.append(1) or real_count(m, x, **kw))
    monkeypatch.setattr(allocate, "prune",
                        lambda *a, **kw: prunes.append(1) or real_prune(*a, **kw))
    result = ap.ratios_by_flops(model, x1, sens, 0.4)
    assert prunes and len(counted) == len(prunes)  # the pruned copies only
    _check_achieved(model, x1, result, 0.4)
    assert ap.prune(copy.deepcopy(model), x1, dict(result), flops_before=123).flops_before == 123


def test_a_candidate_timed_for_a_latency_target_is_pruned_without_counting_flops(x1,
                                                                                 monkeypatch):
    """latency_target.measure_reduction times a pruned copy: it removes the channels as prune()
    does (the same plan, the same tensors) but counts no FLOPs (a forward pass with hooks each,
    a third of a second on a YOLOv8n), and the model it was given is left whole."""
    import torch

    import autoprune.engine.latency_target as latency_target
    import autoprune.engine.prune as prune_module
    from autoprune.engine.groups import PruningGraph

    model = make_model("resnet18")
    ratios = {g.name: 0.5 for g in ap.prunable_groups(model, x1)[:3]}
    counted, timed = [], []
    real_count = prune_module.count_flops
    monkeypatch.setattr(prune_module, "count_flops",
                        lambda m, x, **kw: counted.append(1) or real_count(m, x, **kw))

    class Timer:
        def compare(self, candidate):
            timed.append(candidate)
            return 0.75

    shapes = {k: v.shape for k, v in model.state_dict().items()}
    assert latency_target.measure_reduction(model, x1, ratios, Timer()) == pytest.approx(0.25)
    assert counted == [] and {k: v.shape for k, v in model.state_dict().items()} == shapes
    reference = ap.prune(copy.deepcopy(model), x1, ratios).model
    assert len(counted) == 2  # prune() counts before and after
    assert {k: v.shape for k, v in timed[0].state_dict().items()} == \
        {k: v.shape for k, v in reference.state_dict().items()} != shapes
    # channels chosen by the caller on the unpruned model (ratios_by_latency: once per group
    # and ratio for all its candidates) are the ones removed
    graph = PruningGraph(model, x1)
    chosen = lambda name, ratio: graph.channels_to_remove(graph.group(name), ratio)
    latency_target.measure_reduction(model, x1, ratios, Timer(), chosen_by=chosen)
    assert torch.equal(timed[1].conv1.weight, reference.conv1.weight)
    latency_target.measure_reduction(model, x1, {"conv1": 0.5}, Timer(),
                                     chosen_by=lambda name, ratio: [0, 1])
    assert torch.equal(timed[2].conv1.weight, model.conv1.weight[2:])
