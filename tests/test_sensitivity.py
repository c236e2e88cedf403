"""sensitivity(): real losses for coupled groups, exact restoration, ratio keys, sign, resume."""
from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn as nn

import autoprune as ap
from autoprune.engine.sensitivity import ANALYSIS_DEFAULTS
from conftest import (ALL_MODELS, RefEval, assert_one_line, assert_same_state, make_input,
                      make_model, outputs, snapshot)

GROUPS = ["conv1", "layer1.0.conv1", "layer2.0.conv2"]
RATIOS = [0.3, 0.6]


def _run(model, x, ev, **kw):
    kw.setdefault("progress", False)
    # call counts below are exact: the prefix cache's two extra passes and the folded
    # evaluation's first-batch timing and check are tested on their own (test_fused_eval.py)
    options = {"prefix_cache": False, "fused_eval": False,
               **{k: kw.pop(k) for k in ANALYSIS_DEFAULTS if k in kw}}
    return ap.sensitivity(model, x, ev, options=options, **kw)


def test_residual_coupled_groups_have_real_loss(resnet18):
    x = make_input(batch=4)
    sens = _run(resnet18, x, RefEval(resnet18, x), groups=["conv1", "layer2.0.conv2"],
                ratios=RATIOS)
    assert set(sens) == {"conv1", "layer2.0.conv2"}
    for group, points in sens.items():
        assert list(points) == RATIOS
        for ratio, loss in points.items():
            assert 0.01 < loss < 1.0, (group, ratio, loss)


def _loss_of_real_prune(model, x, ev, group, ratio, criterion="l1_norm"):
    pruned = copy.deepcopy(model)
    ap.prune(pruned, x, {group: ratio}, criterion=criterion)
    pruned.eval()
    with torch.no_grad():
        metric = ev(pruned)
    return 1.0 - metric  # baseline is exactly 1


@pytest.mark.parametrize("name,groups", [
    ("toy", None),  # every group: residual, plain and both concat branches
    ("resnet18", ["conv1", "layer2.0.conv2"]),
    ("mobilenet_v2", ["features.2.conv.2", "features.4.conv.0.0"]),
    ("efficientnet_b0", ["conv_stem", "blocks.1.0.conv_pw"]),
])
def test_loss_equals_loss_of_a_real_prune(name, groups):
    """Each point is what prune() of that group alone really does (same channels, same metric),
    including points measured after other points were restored."""
    model = make_model(name)
    x = make_input(batch=4)
    ev = RefEval(model, x)
    sens = _run(model, x, ev, groups=groups, ratios=[0.25, 0.5])
    if groups is None:
        assert list(sens) == [g.name for g in ap.prunable_groups(model, x)]
    for group, points in sens.items():
        for ratio, loss in points.items():
            assert loss == pytest.approx(_loss_of_real_prune(model, x, ev, group, ratio), abs=1e-6)
            assert loss > 0


@pytest.mark.parametrize("name", ALL_MODELS)
@pytest.mark.parametrize("training", [False, True])
def test_model_comes_back_bit_identical(name, training):
    model = make_model(name)
    x = make_input()
    ev = RefEval(model, x)
    model.train(training)
    snap = snapshot(model)
    params = [id(p) for p in model.parameters()]
    before = outputs(model, x)
    groups = [g.name for g in ap.prunable_groups(model, x)][:3]
    _run(model, x, ev, groups=groups, ratios=[0.3, 0.7])
    assert ev.calls == 1 + len(groups) * 2
    assert model.training is training
    assert_same_state(model, snap)
    assert [id(p) for p in model.parameters()] == params, "Parameter objects were replaced"
    assert torch.equal(outputs(model, x), before)
    # eval_fn always ran in eval mode without autograd
    assert ev.seen_training and not any(ev.seen_training)
    assert not any(ev.seen_grad)


