"""The folded, channels-last evaluation of a point: the same numbers up to float rounding, the
model given back untouched, only safe BatchNorms folded, off where it differs or does not pay."""
import json

import pytest
import timm
import torch
import torch.nn as nn
import torchvision

import autoprune
from autoprune.engine import fused_eval
from autoprune.engine.fused_eval import FusedEval, conv_bn_pairs
from autoprune.engine.groups import PruningGraph
from autoprune.engine.incremental import Step
from autoprune.errors import ConfigError


def _trained_like(model):
    """Running statistics and affine weights away from their defaults (folding must matter)."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) - 0.5)
    return model.eval()


def _eval_fn(size=64, n=32):
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(n, 3, size, size, generator=g), torch.randint(0, 10, (n,), generator=g)

    def eval_fn(model):  # a continuous metric: folding moves it by float rounding only
        out = torch.cat([model(xs[i:i + 16]) for i in range(0, n, 16)])
        return float(-nn.functional.cross_entropy(out, ys))
    return eval_fn


@pytest.fixture
def forced(monkeypatch):
    """The folded evaluation used at the tests' small inputs, in the layout asked for."""
    def force(channels_last):
        monkeypatch.setattr(fused_eval, "MIN_SIDE", 0)
        init = FusedEval.__init__

        def layout(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.channels_last = channels_last
        monkeypatch.setattr(FusedEval, "__init__", layout)
    return force


def _close(a, b, tol=1e-5):
    assert a.keys() == b.keys()
    for g in a:
        assert a[g].keys() == b[g].keys()
        for r in a[g]:
            assert abs(a[g][r] - b[g][r]) <= tol * max(1.0, abs(b[g][r])), (g, r)


@pytest.mark.parametrize("channels_last,prefix_cache", [(False, False), (True, True)])
def test_folded_points_equal_plain_ones_and_the_model_comes_back(forced, tmp_path,
                                                                 channels_last, prefix_cache):
    model = _trained_like(torchvision.models.resnet18(num_classes=10))
    eval_fn = _eval_fn()
    groups = ["conv1", "layer2.0.conv1", "layer3.1.conv1", "layer4.0.conv1", "layer4.1.conv1"]
    kwargs = dict(groups=groups, ratios=(0.3, 0.7), progress=False)
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                  options={"fused_eval": False, "prefix_cache": prefix_cache})
    params = {n: p for n, p in model.named_parameters()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    forced(channels_last)
    path = tmp_path / "s.json"
    folded = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                   sensitivities_file=path,
                                   options={"fused_eval": True, "prefix_cache": prefix_cache})
    _close(folded, plain)
    assert any(folded[g][r] != plain[g][r] for g in plain for r in plain[g])  # it did fold
    assert all(p is params[n] for n, p in model.named_parameters())  # its own Parameters
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert all(p.is_contiguous() for p in model.parameters())  # layout given back
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert json.loads(path.read_text())["extra"]["evaluation"]["fused_eval"] is True


def test_only_a_batchnorm_fed_by_a_plain_conv_alone_is_folded():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.bn_a = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)  # folded
            self.b, self.bn_b = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)  # b also
            self.c, self.bn_c = nn.Conv2d(8, 8, 1), nn.BatchNorm2d(16)  # after a concat
            self.head = nn.Conv2d(16, 4, 1)

        def forward(self, x):
            x = self.bn_a(self.a(x))
            y = self.b(x)
            z = self.bn_b(y) + y  # b's output is used twice: not foldable
            return self.head(self.bn_c(torch.cat([self.c(z), z], 1)))

    net = Net().eval()
    pairs = conv_bn_pairs(PruningGraph(net, torch.randn(1, 3, 16, 16)).dg)
    assert pairs == [(net.a, net.bn_a)]


