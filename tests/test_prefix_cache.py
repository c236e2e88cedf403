"""Replaying the unchanged first part of the network gives exactly the same sensitivities."""
import pytest
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


def _held_bytes(cache):
    tensors = list(cache.inputs) + [t for ts in cache.outputs.values() for t in ts]
    return sum(t.numel() * t.element_size() for t in tensors)


def test_a_recording_over_its_budget_never_holds_more_than_the_budget():
    """resnet50's stage outputs at 224 px are about 16 MB an image: the recording pass used to
    keep every batch's outputs and only then find them over budget (2,000 images: 32 GB)."""
    model = torchvision.models.resnet18(num_classes=10).eval()
    xs = torch.randn(4, 8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    one_batch = PrefixCache(model, max_bytes=1 << 40)
    with one_batch.recording(), torch.no_grad():
        model(xs[0])
    per_batch = _held_bytes(one_batch)
    cache = PrefixCache(model, max_bytes=int(per_batch * 2.5))  # two batches fit, not four
    peaks = []
    with cache.recording(), torch.no_grad():
        for x in xs:
            model(x)
            peaks.append(_held_bytes(cache))
    assert peaks[1] == 2 * per_batch and peaks[2] == peaks[3] == 0  # dropped at once
    assert max(peaks) <= cache.max_bytes and not cache.enabled
    assert cache.outputs == {} and cache.inputs == []


def test_the_budget_is_a_third_of_the_available_memory_at_least_one_gib(monkeypatch, tmp_path):
    from autoprune.engine import memory, prefix_cache

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)

    def meminfo(kib):
        path = tmp_path / f"meminfo{kib}"
        path.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {kib} kB\n")
        monkeypatch.setattr(memory, "open", lambda *a, **k: path.open(), raising=False)

    meminfo(30 * 1024 ** 2)  # 30 GiB available
    assert prefix_cache.memory_budget() == 10 * 1024 ** 3
    assert PrefixCache(torch.nn.Linear(2, 2)).max_bytes == 10 * 1024 ** 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two torchrun ranks on this machine share it
    assert prefix_cache.memory_budget() == 5 * 1024 ** 3
    meminfo(1024 ** 2)  # 1 GiB available: the floor
    assert prefix_cache.memory_budget() == prefix_cache.MIN_BUDGET
    meminfo(30 * 1024 ** 2)
    # a model on a GPU keeps its outputs there, beside the masked evaluation's variants: 1 GiB
    assert prefix_cache.memory_budget(torch.device("cuda:0")) == prefix_cache.MIN_BUDGET
    assert prefix_cache.memory_budget(torch.device("cpu")) == 5 * 1024 ** 3  # 2 ranks


def test_the_estimate_takes_the_recordings_copies_off_its_timed_pass(monkeypatch):
    """The full analysis's ETA is timed on the pass that records the cache; copying the stage
    outputs is not part of what a point costs (resnet50 at 224 px: 186 ms an image said, 84
    paid)."""
    import time as clock

    from autoprune.engine import cost, prefix_cache

    def slow_copy(t):
        clock.sleep(0.02)
        return t.detach().clone()

    monkeypatch.setattr(prefix_cache, "_copy", slow_copy)
    said = {}
    real = cost.estimate  # what announce() calls

    def spy(*args, **kwargs):
        said["timed"] = kwargs["timed"]
        return real(*args, **kwargs)

    monkeypatch.setattr(cost, "estimate", spy)
    model = torchvision.models.resnet18(num_classes=10)
    eval_fn = _setup(model)
    recordings = []
    real_recording = PrefixCache.recording

    def recording(self, stop_over_budget=False):
        if stop_over_budget:  # the analysis's recording pass (not the probe's, run first when
            recordings.append(self)  # no earlier test of this process probed resnet18)
        return real_recording(self, stop_over_budget)

    monkeypatch.setattr(PrefixCache, "recording", recording)
    autoprune.sensitivity(model, torch.randn(1, 3, 32, 32), eval_fn,
                          groups=["layer3.0.conv1", "layer4.0.conv1"], ratios=(0.3, 0.7),
                          progress=True)
    (cache,) = recordings
    assert cache.recording_seconds >= 0.02 * 3 * len(cache.stages) * 0.9  # every stage, 3 batches
    assert said["timed"] is not None and said["timed"] < cache.recording_seconds / 2