def test_ratio_keys_rounded_to_two_decimals(toy, x, tmp_path):
    path = tmp_path / "s.json"
    sens = _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.333, 0.5, 0.50001],
                sensitivities_file=path)
    assert list(sens["fuse.0"]) == [0.33, 0.5]
    on_disk = json.loads(path.read_text())["sensitivities"]["fuse.0"]
    assert sorted(on_disk) == ["0.33", "0.50"]
    assert ap.load_sensitivities(path)["fuse.0"] == sens["fuse.0"]


def test_lower_is_better_flips_sign(toy, x):
    high = _run(toy, x, RefEval(toy, x), groups=["stem.0", "fuse.0"], ratios=[0.25, 0.5])
    low = _run(toy, x, RefEval(toy, x), groups=["stem.0", "fuse.0"], ratios=[0.25, 0.5],
               higher_is_better=False)
    for g in high:
        for r in high[g]:
            assert high[g][r] > 0
            assert low[g][r] == pytest.approx(-high[g][r], abs=1e-12)

    # an error-like metric (lower is better) gives a positive loss when it gets worse
    ev = RefEval(toy, x)
    err = _run(toy, x, lambda m: 2.0 - ev(m), groups=["fuse.0"], ratios=[0.5],
               higher_is_better=False)
    assert err["fuse.0"][0.5] == pytest.approx(high["fuse.0"][0.5], abs=1e-12)


def test_file_contents(toy, x, tmp_path):
    path = tmp_path / "s.json"
    _run(toy, x, RefEval(toy, x), groups=["stem.0", "branch_b.0"], ratios=[0.5],
         sensitivities_file=path, arch="toynet", metric_name="cos")
    data = json.loads(path.read_text())
    assert data["format"] == "autoprune-sensitivity" and data["version"] == 1
    assert data["model"]["arch"] == "toynet"
    assert data["model"]["groups"] == {"stem.0": 16, "block_conv1": 16, "branch_a.0": 8,
                                       "branch_b.0": 12, "fuse.0": 24}
    assert data["model"]["fingerprint"]
    assert data["metric"]["name"] == "cos"
    assert data["metric"]["baseline"] == 1.0
    assert data["metric"]["higher_is_better"] is True
    assert data["criterion"] == "l1_norm"
    assert set(data["sensitivities"]) == {"stem.0", "branch_b.0"}
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"], "temporary files were left behind"


def test_resume_after_interruption_computes_only_missing_points(tmp_path):
    x = make_input(batch=4)
    model = make_model("resnet18")
    path = tmp_path / "sens.json"

    # a first run on a subset
    ev = RefEval(model, x)
    _run(model, x, ev, groups=GROUPS[:1], ratios=RATIOS, sensitivities_file=path)
    assert ev.calls == 1 + 2

    # the full run is interrupted on its third evaluation (baseline is stored: no call for it)
    snap = snapshot(model)
    ev = RefEval(model, x, interrupt_on_call=3)
    with pytest.raises(KeyboardInterrupt):
        _run(model, x, ev, groups=GROUPS, ratios=RATIOS, sensitivities_file=path)
    assert_same_state(model, snap)  # interrupted mid-point: the model was still put back
    data = json.loads(path.read_text())
    assert data["sensitivities"].keys() == {"conv1", "layer1.0.conv1"}
    assert sorted(data["sensitivities"]["conv1"]) == ["0.30", "0.60"]
    assert sorted(data["sensitivities"]["layer1.0.conv1"]) == ["0.30", "0.60"]
    assert data["metric"]["baseline"] == 1.0
    assert [p.name for p in tmp_path.iterdir()] == ["sens.json"]

    # the rerun evaluates only the two missing points
    ev = RefEval(model, x)
    resumed = _run(model, x, ev, groups=GROUPS, ratios=RATIOS, sensitivities_file=path)
    assert ev.calls == 2
    # a further rerun evaluates nothing
    ev = RefEval(model, x)
    again = _run(model, x, ev, groups=GROUPS, ratios=RATIOS, sensitivities_file=path)
    assert ev.calls == 0
    assert again == resumed

    # same numbers as one uninterrupted run
    fresh = make_model("resnet18")
    straight = _run(fresh, x, RefEval(fresh, x), groups=GROUPS, ratios=RATIOS)
    assert list(resumed) == GROUPS
    for g in GROUPS:
        assert list(resumed[g]) == RATIOS
        for r in RATIOS:
            assert resumed[g][r] == pytest.approx(straight[g][r], rel=1e-9, abs=1e-12)
    assert ap.load_sensitivities(path) == resumed


