"""Masked, batched evaluation of sensitivity points: equal to real pruning, or a fallback."""
import pytest
import torch
import torch.nn as nn

import autoprune
from autoprune.errors import ConfigError
from autoprune.groups import PruningGraph
from autoprune.masking import BatchedVariants, NotBatchable, mask_points, masked_matches_pruned
from autoprune.sensitivity import pruned_temporarily
from autoprune.store import read_record


class Net(nn.Module):
    """conv-norm-act x3 with a residual add, then a hidden Linear layer."""

    def __init__(self, act=nn.ReLU, norm=nn.BatchNorm2d):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), norm(16), act())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32),
                                  nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc1 = nn.Linear(32, 24)
        self.fc2 = nn.Linear(24, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.block(x)
        return self.fc2(torch.relu(self.fc1(self.down(x))))


def _randomised(model: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # BN shifts make a wrong mask visible
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.5)
    return model.eval()


def _data(n=3, batch=8):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(batch, 3, 16, 16, generator=g) for _ in range(n)]


def _eval_fn(batches):
    """A continuous metric (mean top probability), so any output difference shows."""
    def fn(model):
        return sum(model(x).softmax(1).max(1).values.mean().item() for x in batches) / len(batches)
    return fn


EXAMPLE = torch.randn(1, 3, 16, 16)


def _both(model, eval_fn, tmp_path, **kw):
    out = {}
    for mode in ("prune", "masked"):
        path = tmp_path / f"{mode}.json"
        out[mode] = autoprune.sensitivity(model, EXAMPLE, eval_fn, sensitivities_file=path,
                                          evaluation=mode, progress=False, **kw)
        out[mode + "_extra"] = read_record(path).extra["evaluation"]
    return out


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max(abs(a[n][r] - b[n][r]) for n in a for r in a[n])


def test_masked_points_equal_real_pruning(tmp_path):
    model = _randomised(Net())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = _both(model, _eval_fn(_data()), tmp_path, ratios=(0.25, 0.5, 0.75))
    assert _max_diff(out["prune"], out["masked"]) <= 1e-4
    assert out["masked_extra"]["points"]["masked"] >= 6
    assert out["masked_extra"]["unmaskable_groups"] == []
    assert out["prune_extra"]["points"]["masked"] == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any("forward" in m.__dict__ for m in model.modules())  # wrappers removed
    assert all(not m._forward_hooks for m in model.modules())


def test_batched_chunks_smaller_than_the_ratios(tmp_path):
    model = _randomised(Net())
    out = _both(model, _eval_fn(_data()), tmp_path, ratios=(0.2, 0.4, 0.6, 0.8),
                batch_variants=3)
    assert _max_diff(out["prune"], out["masked"]) <= 1e-4
    assert out["masked_extra"]["batch_variants"] == 3


def test_sigmoid_after_norm_falls_back_to_real_pruning(tmp_path):
    model = _randomised(Net(act=nn.Sigmoid))  # sigmoid(0) = 0.5: a zeroed channel is not gone
    out = _both(model, _eval_fn(_data()), tmp_path, ratios=(0.25, 0.5))
    assert "stem.0" in out["masked_extra"]["unmaskable_groups"]
    assert _max_diff(out["prune"], out["masked"]) <= 1e-4


def test_channel_norm_falls_back(tmp_path):
    model = _randomised(Net(norm=lambda c: nn.GroupNorm(1, c)))  # statistics over all channels
    out = _both(model, _eval_fn(_data()), tmp_path, ratios=(0.25, 0.5))
    assert "stem.0" in out["masked_extra"]["unmaskable_groups"]
    assert _max_diff(out["prune"], out["masked"]) <= 1e-4


def test_eval_fn_with_changing_batches_switches_masking_off(tmp_path):
    model = _randomised(Net())
    calls = [0]

    def shuffled(m):  # another batch order on every call: variants cannot be replayed
        calls[0] += 1
        g = torch.Generator().manual_seed(calls[0])
        xs = [torch.randn(8, 3, 16, 16, generator=g) for _ in range(2)]
        return sum(m(x).softmax(1).max(1).values.mean().item() for x in xs) / 2

    sens = autoprune.sensitivity(model, EXAMPLE, shuffled, ratios=(0.25, 0.5),
                                 sensitivities_file=tmp_path / "s.json", evaluation="masked",
                                 progress=False)
    extra = read_record(tmp_path / "s.json").extra["evaluation"]
    assert extra["points"]["masked"] <= 2 and extra["points"]["pruned"] >= len(sens) * 2 - 1


def test_masked_with_prefix_cache_and_early_stop(tmp_path):
    model = _randomised(Net())
    fn = _eval_fn(_data())
    kw = dict(ratios=(0.2, 0.4, 0.6, 0.8), early_stop=0.01)
    ref = autoprune.sensitivity(model, EXAMPLE, fn, evaluation="prune", prefix_cache=False,
                                progress=False, **kw)
    got = autoprune.sensitivity(model, EXAMPLE, fn, evaluation="masked", prefix_cache=True,
                                progress=False, **kw)
    assert {n: sorted(p) for n, p in ref.items()} == {n: sorted(p) for n, p in got.items()}
    assert _max_diff(ref, got) <= 1e-4


def test_masked_check_detects_a_wrong_mask():
    model = _randomised(Net())
    graph = PruningGraph(model, EXAMPLE)
    group = graph.group("stem.0")
    idxs = graph.channels_to_remove(group, 0.5)
    x = _data(1)[0]
    with torch.no_grad():
        ref = model(x)

    def pruned():
        with pruned_temporarily(graph, group, idxs):
            return model(x)
    assert masked_matches_pruned(model, graph, group, idxs, lambda: model(x), ref, pruned)
    other = [i for i in range(group.channels) if i not in idxs][: len(idxs)]
    assert not masked_matches_pruned(model, graph, group, other, lambda: model(x), ref, pruned)


def test_mask_points_cover_conv_bn_and_linear():
    model = _randomised(Net())
    graph = PruningGraph(model, EXAMPLE)
    points = mask_points(graph, graph.group("fc1"), [0, 3])
    assert [(type(m).__name__, c) for m, c in points] == [("Linear", [0, 3])]
    kinds = {type(m).__name__ for m, _ in mask_points(graph, graph.group("stem.0"), [1])}
    assert kinds == {"Conv2d", "BatchNorm2d"}


def test_batched_variants_split_nested_outputs_and_refuse_foreign_batches():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            y = self.conv(x)
            return {"a": y, "b": (y.sum((2, 3)), None)}

    model = Two().eval()
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad(), BatchedVariants(model, [[(model.conv, [0])], []]) as v:
        v.select(0)
        first = model(x)
        v.select(1)
        second = model(x)
        assert torch.equal(second["a"], model.conv(x))
        assert first["a"][:, 0].abs().max() == 0 and first["b"][1] is None
        v.select(1)
        with pytest.raises(NotBatchable):
            model(torch.randn(2, 3, 4, 4))


def test_bad_evaluation_settings_are_refused():
    model = _randomised(Net())
    with pytest.raises(ConfigError, match="evaluation="):
        autoprune.sensitivity(model, EXAMPLE, _eval_fn(_data(1)), evaluation="fast")
    with pytest.raises(ConfigError, match="batch_variants"):
        autoprune.sensitivity(model, EXAMPLE, _eval_fn(_data(1)), batch_variants=0)
