"""prunable_groups: stable names, members, channel counts, ignored layers, output layers kept."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import autoprune as ap
from autoprune.engine import groups as groups_module, tp_patches
from autoprune.engine.groups import PruningGraph, group_fingerprint
from conftest import (ALL_MODELS, HEADS, TOY_GROUPS, assert_same_state, make_input, make_model,
                      snapshot)

RESNET18_GROUPS = [
    "conv1", "layer1.0.conv1", "layer1.1.conv1", "layer2.0.conv1", "layer2.0.conv2",
    "layer2.1.conv1", "layer3.0.conv1", "layer3.0.conv2", "layer3.1.conv1", "layer4.0.conv1",
    "layer4.0.conv2", "layer4.1.conv1",
]


def _groups(name, **kw):
    model = make_model(name)
    return model, ap.prunable_groups(model, make_input(), **kw)


def test_resnet18_names_members_and_channels():
    model, groups = _groups("resnet18")
    by = {g.name: g for g in groups}
    assert [g.name for g in groups] == RESNET18_GROUPS

    # the stem group is coupled through the residual adds of layer1
    stem = by["conv1"]
    assert stem.channels == 64
    assert set(stem.members) == {"conv1", "bn1", "layer1.0.conv2", "layer1.0.bn2",
                                 "layer1.1.conv2", "layer1.1.bn2"}
    assert by["layer1.0.conv1"].members == ("layer1.0.conv1", "layer1.0.bn1")
    assert by["layer1.0.conv1"].channels == 64

    # a downsampling stage: named after its earliest module, not the torch-pruning root
    stage = by["layer2.0.conv2"]
    assert stage.channels == 128
    assert {"layer2.0.conv2", "layer2.0.bn2", "layer2.0.downsample.0", "layer2.0.downsample.1",
            "layer2.1.conv2", "layer2.1.bn2"} == set(stage.members)
    assert by["layer4.0.conv2"].channels == 512
    assert by["layer4.1.conv1"].channels == 512


@pytest.mark.parametrize("name", ALL_MODELS)
def test_names_are_earliest_member_and_head_is_never_cut(name):
    model, groups = _groups(name)
    order = {n: i for i, (n, _) in enumerate(model.named_modules())}
    modules = dict(model.named_modules())
    assert groups, "every test model has prunable groups"
    assert len({g.name for g in groups}) == len(groups), "group names must be unique"
    head = HEADS[name]
    assert isinstance(modules[head], (nn.Linear, nn.Conv2d))
    for g in groups:
        assert g.name in g.members
        assert g.name == min(g.members, key=order.__getitem__)
        assert list(g.members) == sorted(g.members, key=order.__getitem__)
        assert head not in g.members, f"{head} (the classifier) would lose outputs in {g.name}"
        for member in g.members:
            m = modules[member]
            if isinstance(m, nn.Conv2d):
                assert m.out_channels == g.channels, (g.name, member)
            elif isinstance(m, nn.modules.batchnorm._BatchNorm):
                assert m.num_features == g.channels, (g.name, member)
            elif isinstance(m, nn.Linear):
                assert m.out_features == g.channels, (g.name, member)
    # groups come in model order
    assert [g.name for g in groups] == sorted((g.name for g in groups), key=order.__getitem__)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_names_identical_across_fresh_models(name):
    a = make_model(name, seed=0)
    b = make_model(name, seed=1)
    ga = ap.prunable_groups(a, make_input(size=32))
    gb = ap.prunable_groups(b, make_input(size=64))
    assert [(g.name, g.members, g.channels) for g in ga] == \
        [(g.name, g.members, g.channels) for g in gb]
    assert group_fingerprint(ga) == group_fingerprint(gb)


def test_toy_model_residual_and_concat_groups():
    model, groups = _groups("toy")
    assert [(g.name, g.channels) for g in groups] == TOY_GROUPS
    by = {g.name: g for g in groups}
    # residual: the stem and the block's second conv are one group
    assert set(by["stem.0"].members) == {"stem.0", "stem.1", "block_conv2", "block_bn2"}
    # concat: each branch is its own group, and fuse.0 (which reads the concat) is not in them
    assert set(by["branch_a.0"].members) == {"branch_a.0", "branch_a.1"}
    assert set(by["branch_b.0"].members) == {"branch_b.0", "branch_b.1"}
    assert all("fc" not in g.members for g in groups)


@pytest.mark.parametrize("name,group,min_convs", [
    ("resnet18", "conv1", 3), ("resnet18", "layer3.0.conv2", 3), ("mobilenet_v2", None, 2),
    ("toy", "stem.0", 2)])
def test_residual_group_has_several_convs(name, group, min_convs):
    model, groups = _groups(name)
    modules = dict(model.named_modules())

    def n_convs(g):
        return sum(isinstance(modules[m], nn.Conv2d) and modules[m].groups == 1 for m in g.members)

    if group is None:  # mobilenet_v2: some group must span the projection convs of a residual stage
        assert max(n_convs(g) for g in groups) >= min_convs
        assert any(set(g.members) >= {"features.2.conv.2", "features.3.conv.2"} for g in groups)
    else:
        assert n_convs(next(g for g in groups if g.name == group)) >= min_convs


def test_ignored_layers_by_name_and_by_module():
    model = make_model("resnet18")
    x = make_input()
    full = [g.name for g in ap.prunable_groups(model, x)]
    by_name = [g.name for g in ap.prunable_groups(model, x, ignored_layers=["layer1.0.conv1"])]
    assert by_name == [n for n in full if n != "layer1.0.conv1"]
    by_module = [g.name for g in ap.prunable_groups(model, x,
                                                    ignored_layers=[model.layer2[0].conv1])]
    assert by_module == [n for n in full if n != "layer2.0.conv1"]
    # ignoring any one member of a coupled group removes the whole group
    coupled = [g.name for g in ap.prunable_groups(model, x,
                                                  ignored_layers=["layer2.0.downsample.0"])]
    assert "layer2.0.conv2" not in coupled
    assert len(coupled) == len(full) - 1


@pytest.mark.parametrize("training", [True, False])
def test_listing_keeps_weights_and_mode(training):
    model = make_model("mobilenet_v2").train(training)
    snap = snapshot(model)
    ap.prunable_groups(model, make_input())
    assert model.training is training
    assert all(m.training is training for m in model.modules())
    assert_same_state(model, snap)


def test_prune_never_changes_output_shape():
    for name in ("efficientnet_b0", "mobilenetv3_small_100"):
        model = make_model(name)
        x = make_input()
        groups = ap.prunable_groups(model, x)
        ap.prune(model, x, {g.name: 0.5 for g in groups})
        with torch.no_grad():
            assert model(x).shape == (2, 10)




@pytest.mark.parametrize("name,ignored", [
    ("resnet18", "conv1"),           # a member of the residual stem group
    ("resnet18", "layer1.0.conv2"),  # consumes layer1.0.conv1's outputs, itself in a residual group
    ("toy", "fuse.0"),               # reads the concat of both branches
])
def test_ignoring_a_coupled_layer_keeps_the_other_groups_intact(name, ignored):
    model = make_model(name)
    x = make_input()
    full = ap.prunable_groups(model, x)
    groups = ap.prunable_groups(model, x, ignored_layers=[ignored])
    # exactly the groups that would cut the ignored layer's outputs disappear;
    # the rest are unchanged
    assert [(g.name, g.members) for g in groups] == \
        [(g.name, g.members) for g in full if ignored not in g.members]
    modules = dict(model.named_modules())
    out_before = modules[ignored].out_channels
    ap.prune(model, x, {g.name: 0.5 for g in groups}, ignored_layers=[ignored])
    assert modules[ignored].out_channels == out_before
    with torch.no_grad():
        assert model(x).shape == (2, 10)


class _GroupNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.norm = nn.GroupNorm(4, 16)
        self.head = nn.Conv2d(16, 5, 1)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.conv(x))))


@pytest.mark.parametrize("ratio,round_to", [(0.3, None), (0.5, None), (0.9, None), (0.3, 8)])
def test_groupnorm_groups_lose_the_same_channels_per_norm_group(ratio, round_to):
    model = _GroupNormNet().eval()
    x = torch.randn(2, 3, 8, 8)
    graph = PruningGraph(model, x)
    idxs = graph.channels_to_remove(graph.group("conv"), ratio, round_to=round_to)
    per_block = [sum(1 for i in idxs if i // 4 == b) for b in range(4)]
    assert len(set(per_block)) == 1 and 0 < per_block[0] < 4  # equal cuts, one channel kept
    ap.prune(model, x, {"conv": ratio}, round_to=round_to)
    assert model.norm.num_channels == model.conv.out_channels == 16 - len(idxs)
    assert model.norm.num_channels % model.norm.num_groups == 0
    assert model(x).shape == (2, 5, 8, 8)


class _ConcatGroupNormNet(nn.Module):
    # two branches concatenated into one GroupNorm of 4 groups: each branch's group is only half
    # of the norm's channels, so equal cuts per norm group cannot be guaranteed
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 16)
        self.mix, self.head = nn.Conv2d(16, 8, 1), nn.Conv2d(8, 5, 1)

    def forward(self, x):
        x = torch.relu(self.norm(torch.cat([self.a(x), self.b(x)], 1)))
        return self.head(torch.relu(self.mix(x)))


def test_groups_a_groupnorm_sees_only_part_of_are_left_whole_with_a_warning():
    with pytest.warns(UserWarning, match=r"2 channel group\(s\) of _ConcatGroupNormNet reach a "
                                         r"grouped conv or GroupNorm .* left whole: a, b"):
        graph = PruningGraph(_ConcatGroupNormNet().eval(), torch.randn(1, 3, 8, 8))
    assert [g.name for g in graph.groups] == ["mix"]


def test_a_group_through_a_channel_gather_is_left_out():
    # torch-pruning maps channels one to one through index_select (a channel shuffle written as
    # one): cutting channel i before it is not cutting channel i after it, so no such group
    class Gathered(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3)
            self.head = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            order = torch.tensor([1, 0, 3, 2, 5, 4, 7, 6])
            return self.head(self.b(self.a(x).index_select(1, order)))

    names = [g.name for g in ap.prunable_groups(Gathered(), torch.randn(1, 3, 16, 16))]
    assert names == ["b"]


def test_a_group_through_a_concat_torch_pruning_cannot_map_is_left_out():
    # Swin-S/B's PatchMerging: a concat on the channels-last dim behind a long chain of ops, whose
    # input widths torch-pruning cannot infer (it raised TypeError while building the graph)
    class DeepCat(nn.Module):
        def __init__(self):
            super().__init__()
            self.c0, self.a, self.b = nn.Conv2d(3, 6, 1), nn.Conv2d(6, 8, 1), nn.Linear(32, 4)

        def forward(self, x):
            x = self.a(self.c0(x)).permute(0, 2, 3, 1)
            for _ in range(600):
                x = x * 1.0
            x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2],
                           x[:, 1::2, 1::2]], -1)
            return self.b(x).mean((1, 2))

    model, x = DeepCat(), torch.randn(1, 3, 8, 8)
    assert [g.name for g in ap.prunable_groups(model, x)] == ["c0"]
    ap.prune(model, x, {"c0": 0.5})
    assert model.a.in_channels == 3 and model(x).shape == (1, 4)


class Folded(nn.Module):
    """An ECA-style channel attention: a view folds ``a``'s channels into the last axis of a
    Conv1d's input (torch-pruning maps each channel to all of them) and back."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Conv2d(3, 16, 3), nn.Conv2d(16, 8, 3), nn.Conv2d(8, 4, 1)
        self.mix = nn.Conv1d(1, 1, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.a(x)
        w = self.mix(y.mean((2, 3)).view(y.shape[0], 1, -1)).view(y.shape[0], -1, 1, 1)
        return self.head(self.b(y * w.sigmoid()))


@pytest.mark.parametrize("limit, value", [("MAX_FOLDED_INDICES", 500), ("MAX_GROUP_ITEMS", 10),
                                          ("MAX_VISITS", 2)])
def test_a_group_whose_search_goes_over_its_budget_is_left_whole(limit, value, monkeypatch):
    # MAnet, YOLO12, ECA-ResNets, FocalNet: torch-pruning's walk for one group ran for minutes;
    # here the budgets are shrunk so that the walk of the folded group `a` (1056 folded indices,
    # 25 items, one layer reached 3 times) goes over them and `b`'s (6 items) does not
    model, x = Folded(), torch.randn(1, 3, 16, 16)
    monkeypatch.setattr(groups_module, "_FAILED_WALKS", {})  # no verdict of another test
    assert [g.name for g in PruningGraph(model, x, probe=False).groups] == ["a", "b"]
    monkeypatch.setattr(tp_patches, limit, value)
    monkeypatch.setattr(groups_module, "_FAILED_WALKS", {})
    with pytest.warns(UserWarning, match=r"channel group\(s\) of Folded are too entangled for "
                                         r"the dependency search .* left whole: a"):
        graph = PruningGraph(model, x, probe=False)
    # (`mix`, reached from `a`, cannot root a fragment of `a`'s group; with a budget this small
    # its own walk goes over too)
    assert [g.name for g in graph.groups] == ["b"] and graph.over_budget[0] == "a"
    assert tp_patches._WALK is None  # the budget is off outside the listing
    with pytest.warns(UserWarning, match="too entangled"):
        ap.prune(model, x, {"b": 0.5})  # forming a listed group for removal has no budget
    assert model.b.out_channels == 4 and model.a.out_channels == 16 and model(x).shape[1] == 4


class GainConv(nn.Conv2d):
    """A conv with a per-output-channel gain (as timm's weight-standardised ScaledStdConv2d)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gain = nn.Parameter(torch.rand(self.out_channels, 1, 1, 1) + 0.5)

    def forward(self, x):
        return self._conv_forward(x, self.weight * self.gain, self.bias)


def test_per_output_channel_parameters_of_a_conv_subclass_follow_its_outputs(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(GainConv(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 6, 3, groups=1),
                          nn.ReLU(), GainConv(6, 6, 3, groups=6), nn.Conv2d(6, 4, 1)).eval()
    x = torch.randn(1, 3, 16, 16)
    gains = [model[0].gain.detach().clone(), model[4].gain.detach().clone()]
    result = ap.prune(model, x, {"0": 0.5, "2": 0.5})
    kept0 = sorted(set(range(8)) - set(result.plan["0"]["removed"]))
    kept2 = sorted(set(range(6)) - set(result.plan["2"]["removed"]))
    assert torch.equal(model[0].gain, gains[0][kept0])
    assert torch.equal(model[4].gain, gains[1][kept2])  # a depthwise conv: cut through its inputs
    with torch.no_grad():
        out = model(x)
    path = ap.save_pruned(model, tmp_path / "m.pt")
    fresh = nn.Sequential(GainConv(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 6, 3), nn.ReLU(),
                          GainConv(6, 6, 3, groups=6), nn.Conv2d(6, 4, 1))
    with torch.no_grad():
        assert torch.equal(ap.load_pruned(path, fresh).eval()(x), out)


class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 6, 3), nn.Linear(6 * 4, 2)

    def forward(self, x):
        return self.head(self.b(self.a(x)).flatten(1))


def test_a_reshape_torch_pruning_cannot_map_leaves_its_groups_out(monkeypatch):
    # SHViT: torch-pruning's reshape mapping divided by zero while the graph was built
    def fails(graph, node):
        raise ZeroDivisionError("integer division or modulo by zero")

    model, x = Flat(), torch.randn(1, 3, 6, 6)
    assert [g.name for g in ap.prunable_groups(model, x)] == ["a", "b"]
    monkeypatch.setattr(tp_patches, "_tp_update_reshape_index_mapping", fails)
    assert [g.name for g in ap.prunable_groups(model, x)] == ["a"]  # b's outputs are flattened


def test_a_group_whose_walk_torch_pruning_cannot_map_is_left_whole(monkeypatch):
    # EfficientViM: an IndexError inside torch-pruning's concat mapping, for some roots only
    import torch_pruning as tp

    def fails(self, idxs):
        raise IndexError("list index out of range")

    model, x = make_model("toy"), make_input()
    monkeypatch.setattr(groups_module, "_FAILED_WALKS", {})
    monkeypatch.setattr(tp.dependency.index_mapping._ConcatIndexMapping, "__call__", fails)
    with pytest.warns(UserWarning, match=r"cannot be mapped by the dependency search and are "
                                         r"left whole: branch_b.0, branch_a.0"):
        graph = PruningGraph(model, x, probe=False)
    assert graph.unmappable == ["branch_b.0", "branch_a.0"]  # (torch-pruning's order)
    assert [g.name for g in graph.groups] == ["stem.0", "block_conv1", "fuse.0"]


def test_a_later_graph_of_the_same_model_skips_the_failed_walks(monkeypatch):
    # prune() after prunable_groups(), or the sensitivity analysis, builds the graph again: the
    # walks that went over budget (~1 s each on YOLO12) are not repeated, with the same groups
    monkeypatch.setattr(groups_module, "_FAILED_WALKS", {})
    monkeypatch.setattr(tp_patches, "MAX_FOLDED_INDICES", 500)
    walks = []
    original = PruningGraph._walk
    monkeypatch.setattr(PruningGraph, "_walk",
                        lambda self, *a: walks.append(1) or original(self, *a))
    model, x = Folded(), torch.randn(1, 3, 16, 16)
    with pytest.warns(UserWarning, match="too entangled"):
        first = PruningGraph(model, x, probe=False)
    assert walks
    walks.clear()
    with pytest.warns(UserWarning, match="too entangled"):
        again = PruningGraph(Folded(), x, probe=False)
    assert not walks and again.over_budget == first.over_budget == ["a"]
    assert [g.name for g in again.groups] == [g.name for g in first.groups] == ["b"]