def test_new_ratios_on_a_stored_file_reuse_the_baseline(toy, x, tmp_path):
    path = tmp_path / "s.json"
    _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.25], sensitivities_file=path)
    ev = RefEval(toy, x)
    sens = _run(toy, x, ev, groups=["fuse.0"], ratios=[0.25, 0.5], sensitivities_file=path)
    assert ev.calls == 1
    assert list(sens["fuse.0"]) == [0.25, 0.5]


def test_file_made_for_another_model_is_refused(toy, x, tmp_path):
    path = tmp_path / "s.json"
    _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.5], sensitivities_file=path)
    before = path.read_bytes()
    resnet = make_model("resnet18")
    ev = RefEval(resnet, x)
    with pytest.raises(ap.SensitivityFileError) as info:
        _run(resnet, x, ev, groups=["conv1"], ratios=[0.5], sensitivities_file=path)
    assert "another model" in assert_one_line(info)
    assert ev.calls == 0
    assert path.read_bytes() == before, "a refused file must not be modified"

    # same architecture, other group structure (an ignored layer) -> also another fingerprint
    with pytest.raises(ap.SensitivityFileError):
        _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.5], sensitivities_file=path,
             ignored_layers=["stem.0"])


def test_file_measured_on_other_weights_is_refused(x, tmp_path):
    path = tmp_path / "s.json"
    a = make_model("toy", seed=0)
    _run(a, x, RefEval(a, x), groups=["fuse.0"], ratios=[0.25], sensitivities_file=path)
    b = make_model("toy", seed=1)
    with pytest.raises(ap.SensitivityFileError) as info:
        _run(b, x, RefEval(b, x), groups=["fuse.0"], ratios=[0.25, 0.5], sensitivities_file=path)
    assert_one_line(info)


def test_baseline_only_file_from_other_weights_is_remeasured(x, tmp_path):
    path = tmp_path / "s.json"
    a = make_model("toy", seed=0)
    _run(a, x, lambda m: 2.0, groups=[], ratios=[0.5], sensitivities_file=path)
    assert json.loads(path.read_text())["metric"]["baseline"] == 2.0
    b = make_model("toy", seed=1)
    ev = RefEval(b, x)
    sens = _run(b, x, ev, groups=["fuse.0"], ratios=[0.5], sensitivities_file=path)
    assert ev.calls == 2  # the baseline of the other weights is not reused
    assert json.loads(path.read_text())["metric"]["baseline"] == 1.0
    assert 0 < sens["fuse.0"][0.5] < 1


@pytest.mark.parametrize("kw", [{"criterion": "l2_norm"}, {"higher_is_better": False}])
def test_file_measured_differently_is_refused(toy, x, tmp_path, kw):
    path = tmp_path / "s.json"
    _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.5], sensitivities_file=path)
    with pytest.raises(ap.SensitivityFileError) as info:
        _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.5], sensitivities_file=path,
             **kw)
    assert_one_line(info)


@pytest.mark.parametrize("criterion", ["l1_norm", "l2_norm", "fpgm", "bn_scale"])
def test_every_criterion_measures_real_prunes(toy, x, criterion):
    ev = RefEval(toy, x)
    sens = _run(toy, x, ev, groups=["block_conv1", "branch_b.0"], ratios=[0.5],
                criterion=criterion)
    for g, points in sens.items():
        assert points[0.5] == pytest.approx(
            _loss_of_real_prune(toy, x, ev, g, 0.5, criterion=criterion), abs=1e-6)


def test_too_few_channels_to_remove_gives_zero_loss_without_evaluating(toy, x):
    # branch_a.0 has 8 channels: 4 % of 8 rounds to 0 channels removed
    ev = RefEval(toy, x)
    sens = _run(toy, x, ev, groups=["branch_a.0"], ratios=[0.04])
    assert sens == {"branch_a.0": {0.04: 0.0}}
    assert ev.calls == 1