def test_batchnorm_act_keeps_its_activation_when_folded():
    model = _trained_like(timm.create_model("mobilenetv3_small_050", num_classes=10))
    fused = FusedEval(model, PruningGraph(model, torch.randn(1, 3, 64, 64)).dg)
    assert any(type(bn).__name__ == "BatchNormAct2d" for bn in fused.bn_of.values())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        plain = model(x)
        for layout in (False, True):
            fused.channels_last = layout
            with fused.applied():
                torch.testing.assert_close(model(x), plain, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("wrong_by", [1.01, None])
def test_a_fold_that_moves_the_metric_is_switched_off(forced, monkeypatch, tmp_path, wrong_by):
    """Checked on the metric, not the outputs: RefEval-like metrics (a norm over a spread near
    zero) magnify float rounding, and a wrong fold or an error must leave the numbers plain."""
    model = _trained_like(torchvision.models.resnet18(num_classes=10))
    eval_fn = _eval_fn()
    kwargs = dict(groups=["layer3.1.conv1"], ratios=(0.5,), progress=False)
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                  options={"prefix_cache": False, "fused_eval": False})
    original = fused_eval._folded

    def wrong(conv, bn, channels_last):
        if wrong_by is None:
            raise RuntimeError("a layout this model cannot run in")
        weight, bias = original(conv, bn, channels_last)
        return weight * wrong_by, bias
    monkeypatch.setattr(fused_eval, "_folded", wrong)
    forced(True)
    path = tmp_path / "s.json"
    assert autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                 sensitivities_file=path,
                                 options={"prefix_cache": False}) == plain
    assert json.loads(path.read_text())["extra"]["evaluation"]["fused_eval"] is False


def test_used_from_160_px_a_side_so_small_inputs_keep_plain_numbers(tmp_path):
    assert fused_eval.pays_at((torch.zeros(1, 3, 160, 200),))
    assert not fused_eval.pays_at((torch.zeros(1, 3, 128, 640),))
    assert not fused_eval.pays_at((torch.zeros(4, 10),))
    model = _trained_like(torchvision.models.resnet18(num_classes=10))
    eval_fn = _eval_fn()
    path = tmp_path / "s.json"
    kwargs = dict(groups=["layer3.1.conv1"], ratios=(0.5,), progress=False)
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                  options={"fused_eval": False})
    assert autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                 sensitivities_file=path) == plain
    assert json.loads(path.read_text())["extra"]["evaluation"]["fused_eval"] is False


def test_fused_eval_must_be_true_or_false():
    with pytest.raises(ConfigError, match="fused_eval='yes' must be True or False"):
        autoprune.sensitivity(nn.Sequential(nn.Conv2d(3, 4, 3)), torch.randn(1, 3, 8, 8),
                              lambda m: 1.0, options={"fused_eval": "yes"}, progress=False)


def test_an_adaptive_analysis_checks_the_fold_on_the_first_per_image_scores(forced, monkeypatch):
    """Where the evaluation reports per-image scores, the check compares the first
    CHECK_IMAGES of them (not a whole extra evaluation); a wrong fold is switched off there."""

    model = _trained_like(torchvision.models.resnet18(num_classes=10))
    fused = FusedEval(model, PruningGraph(model, torch.randn(1, 3, 64, 64)).dg)
    g = torch.Generator().manual_seed(2)
    xs = torch.randn(6, 16, 3, 64, 64, generator=g)
    seen = []

    def steps():
        for x in xs:
            seen.append(len(x))
            yield Step(images=len(x), scores=model(x).max(1).values)
    with torch.no_grad():
        base = torch.cat([model(x).max(1).values for x in xs]).double()
        monkeypatch.setattr(fused_eval, "CHECK_IMAGES", 32)
        assert fused.check_scores(steps, base, images=32) and sum(seen) == 32
        wrong = FusedEval(model, PruningGraph(model, torch.randn(1, 3, 64, 64)).dg)
        assert not wrong.check_scores(steps, base + 1e-2, images=32)
        assert not wrong.enabled


class _Top1:
    """Top-1 reported image by image (the incremental protocol), in a fixed order."""

    def __init__(self, x, y):
        self.x, self.y, self.images = x, y, len(x)

    def __call__(self, model):
        return float((model(self.x).argmax(1) == self.y).double().mean())

    def incremental(self, model, start=0):
        for i in range(start, len(self.x), 32):
            yield Step(len(self.x[i:i + 32]),
                       scores=(model(self.x[i:i + 32]).argmax(1) == self.y[i:i + 32]).double())