def test_a_recording_made_only_to_record_stops_once_over_budget(monkeypatch):
    """The full analysis's recording pass is an extra evaluation: over budget it stops there
    (the analysis goes on without the cache, with the same numbers) instead of finishing."""
    from autoprune.engine import prefix_cache
    from autoprune.engine.prefix_cache import OverBudget

    model = torchvision.models.resnet18(num_classes=10).eval()
    xs = torch.randn(4, 8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    cache = PrefixCache(model, max_bytes=1 << 20)
    done = []
    with pytest.raises(OverBudget), torch.no_grad():
        with cache.recording(stop_over_budget=True):
            for x in xs:
                model(x)
                done.append(1)
    assert done == [] and not cache.enabled and cache.outputs == {}

    eval_fn = _setup(model)
    calls = []
    groups = ["layer3.0.conv1", "layer4.0.conv1"]
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 32, 32), eval_fn, groups=groups,
                                  ratios=(0.3, 0.7), progress=False,
                                  options={"prefix_cache": False})
    monkeypatch.setattr(prefix_cache, "memory_budget", lambda device=None: 1 << 20)
    original = PrefixCache.recording

    def spy(self, stop_over_budget=False):
        calls.append(stop_over_budget)
        return original(self, stop_over_budget)
    monkeypatch.setattr(PrefixCache, "recording", spy)
    assert autoprune.sensitivity(model, torch.randn(1, 3, 32, 32), eval_fn, groups=groups,
                                 ratios=(0.3, 0.7), progress=False) == plain
    assert calls == [True]


class _ConvBN(torch.nn.Module):
    """conv, BatchNorm, ReLU; ``fuse`` folds the BatchNorm into the conv and deletes it, as
    Ultralytics' ``Conv.fuse`` does (its name is gone from the fused copy)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(cout)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))

    def forward_fuse(self, x):
        return self.act(self.conv(x))

    def fuse(self):
        from torch.nn.utils.fusion import fuse_conv_bn_eval
        self.conv = fuse_conv_bn_eval(self.conv, self.bn)
        del self.bn
        self.forward = self.forward_fuse


def test_the_cache_follows_the_fused_copy_an_evaluation_runs():
    """An eval_fn that evaluates a fused copy of the model (as Ultralytics' validator does): the
    model's own stages never run, so without :func:`follow` the cache could not engage. With it,
    the cache records on the copy, later groups replay the earlier stages on the pruned copies
    (counted: the first stage's conv runs on no point of a later group), the table
    equals the uncached one, and neither the model nor its copies keep a hook or a forward."""
    from autoprune.engine.fast_copy import fast_deepcopy
    from autoprune.engine.prefix_cache import follow

    torch.manual_seed(0)
    model = torch.nn.Sequential(_ConvBN(3, 8), _ConvBN(8, 16), _ConvBN(16, 16), _ConvBN(16, 32),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(32, 10))
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    model.eval()
    xs = torch.randn(96, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ys = model(xs).argmax(1)
    ys[::3] = (ys[::3] + 1) % 10
    batches = [(xs[i:i + 32], ys[i:i + 32]) for i in range(0, 96, 32)]
    copies, first_convs = [], []

    def eval_fn(m):
        net = fast_deepcopy(m).eval()
        for block in net.modules():
            if isinstance(block, _ConvBN):
                block.fuse()
        follow(m, net)
        net[0].conv.register_forward_pre_hook(lambda *a: first_convs.append(1))
        copies.append(net)
        return evaluate_topk(net, batches, device=torch.device("cpu"), topk=(1,))["top1"]

    groups = ["0.conv", "1.conv", "2.conv", "3.conv"]
    plain = autoprune.sensitivity(model, torch.randn(1, 3, 16, 16), eval_fn, groups=groups,
                                  ratios=(0.3, 0.7), progress=False,
                                  options={"prefix_cache": False, "fused_eval": False})
    uncached_runs = len(first_convs)
    first_convs.clear()
    cached = autoprune.sensitivity(model, torch.randn(1, 3, 16, 16), eval_fn, groups=groups,
                                   ratios=(0.3, 0.7), progress=False,
                                   options={"prefix_cache": True, "fused_eval": False})
    assert cached == plain
    # 3 batches a pass; the cached analysis runs the first conv on its baseline and recording
    # passes and on group 0.conv's two points; not on the check pass (which replays what the
    # deepest group skips) nor on the 6 points of the later groups
    assert uncached_runs == 3 * (1 + 8) and len(first_convs) == 3 * (2 + 2)
    for m in [model, *copies]:
        assert all("forward" not in b.__dict__ or b.__dict__["forward"].__func__ is
                   _ConvBN.forward_fuse for b in m.modules())
        assert not any(b._forward_hooks for b in m.modules())
    assert not any(b._forward_pre_hooks for b in model.modules())
