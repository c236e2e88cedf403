"""Masked, batched evaluation of sensitivity points: equal to real pruning, or a fallback."""
import pytest
import torch
import torch.nn as nn

import autoprune
from autoprune.errors import ConfigError
from autoprune.engine.groups import PruningGraph
from autoprune.engine.masking import (BatchedVariants, NotBatchable, mask_points,
                                      masked_matches_pruned)
from autoprune.engine.sensitivity import pruned_temporarily
from autoprune.engine.store import read_record
from autoprune.tasks.detection import models as yolo


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


def _both(model, eval_fn, tmp_path, options=None, **kw):
    out = {}
    for mode in ("prune", "masked"):
        path = tmp_path / f"{mode}.json"
        out[mode] = autoprune.sensitivity(model, EXAMPLE, eval_fn, sensitivities_file=path,
                                          progress=False, **kw,
                                          options={**(options or {}), "evaluation": mode})
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
                options={"batch_variants": 3})
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
                                 sensitivities_file=tmp_path / "s.json",
                                 progress=False, options={"evaluation": "masked"})
    extra = read_record(tmp_path / "s.json").extra["evaluation"]
    assert extra["points"]["masked"] <= 2 and extra["points"]["pruned"] >= len(sens) * 2 - 1


def test_masked_points_thrown_away_by_the_metric_check_are_not_counted(tmp_path):
    """An eval_fn whose metric drifts from call to call: masked and real outputs agree, the
    metrics of the checked point do not, so masking is switched off and every point is measured
    by a real prune; the file must not claim masked points (it said 2 here, for a chunk whose
    numbers were thrown away)."""
    model = _randomised(Net())
    base = _eval_fn(_data())
    calls = [0]

    def drifting(m):
        calls[0] += 1
        return base(m) + 1e-3 * calls[0]

    sens = autoprune.sensitivity(model, EXAMPLE, drifting, ratios=(0.25, 0.5),
                                 sensitivities_file=tmp_path / "s.json", progress=False,
                                 options={"evaluation": "masked", "prefix_cache": False})
    extra = read_record(tmp_path / "s.json").extra["evaluation"]
    assert extra["points"]["masked"] == 0 and extra["unmaskable_groups"] == []
    assert extra["points"]["pruned"] == sum(len(p) for p in sens.values()) + 1  # + the check


def test_masked_with_prefix_cache_and_early_stop(tmp_path):
    model = _randomised(Net())
    fn = _eval_fn(_data())
    ratios = (0.2, 0.4, 0.6, 0.8)
    ref = autoprune.sensitivity(model, EXAMPLE, fn, ratios=ratios, progress=False,
                                options={"evaluation": "prune", "prefix_cache": False,
                                         "early_stop": 0.01})
    got = autoprune.sensitivity(model, EXAMPLE, fn, ratios=ratios, progress=False,
                                options={"evaluation": "masked", "prefix_cache": True,
                                         "early_stop": 0.01})
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
        autoprune.sensitivity(model, EXAMPLE, _eval_fn(_data(1)), options={"evaluation": "fast"})
    with pytest.raises(ConfigError, match="batch_variants"):
        autoprune.sensitivity(model, EXAMPLE, _eval_fn(_data(1)), options={"batch_variants": 0})


# -- YOLO: masked variants against real pruning where the quantity is well-conditioned -----------
# Detection's metric (mAP50-95 after NMS) is a step function of the raw outputs: on a barely
# trained detector it turns float noise into a visible difference (tests/test_detection.py says
# by how much). Masking is therefore checked here on what it changes directly: the detection
# head's raw outputs before NMS, and a sensitivity analysis whose metric is a smooth function of
# them. The model has random weights with its BatchNorm statistics measured on random inputs, so
# every layer's activations are of order 1 (with Ultralytics' initial statistics deep layers fade
# to float noise and a wrong mask would hide there), and large BN shifts, so a mask that zeroes
# the convolution instead of the post-BN output shows. It runs in float64: masking is exact
# arithmetic (a zeroed channel adds exact zeros), and in float32 the other summation order of a
# convolution with fewer channels, amplified through 20+ random layers, already reaches 1e-4 of
# the output (yolo11n, first layer pruned); in float64 that noise is below 1e-12, while a wrong
# mask (BN shift leaking, wrong channels, swapped variants) moves the outputs by 1e-5 or more.
# tests/test_detection.py checks the trained detector in float32 on real images.
YOLO_TOL = 1e-9   # max |masked - pruned| per output tensor, relative to that tensor's largest value


def _yolo(arch: str) -> nn.Module:
    from autoprune.tasks.detection import DetectionAdapter

    torch.manual_seed(0)
    model = DetectionAdapter(nc=10, input_size=64).build(arch).double()
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # a plain average over the calibration batches
        model.train()
        for _ in range(4):
            model(torch.rand(8, 3, 64, 64, generator=g, dtype=torch.float64))
        for m in bns:
            m.weight.copy_(0.5 + torch.rand(m.num_features, generator=g))
            m.bias.copy_(torch.randn(m.num_features, generator=g))
        # the Detect branches' last convs: logits of order 1 (of order 1000 otherwise, where the
        # box-distribution softmax is an argmax and float noise moves a decoded box)
        head = yolo.detect_head(model)
        last = [branch[-1] for branch in (*head.cv2, *head.cv3)]
        spread: dict[nn.Module, float] = {}
        handles = [c.register_forward_hook(lambda mod, args, out: spread.__setitem__(
            mod, out.std().item())) for c in last]
        model.eval()(torch.rand(8, 3, 64, 64, generator=g, dtype=torch.float64))
        for h in handles:
            h.remove()
        for c in last:
            c.weight.div_(spread[c] / 2)
    return model.eval()