class _Cat(nn.Module):
    """Two branches concatenated, then a 1x1 conv: pruning branch ``a`` edits torch-pruning's
    concat sizes."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 3, padding=1)
        self.c = nn.Conv2d(16, 4, 1)
        with torch.no_grad():  # a's last channels are the weakest: pruned first, at any ratio
            for i in range(8):
                self.a.weight[i].fill_(0.1 * (8 - i))
                self.b.weight[i].fill_(0.05 * (i + 1))

    def forward(self, x):
        return self.c(torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], 1))


def test_successive_points_through_a_concat_match_fresh_prunes():
    from autoprune.engine.groups import PruningGraph
    from autoprune.engine.sensitivity import pruned_temporarily
    model = _Cat().eval()
    pristine = copy.deepcopy(model)
    x = torch.randn(2, 3, 8, 8)
    graph = PruningGraph(model, x)
    cat = next(n.module for n in graph.dg.module2node.values()
               if type(n.module).__name__ == "_ConcatOp")
    sizes = list(cat.concat_sizes or [8, 8])
    # after a prune of ``a`` is undone, ``b``'s channels must map to the concat's second half again
    for name, ratio in (("a", 0.3), ("a", 0.6), ("b", 0.5), ("a", 0.8), ("b", 0.25)):
        group = graph.group(name)
        idxs = graph.channels_to_remove(group, ratio)
        with torch.no_grad(), pruned_temporarily(graph, group, idxs):
            got = model(x)
        fresh = copy.deepcopy(pristine)
        fresh_graph = PruningGraph(fresh, x)
        fresh_graph.remove(fresh_graph.group(name), idxs)
        with torch.no_grad():
            assert torch.allclose(got, fresh(x), atol=1e-6), (name, ratio)
        assert cat.concat_sizes == sizes  # torch-pruning's op state comes back too


def test_yolo_points_in_sequence_keep_the_concat_mapping():
    # C2f concatenates cv0, cv1 and the bottleneck: a stale concat size once made a later point
    # prune channels of the wrong branch (a shape error, or silently wrong numbers)
    pytest.importorskip("ultralytics")
    from autoprune.tasks import get_adapter

    adapter = get_adapter("detection", nc=3, input_size=64)
    torch.manual_seed(0)
    model = adapter.build("yolov8n").eval()
    example = adapter.example_inputs(model)
    xs = [torch.rand(2, 3, 64, 64) for _ in range(2)]
    score = lambda m: sum(m(x)[0].sigmoid().mean().item() for x in xs)
    ignored = adapter.ignored_layers(model)
    names = [g.name for g in ap.prunable_groups(model, example, ignored)][:8]
    got = ap.sensitivity(model, example, score, groups=names, ratios=(0.3, 0.6),
                         ignored_layers=ignored, progress=False)
    assert sorted(got) == sorted(names) and all(len(p) == 2 for p in got.values())


@pytest.mark.parametrize("evaluation", ["prune", "masked"])
def test_ratios_removing_the_same_channels_are_evaluated_once(evaluation):
    """A 4-channel group loses 1, 1, 2, 2 channels at 0.2, 0.3, 0.4, 0.5: two evaluations, and
    the repeated ratios get exactly the result of the smaller one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)).eval()
    x = make_input(batch=4)
    ev = RefEval(model, x)
    sens = _run(model, x, ev, groups=["0"], ratios=[0.2, 0.3, 0.4, 0.5], evaluation=evaluation,
                sensitivities_file=None)
    points = sens["0"]
    assert points[0.2] == points[0.3] and points[0.4] == points[0.5] and points[0.2] != points[0.4]
    one_by_one = [_run(model, x, RefEval(model, x), groups=["0"], ratios=[r],
                       evaluation="prune")["0"][r] for r in (0.3, 0.5)]
    assert one_by_one == pytest.approx([points[0.3], points[0.5]], abs=1e-6)
    if evaluation == "prune":
        assert ev.calls == 1 + 2  # the baseline, then one evaluation per distinct channel set


