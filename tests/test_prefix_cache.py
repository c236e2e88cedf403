"""Replaying the unchanged first part of the network gives exactly the same sensitivities."""
import torch
import torchvision

import autoprune
from autoprune.engine.prefix_cache import PrefixCache
from autoprune.flow.training import evaluate_topk


def _setup(model):
    torch.manual_seed(0)
    model.eval()
    xs = torch.randn(96, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    ys = model(xs).argmax(1)
    ys[::3] = (ys[::3] + 1) % 10  # a baseline below 1, so pruning can move it both ways
    batches = [(xs[i:i + 32], ys[i:i + 32]) for i in range(0, 96, 32)]
    return lambda m: evaluate_topk(m, batches, device=torch.device("cpu"), topk=(1,))["top1"]


def test_cached_equals_uncached_and_skips_stages(monkeypatch):
    model = torchvision.models.resnet18(num_classes=10)
    eval_fn = _setup(model)
    groups = ["conv1", "layer2.0.conv1", "layer3.0.conv1", "layer3.1.conv1", "layer4.0.conv1"]
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 32, 32), eval_fn, groups=groups,
                                  ratios=(0.3, 0.7), progress=False,
                                  options={"prefix_cache": False})
    skipped = []
    original = PrefixCache.skipping_before

    def spy(self, first):
        cm = original(self, first)
        class Wrap:
            def __enter__(s):
                n = cm.__enter__()
                skipped.append(n)
                return n
            def __exit__(s, *a):
                return cm.__exit__(*a)
        return Wrap()
    monkeypatch.setattr(PrefixCache, "skipping_before", spy)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    cached = autoprune.sensitivity(model, torch.randn(1, 3, 32, 32), eval_fn, groups=groups,
                                   ratios=(0.3, 0.7), progress=False,
                                   options={"prefix_cache": True})
    assert cached == plain
    assert max(skipped) >= 5  # layer4 groups replay the stem, layer1, layer2 and layer3
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert all("forward" not in m.__dict__ for m in model.modules())  # patches removed


def test_unknown_inputs_are_computed_normally():
    model = torchvision.models.resnet18(num_classes=10).eval()
    cache = PrefixCache(model)
    x, other = torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32)
    with cache.recording(), torch.no_grad():
        ref = model(x)
    with torch.no_grad():
        expected_other = model(other)
    assert cache.enabled
    with cache.skipping_before(10 ** 9) as n, torch.no_grad():
        assert n > 0
        assert torch.equal(model(x.clone()), ref)            # a recorded batch: replayed
        assert torch.equal(model(other), expected_other)      # an unknown batch: computed
    assert all("forward" not in m.__dict__ for m in model.modules())
