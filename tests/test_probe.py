"""Groups whose removal breaks the model (a layout the dependency graph does not describe) are
found by a probe, left whole with a warning, and the model comes back unchanged."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import autoprune
from autoprune.engine import probe as probe_module
from autoprune.engine.groups import PruningGraph
from autoprune.engine.removal import pruned_temporarily


class FixedView(nn.Module):
    """conv1's 8 channels are read through a view with a hard-coded count (as attention blocks
    read their heads), which pruning conv1 breaks; conv2 prunes fine."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 6, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(6)
        self.head = nn.Conv2d(6, 2, 1)
        self.channels = 8

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        n, _, h, w = y.shape
        y = y.view(n, 2, self.channels // 2, h, w).flatten(1, 2)  # the layout the graph misses
        return self.head(torch.relu(self.bn2(self.conv2(y))))


@pytest.fixture(autouse=True)
def fresh_verdicts(monkeypatch):
    monkeypatch.setattr(probe_module, "_UNSAFE", {})


def test_a_group_that_breaks_the_model_is_left_whole_with_a_warning():
    torch.manual_seed(0)
    model = FixedView().eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        before = model(x)
    with pytest.warns(UserWarning, match="1 of 2 channel groups of FixedView .* left whole: conv1"):
        names = [g.name for g in autoprune.prunable_groups(model, x)]
    assert names == ["conv2"]
    with torch.no_grad():
        assert torch.equal(model(x), before)  # the probe restored everything
    result = autoprune.prune(model, x, {"conv2": 0.5})
    assert model.conv2.out_channels == 3 and model.conv1.out_channels == 8
    assert result.flops_reduction > 0 and model(x).shape == before.shape


def test_without_the_probe_the_group_is_listed_and_pruning_it_breaks_the_model():
    model = FixedView().eval()
    x = torch.randn(2, 3, 16, 16)
    graph = PruningGraph(model, x, probe=False)
    assert [g.name for g in graph.groups] == ["conv1", "conv2"]
    graph.remove(graph.group("conv1"), [0, 1])
    with pytest.raises(RuntimeError):
        model(x)


def test_the_verdict_is_kept_per_architecture_and_input(monkeypatch):
    calls = []
    original = probe_module.unsafe_groups
    monkeypatch.setattr(probe_module, "unsafe_groups",
                        lambda graph, g: calls.append(1) or original(graph, g))
    x = torch.randn(1, 3, 16, 16)
    with pytest.warns(UserWarning):
        PruningGraph(FixedView().eval(), x)
    with pytest.warns(UserWarning):
        PruningGraph(FixedView().eval(), x)
    assert len(calls) == 1
    with pytest.warns(UserWarning):
        PruningGraph(FixedView().eval(), torch.randn(1, 3, 24, 24))
    assert len(calls) == 2


class Stack(nn.Module):
    """16 convs in a row; the outputs of those in ``fixed`` are read through a view with a
    hard-coded channel count (pruning them breaks the model), the rest prune fine."""

    def __init__(self, fixed: set[int]):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1)
                                   for i in range(16))
        self.fixed = fixed
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = torch.relu(conv(x))
            if i in self.fixed:
                n, _, h, w = x.shape
                x = x.view(n, 2, 4, h, w).flatten(1, 2)
        return self.head(x)


@pytest.mark.parametrize("fixed", [set(), {5}, {0, 9, 15}, set(range(16))])
def test_groups_tested_together_give_each_groups_own_verdict(fixed):
    """The probe tests groups together and splits only what fails: its verdict is the one of
    testing each group alone, in fewer forward passes where few groups break (yolov9s: 145
    groups, 34 s -> 2 s)."""
    torch.manual_seed(0)
    model, x = Stack(fixed).eval(), torch.randn(1, 3, 8, 8)
    graph = PruningGraph(model, x, probe=False)
    passes = []
    hook = model.register_forward_pre_hook(lambda m, a: passes.append(1))
    unsafe = probe_module.unsafe_groups(graph, graph.groups)
    hook.remove()
    assert unsafe == [f"convs.{i}" for i in sorted(fixed)]
    alone = []
    for group in graph.groups:  # each group alone, as the probe did one by one before
        try:
            with pruned_temporarily(graph, group, graph.channels_to_remove(group, 0.5)):
                model(x)
        except RuntimeError:
            alone.append(group.name)
    assert unsafe == alone
    if not fixed:  # the recording pass, then all 16 groups together
        assert len(passes) == 2
    elif len(fixed) == 1:  # 9 passes here, against 17 one group at a time
        assert len(passes) < len(graph.groups)
