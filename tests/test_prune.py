"""prune(): real channel removal, smaller and still trainable models, round_to, plan contents."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import autoprune as ap
from conftest import REAL_MODELS, assert_one_line, make_input, make_model, outputs


def _consistent(model: nn.Module) -> None:
    """Every layer's channel attributes agree with its tensors."""
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d):
            assert m.weight.shape[0] == m.out_channels, name
            assert m.weight.shape[1] * m.groups == m.in_channels, name
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            assert m.weight.shape[0] == m.num_features == m.running_mean.shape[0], name
        elif isinstance(m, nn.Linear):
            assert tuple(m.weight.shape) == (m.out_features, m.in_features), name


def test_prune_resnet18_shapes_metrics_and_plan(resnet18, x):
    ratios = {"conv1": 0.25, "layer1.0.conv1": 0.5, "layer2.0.conv2": 0.25}
    flops0, params0, size0 = ap.count_flops(resnet18, x), ap.count_params(resnet18), \
        ap.size_mb(resnet18)
    result = ap.prune(resnet18, x, ratios)
    m = result.model
    assert m is resnet18, "prune works in place"

    assert tuple(m.conv1.weight.shape) == (48, 3, 7, 7)
    assert m.bn1.num_features == 48
    assert tuple(m.layer1[0].conv1.weight.shape) == (32, 48, 3, 3)
    assert m.layer1[0].bn1.num_features == 32
    assert tuple(m.layer1[0].conv2.weight.shape) == (48, 32, 3, 3)
    assert tuple(m.layer1[1].conv2.weight.shape) == (48, 64, 3, 3)
    assert tuple(m.layer2[0].conv1.weight.shape) == (128, 48, 3, 3)
    assert tuple(m.layer2[0].downsample[0].weight.shape) == (96, 48, 1, 1)
    assert tuple(m.layer2[0].conv2.weight.shape) == (96, 128, 3, 3)
    assert tuple(m.layer3[0].conv1.weight.shape) == (256, 96, 3, 3)
    assert tuple(m.fc.weight.shape) == (10, 512)
    _consistent(m)

    assert result.flops_before == flops0 and result.params_before == params0
    assert result.flops_after == ap.count_flops(m, x) < flops0
    assert result.params_after == ap.count_params(m) < params0
    assert ap.size_mb(m) < size0
    assert result.flops_reduction == pytest.approx(1 - result.flops_after / flops0)
    assert result.params_reduction == pytest.approx(1 - result.params_after / params0)
    assert 0 < result.flops_reduction < 1

    assert set(result.plan) == set(ratios)
    for group, entry in result.plan.items():
        assert entry["ratio"] == ratios[group]
        assert entry["kept"] == entry["channels"] - len(entry["removed"])
        assert entry["removed"] == sorted(set(entry["removed"]))
        assert all(0 <= i < entry["channels"] for i in entry["removed"])
    assert result.plan["layer1.0.conv1"]["channels"] == 64
    assert result.plan["layer1.0.conv1"]["kept"] == 32
    assert result.plan["conv1"]["kept"] == 48
    assert result.plan["layer2.0.conv2"]["kept"] == 96

    with torch.no_grad():
        assert m(x).shape == (2, 10)


def _zero_channels(conv: nn.Conv2d, bn: nn.BatchNorm2d, consumer: nn.Conv2d, idxs, offset=0):
    with torch.no_grad():
        conv.weight[idxs] = 0
        bn.weight[idxs] = 0
        bn.bias[idxs] = 0
        consumer.weight[:, [offset + i for i in idxs]] = 0


def test_prune_removes_the_least_important_channels_exactly(resnet18, x):
    """Channels made dead (all their weights zero) are the ones removed, and removing them leaves
    the output unchanged: the right slices of every coupled tensor were cut."""
    dead = [3, 7, 20]
    blk = resnet18.layer1[0]
    _zero_channels(blk.conv1, blk.bn1, blk.conv2, dead)
    before = outputs(resnet18, x)
    result = ap.prune(resnet18, x, {"layer1.0.conv1": 3 / 64})
    assert result.plan["layer1.0.conv1"]["removed"] == dead
    assert blk.conv1.out_channels == 61
    torch.testing.assert_close(outputs(resnet18, x), before, rtol=0, atol=1e-5)


def test_prune_concat_branch_cuts_the_right_input_slices(toy, x):
    """branch_b.0 feeds the second half of a torch.cat: its dead channels map to fuse.0's inputs
    8 + i. Pruning both branches at once must keep the offsets right."""
    dead_b = [1, 5, 10]
    dead_a = [6]
    _zero_channels(toy.branch_b[0], toy.branch_b[1], toy.fuse[0], dead_b, offset=8)
    _zero_channels(toy.branch_a[0], toy.branch_a[1], toy.fuse[0], dead_a, offset=0)
    before = outputs(toy, x)
    result = ap.prune(toy, x, {"branch_a.0": 1 / 8, "branch_b.0": 3 / 12})
    assert result.plan["branch_b.0"]["removed"] == dead_b
    assert result.plan["branch_a.0"]["removed"] == dead_a
    assert toy.fuse[0].in_channels == 16
    assert tuple(toy.fuse[0].weight.shape) == (24, 16, 3, 3)
    torch.testing.assert_close(outputs(toy, x), before, rtol=0, atol=1e-5)


def test_choice_of_one_group_does_not_depend_on_others(x):
    ratios = {"stem.0": 0.5, "block_conv1": 0.5, "branch_a.0": 0.5, "branch_b.0": 0.5,
              "fuse.0": 0.5}
    together = ap.prune(make_model("toy"), x, ratios).plan
    for group, ratio in ratios.items():
        alone = ap.prune(make_model("toy"), x, {group: ratio}).plan
        assert alone[group]["removed"] == together[group]["removed"], group