# ---- resuming: shards, evaluation images, weights, counts, early stop, non-finite metrics --------

@pytest.mark.parametrize("differs", ["nothing", "fingerprint", "criterion", "higher_is_better",
                                     "weights", "eval_images"])
def test_shard_left_by_another_analysis_is_refused_before_merging(toy, x, tmp_path, differs):
    from autoprune.engine.store import SensitivityRecord, read_record, shard_path, write_record

    path = tmp_path / "s.json"
    extra = {"eval_images": 10}
    _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.25], sensitivities_file=path,
         extra=extra)
    record = read_record(path)
    shard = SensitivityRecord(model=dict(record.model), metric=dict(record.metric),
                              criterion=record.criterion, extra=dict(record.extra))
    if differs == "fingerprint":
        shard.model["fingerprint"] = "0123456789abcdef"
    elif differs == "criterion":
        shard.criterion = "l2_norm"
    elif differs == "higher_is_better":
        shard.metric["higher_is_better"] = False
    elif differs == "weights":
        shard.model["weights_sha256"] = "0" * 16
    elif differs == "eval_images":
        shard.extra["eval_images"] = 20
    shard.set_point("stem.0", 0.25, 0.125)
    write_record(shard, shard_path(path, 1))
    before = path.read_bytes()
    ev = RefEval(toy, x)
    if differs == "nothing":  # a shard of this analysis is taken over
        sens = _run(toy, x, ev, groups=["fuse.0", "stem.0"], ratios=[0.25],
                    sensitivities_file=path, extra=extra)
        assert ev.calls == 0 and sens["stem.0"] == {0.25: 0.125}
        assert not shard_path(path, 1).exists()
        return
    with pytest.raises(ap.SensitivityFileError) as info:
        _run(toy, x, ev, groups=["fuse.0", "stem.0"], ratios=[0.25], sensitivities_file=path,
             extra=extra)
    msg = assert_one_line(info)
    assert str(shard_path(path, 1)) in msg and "delete" in msg
    assert ev.calls == 0
    assert path.read_bytes() == before, "nothing may be merged from a refused shard"
    assert shard_path(path, 1).exists(), "a refused shard must not be deleted"


def test_baseline_only_file_of_other_eval_images_is_remeasured(toy, x, tmp_path):
    """Interrupted before its first point, a file holds only a baseline: a rerun on other
    evaluation images measures the baseline again instead of computing losses against it."""
    path = tmp_path / "s.json"
    with pytest.raises(KeyboardInterrupt):
        _run(toy, x, RefEval(toy, x, interrupt_on_call=2), groups=["fuse.0"], ratios=[0.5],
             sensitivities_file=path, extra={"eval_images": 10})
    assert json.loads(path.read_text())["metric"]["baseline"] == 1.0
    assert json.loads(path.read_text())["sensitivities"] == {}
    ev = RefEval(toy, x)
    other = lambda m: 0.5 * ev(m)  # the other images score half as much
    sens = _run(toy, x, other, groups=["fuse.0"], ratios=[0.5], sensitivities_file=path,
                extra={"eval_images": 20})
    assert ev.calls == 2  # baseline and point
    data = json.loads(path.read_text())
    assert data["metric"]["baseline"] == 0.5 and data["extra"]["eval_images"] == 20
    straight = _run(toy, x, RefEval(toy, x), groups=["fuse.0"], ratios=[0.5])
    assert sens["fuse.0"][0.5] == pytest.approx(straight["fuse.0"][0.5], abs=1e-12)


def test_complete_file_of_other_weights_is_used_with_one_warning(x, tmp_path, capsys):
    path = tmp_path / "s.json"
    a = make_model("toy", seed=0)
    first = _run(a, x, RefEval(a, x), groups=["fuse.0"], ratios=[0.25], sensitivities_file=path)
    capsys.readouterr()
    ev = RefEval(a, x)
    assert _run(a, x, ev, groups=["fuse.0"], ratios=[0.25], sensitivities_file=path) == first
    assert capsys.readouterr().out == ""  # same weights: nothing to say
    b = make_model("toy", seed=1)
    ev = RefEval(b, x)
    assert _run(b, x, ev, groups=["fuse.0"], ratios=[0.25], sensitivities_file=path) == first
    assert ev.calls == 0
    assert capsys.readouterr().out.splitlines() == [
        f"[autoprune] {path} holds a complete table measured on other weights of this model; "
        f"using it as is (pass a new path to measure these weights)"]