def _head(out) -> dict[str, torch.Tensor]:
    """The raw outputs of Ultralytics' Detect head in eval mode: decoded boxes + class scores,
    box-distribution logits and class logits (before NMS)."""
    y, raw = out
    return {"decoded": y, "box_logits": raw["boxes"], "class_logits": raw["scores"]}


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


def _yolo_setup(arch):
    from autoprune.tasks.detection import DetectionAdapter

    model = _yolo(arch)
    adapter = DetectionAdapter(nc=10, input_size=64)
    example = adapter.example_inputs(model).double()
    return model, example, PruningGraph(model, example, adapter.ignored_layers(model))


@pytest.mark.parametrize("arch", ["yolov8n", "yolo11n"])
def test_yolo_masked_head_outputs_equal_real_pruning(arch):
    """Two ratios of a group and the unmasked model in one batched pass: each masked slice gives
    the head outputs of really pruning those channels, the unmasked slice the unpruned outputs;
    for a spread of groups (stem, split-free C2f/C3k2 halves and bottlenecks, SPPF, neck, the
    Detect branches; C2PSA on yolo11n)."""
    model, _, graph = _yolo_setup(arch)
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    groups = graph.groups[::4]
    worst, weakest = {}, 1.0
    with torch.no_grad():
        ref = _head(model(x))
        for group in groups:
            plans = [graph.channels_to_remove(group, r) for r in (0.3, 0.6)]
            masks = [mask_points(graph, group, idxs) for idxs in plans]
            assert all(m is not None for m in masks), group.name
            with BatchedVariants(model, masks + [[]]) as variants:
                got = []
                for k in range(3):
                    variants.select(k)
                    got.append(_head(model(x)))
            for key in ref:
                assert _rel_diff(got[2][key], ref[key]) <= YOLO_TOL, (group.name, key)
            for idxs, masked in zip(plans, got):
                with pruned_temporarily(graph, group, idxs):
                    pruned = _head(model(x))
                for key in ref:
                    d = _rel_diff(masked[key], pruned[key])
                    if d >= worst.get(key, (0.0, ""))[0]:
                        worst[key] = d, group.name
                # pruning itself moves the outputs far more than the tolerance: not vacuous
                weakest = min(weakest, max(_rel_diff(pruned[k], ref[k]) for k in ref))
    assert all(d <= YOLO_TOL for d, _ in worst.values()), worst
    assert weakest >= 100 * YOLO_TOL, weakest
    assert all(not m._forward_hooks for m in model.modules())


def _smooth_head_metric(model, batches):
    """A higher-is-better metric that is a smooth function of the raw head outputs:
    1 / (1 + |out - ref| / |ref - mean(ref)|) over the box and class logits, averaged over the
    batches, where ref is ``model``'s output now (so the unpruned model scores 1 exactly)."""
    def flat(m, x):
        head = _head(m(x))
        return torch.cat([head["box_logits"], head["class_logits"]], 1)

    with torch.no_grad():
        refs = [flat(model.eval(), x) for x in batches]
    scales = [float((r - r.mean(0)).norm()) for r in refs]

    def fn(m):
        return sum(1.0 / (1.0 + float((flat(m, x) - r).norm()) / s)
                   for x, r, s in zip(batches, refs, scales)) / len(batches)
    return fn


def test_yolo_sensitivity_masked_equals_prune_with_a_smooth_metric(tmp_path):
    """autoprune.sensitivity(evaluation="masked") through its batched-variant path (chunks of 3
    ratios, prefix cache on) gives the losses of evaluation="prune" on yolov8n, for a metric that
    is smooth in the raw outputs; every point but the one checked against a real prune is masked."""
    from autoprune.tasks.detection.models import ignored_layers

    model, example, graph = _yolo_setup("yolov8n")
    names = [g.name for g in graph.groups[::10]]
    g = torch.Generator().manual_seed(4)
    batches = [torch.rand(2, 3, 64, 64, generator=g, dtype=torch.float64) for _ in range(2)]
    ratios = (0.2, 0.4, 0.6, 0.8)
    out = {}
    for mode in ("prune", "masked"):
        path = tmp_path / f"{mode}.json"
        out[mode] = autoprune.sensitivity(
            model, example, _smooth_head_metric(model, batches), groups=names,
            ratios=ratios, ignored_layers=ignored_layers(model), sensitivities_file=path,
            progress=False, options={"evaluation": mode, "batch_variants": 3})
        out[mode + "_extra"] = read_record(path).extra["evaluation"]
    points = len(names) * len(ratios)
    assert out["masked_extra"]["points"] == {"masked": points, "pruned": 1, "reused": 0}
    assert out["masked_extra"]["unmaskable_groups"] == []
    assert out["prune_extra"]["points"]["masked"] == 0
    assert _max_diff(out["prune"], out["masked"]) <= 1e-9
    assert max(loss for pts in out["prune"].values() for loss in pts.values()) > 0.05