@pytest.mark.parametrize("name", REAL_MODELS)
def test_pruned_model_runs_and_trains_one_step(name):
    model = make_model(name)
    x = make_input(batch=4)
    groups = ap.prunable_groups(model, x)
    result = ap.prune(model, x, {g.name: 0.4 for g in groups})
    assert result.flops_after < result.flops_before
    assert result.params_after < result.params_before
    _consistent(model)

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 3]))
    assert torch.isfinite(loss)
    opt.zero_grad()
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, n
    opt.step()
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    with torch.no_grad():
        assert model.eval()(x).shape == (4, 10)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_round_to_keeps_multiples_of_8(name, x):
    model = make_model(name)
    groups = ap.prunable_groups(model, x)
    result = ap.prune(model, x, {g.name: 0.3 for g in groups}, round_to=8)
    modules = dict(model.named_modules())
    for g in groups:
        kept = result.plan[g.name]["kept"]
        assert kept % 8 == 0, (g.name, kept)
        assert kept < g.channels or g.channels <= 8
        for member in g.members:
            m = modules[member]
            if isinstance(m, nn.Conv2d):
                assert m.out_channels == kept, member
    # without round_to the same ratios give counts that are not all multiples of 8
    plain = ap.prune(make_model(name), x, {g.name: 0.3 for g in groups}).plan
    assert any(entry["kept"] % 8 for entry in plain.values())


def test_at_least_one_channel_is_kept(toy, x):
    result = ap.prune(toy, x, {"branch_a.0": 0.95, "fuse.0": 0.99, "stem.0": 0.9})
    assert result.plan["branch_a.0"]["kept"] == 1
    assert result.plan["fuse.0"]["kept"] == 1
    assert result.plan["stem.0"]["kept"] == 2
    assert toy.branch_a[0].out_channels == 1
    assert tuple(toy.fc.weight.shape) == (10, 1)
    with torch.no_grad():
        assert toy(x).shape == (2, 10)


def test_round_to_never_removes_everything(toy, x):
    result = ap.prune(toy, x, {"stem.0": 0.95}, round_to=8)
    assert result.plan["stem.0"]["kept"] == 8


def test_prune_twice_and_zero_ratio(resnet18, x):
    first = ap.prune(resnet18, x, {"layer1.0.conv1": 0.5, "layer1.1.conv1": 0.0})
    assert "layer1.1.conv1" not in first.plan
    assert resnet18.layer1[1].conv1.out_channels == 64
    groups = {g.name: g.channels for g in ap.prunable_groups(resnet18, x)}
    assert groups["layer1.0.conv1"] == 32
    second = ap.prune(resnet18, x, {"layer1.0.conv1": 0.5})
    assert second.plan["layer1.0.conv1"] == {**second.plan["layer1.0.conv1"], "channels": 32,
                                             "kept": 16}
    assert resnet18.layer1[0].conv1.out_channels == 16
    assert second.flops_before == first.flops_after


@pytest.mark.parametrize("criterion", ["l1_norm", "l2_norm", "fpgm", "bn_scale"])
def test_every_criterion_prunes(criterion, toy, x):
    result = ap.prune(toy, x, {"fuse.0": 0.5, "stem.0": 0.25}, criterion=criterion)
    assert toy.fuse[0].out_channels == 12
    assert toy.stem[0].out_channels == 12
    assert result.flops_after < result.flops_before


def test_bn_scale_picks_smallest_bn_gamma(toy, x):
    with torch.no_grad():
        toy.fuse[1].weight.fill_(1.0)
        toy.fuse[1].weight[[2, 9, 17]] = 0.01
    result = ap.prune(toy, x, {"fuse.0": 3 / 24}, criterion="bn_scale")
    assert result.plan["fuse.0"]["removed"] == [2, 9, 17]


@pytest.mark.parametrize("training", [True, False])
def test_prune_keeps_mode(training, toy, x):
    toy.train(training)
    ap.prune(toy, x, {"fuse.0": 0.5})
    assert toy.training is training


@pytest.mark.parametrize("bad", [1, 1.0, -0.1, 1.5, float("nan"), "0.3", None, True])
def test_prune_bad_ratio(bad, toy, x):
    before = copy.deepcopy(toy.state_dict())
    with pytest.raises(ap.ConfigError) as info:
        ap.prune(toy, x, {"fuse.0": bad})
    assert_one_line(info)
    assert all(torch.equal(v, before[k]) for k, v in toy.state_dict().items())


@pytest.mark.parametrize("kw", [{"round_to": 0}, {"round_to": -8}, {"round_to": "8"},
                                {"criterion": "random"}])
def test_prune_bad_options(kw, toy, x):
    with pytest.raises(ap.ConfigError) as info:
        ap.prune(toy, x, {"fuse.0": 0.5}, **kw)
    assert_one_line(info)
    assert toy.fuse[0].out_channels == 24


def test_prune_unknown_group_changes_nothing(resnet18, x):
    with pytest.raises(ap.ConfigError) as info:
        ap.prune(resnet18, x, {"layer1.0.conv1": 0.5, "layer9.0.conv1": 0.5})
    assert "layer9.0.conv1" in assert_one_line(info)
    assert resnet18.layer1[0].conv1.out_channels == 64
    # a module that exists but is not a group name (a member of the stem group)
    with pytest.raises(ap.ConfigError):
        ap.prune(resnet18, x, {"layer1.0.conv2": 0.5})