def test_resumed_runs_add_their_evaluation_counts(toy, x, tmp_path):
    path = tmp_path / "s.json"
    kw = dict(groups=["fuse.0"], sensitivities_file=path, evaluation="prune")
    _run(toy, x, RefEval(toy, x), ratios=[0.25], **kw)
    data = json.loads(path.read_text())
    assert data["extra"]["evaluation"]["points"] == {"masked": 0, "pruned": 1, "reused": 0}
    data["extra"]["evaluation"]["note"] = "kept"
    path.write_text(json.dumps(data))
    _run(toy, x, RefEval(toy, x), ratios=[0.25, 0.5], **kw)
    evaluation = json.loads(path.read_text())["extra"]["evaluation"]
    assert evaluation["points"] == {"masked": 0, "pruned": 2, "reused": 0}
    assert evaluation["note"] == "kept" and evaluation["mode"] == "prune"
    _run(toy, x, RefEval(toy, x), ratios=[0.25, 0.5], **kw)  # complete: nothing changes
    assert json.loads(path.read_text())["extra"]["evaluation"] == evaluation


def test_rerun_of_an_early_stopped_analysis_evaluates_nothing(toy, x, tmp_path):
    path = tmp_path / "s.json"
    kw = dict(ratios=[0.2, 0.4, 0.6, 0.8], sensitivities_file=path, early_stop=1e-9,
              prefix_cache=True)
    first = _run(toy, x, RefEval(toy, x), **kw)
    assert all(list(points) == [0.2] for points in first.values())  # every group stopped
    counts = json.loads(path.read_text())["extra"]["evaluation"]
    ev = RefEval(toy, x)
    assert _run(toy, x, ev, **kw) == first
    assert ev.calls == 0  # no prefix cache prepared for points that early stop skips
    assert json.loads(path.read_text())["extra"]["evaluation"] == counts


@pytest.mark.parametrize("value,higher_is_better,worst", [
    (float("nan"), True, 1.0), (float("-inf"), True, 1.0),
    (float("inf"), False, 1e6), (float("nan"), False, 1e6)])
def test_non_finite_metric_at_a_pruned_point_is_the_worst_loss(toy, x, tmp_path, capsys, value,
                                                               higher_is_better, worst):
    ref = RefEval(toy, x)
    calls = []

    def ev(m):  # NaN/inf once fuse.0 keeps 12 of its 24 channels or fewer
        calls.append(1)
        if m.fuse[0].out_channels <= 12:
            return value
        return ref(m) if higher_is_better else 2.0 - ref(m)

    path = tmp_path / "s.json"
    kw = dict(groups=["fuse.0"], ratios=[0.25, 0.5, 0.75], sensitivities_file=path,
              higher_is_better=higher_is_better)
    sens = _run(toy, x, ev, **kw)
    assert sens["fuse.0"][0.5] == sens["fuse.0"][0.75] == worst
    assert 0 < sens["fuse.0"][0.25] < 0.95  # a measured loss
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "fuse.0 at ratio 0.50" in lines[0] and "0.75" in lines[1]
    record = ap.read_record(path)
    assert record.extra["non_finite_points"] == ["fuse.0@0.50", "fuse.0@0.75"]
    assert ap.load_sensitivities(path) == sens
    calls.clear()
    assert _run(toy, x, ev, **kw) == sens and calls == []  # the analysis is finished
    assert ap.ratios_by_loss(sens, 0.95)["fuse.0"] < 0.5  # never chosen within a tolerance
    with pytest.raises(ap.MetricError):  # the unpruned model must still score a number
        _run(toy, x, lambda m: value, groups=["fuse.0"], ratios=[0.5])