def test_an_adaptive_analysis_runs_folded_and_says_so(forced, monkeypatch, tmp_path):
    model = _trained_like(torchvision.models.resnet18(num_classes=10))
    g = torch.Generator().manual_seed(3)
    x = torch.randn(128, 3, 64, 64, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    y[::4] = (y[::4] + 1) % 10  # top-1 0.75: room to fall
    monkeypatch.setattr(fused_eval, "CHECK_IMAGES", 64)
    forced(True)
    path = tmp_path / "a.json"
    state = {k: v.clone() for k, v in model.state_dict().items()}
    table = autoprune.sensitivity(model, x[:1], _Top1(x, y), groups=["layer3.0.conv1"],
                                  ratios=(0.3, 0.6, 0.9), sensitivities_file=path,
                                  progress=False, options={"adaptive": True})
    ev = json.loads(path.read_text())["extra"]["evaluation"]
    assert ev["fused_eval"] is True and table["layer3.0.conv1"]
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_a_pruned_variant_the_folded_layout_cannot_run_is_evaluated_plain(forced, monkeypatch):
    model = _trained_like(torchvision.models.resnet18(num_classes=10))
    eval_fn = _eval_fn()
    kwargs = dict(groups=["layer3.1.conv1", "layer4.0.conv1"], ratios=(0.3, 0.6),
                  progress=False)
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                  options={"fused_eval": False, "prefix_cache": False})
    original = FusedEval.applied
    raised = []

    def only_unpruned(self, changed=(), skipped=()):
        if list(changed):  # a point: this layout "cannot run" it
            raised.append(1)
            raise RuntimeError("view size is not compatible with input tensor's size and stride")
        return original(self, changed, skipped)
    monkeypatch.setattr(FusedEval, "applied", only_unpruned)
    forced(True)
    got = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                options={"prefix_cache": False})
    assert got == plain  # every point plain (the first one retried), the same numbers
    assert raised == [1]  # tried folded once, then off for good
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_an_evaluation_that_folds_its_own_copy_gets_the_layout_not_a_second_fold(forced,
                                                                                 tmp_path):
    """An eval_fn that evaluates a copy with each BatchNorm folded (as Ultralytics' validator
    does; it says so with ``folds_batchnorm``) and hands the copy to ``evaluated_copy.follow``:
    the analysis folds nothing itself (a second fold would move the metric, its check would
    fail and turn it off), lays out the copy's 3x3 weights channels-last while points are
    evaluated, and its table equals the plain one within float rounding."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    from autoprune.engine.evaluated_copy import follow
    from autoprune.engine.fast_copy import fast_deepcopy

    def fuse(net):  # resnet's BatchNorms folded into their convs, each one's name kept
        for parent in list(net.modules()):
            for conv, bn in (("conv1", "bn1"), ("conv2", "bn2"), ("0", "1")):
                if isinstance(getattr(parent, bn, None), nn.BatchNorm2d) and \
                        isinstance(getattr(parent, conv, None), nn.Conv2d):
                    setattr(parent, conv, fuse_conv_bn_eval(getattr(parent, conv),
                                                            getattr(parent, bn)))
                    setattr(parent, bn, nn.Identity())
        return net

    model = _trained_like(torchvision.models.resnet18(num_classes=10))
    plain_eval = _eval_fn()
    laid_out = []

    def eval_fn(m):
        net = fuse(fast_deepcopy(m))  # BatchNorms folded into their convs, on a copy
        follow(m, net)
        laid_out.append(all(c.weight.is_contiguous(memory_format=torch.channels_last)
                            for c in net.modules()
                            if isinstance(c, nn.Conv2d) and c.kernel_size != (1, 1)))
        return plain_eval(net)
    eval_fn.folds_batchnorm = True
    groups = ["layer2.0.conv1", "layer3.1.conv1", "layer4.0.conv1", "layer4.1.conv1"]
    kwargs = dict(groups=groups, ratios=(0.3, 0.7), progress=False)
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                  options={"fused_eval": False})
    assert not any(laid_out)
    forced(True)
    path = tmp_path / "s.json"
    laid_out.clear()
    folded = autoprune.sensitivity(model, torch.randn(1, 3, 64, 64), eval_fn, **kwargs,
                                   sensitivities_file=path, options={"fused_eval": True})
    assert json.loads(path.read_text())["extra"]["evaluation"]["fused_eval"] is True
    assert sum(laid_out) >= 8 and not laid_out[0]  # every point; not the baseline
    _close(folded, plain)
    assert all(p.is_contiguous() for p in model.parameters())
    assert all("forward" not in m.__dict__ for m in model.modules())
