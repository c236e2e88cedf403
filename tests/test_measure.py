"""measure(): params, FLOPs (MACs), size and latency; smaller after pruning."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import autoprune as ap
from conftest import make_input, make_model

KEYS = {"params", "flops", "size_mb", "latency_ms"}


@pytest.mark.parametrize("name", ["toy", "resnet18", "mobilenetv3_small_100"])
def test_measure_keys_positive_and_lower_after_pruning(name):
    model = make_model(name)
    x = make_input(batch=1)
    before = ap.measure(model, x, warmup=1, repeats=3)
    assert set(before) == KEYS
    assert all(before[k] > 0 for k in KEYS)
    assert isinstance(before["params"], int) and isinstance(before["flops"], int)
    assert before["params"] == sum(p.numel() for p in model.parameters())
    # the saved weights hold at least 4 bytes per float32 parameter, and not much more
    assert 4 * before["params"] <= before["size_mb"] * 1e6 < 4 * before["params"] * 1.2 + 1e5

    groups = ap.prunable_groups(model, x)
    ap.prune(model, x, {g.name: 0.5 for g in groups})
    after = ap.measure(model, x, warmup=1, repeats=3)
    assert set(after) == KEYS
    assert all(after[k] > 0 for k in KEYS)
    assert after["params"] < before["params"] * 0.7
    assert after["flops"] < before["flops"] * 0.7
    assert after["size_mb"] < before["size_mb"] * 0.7


def test_flops_are_macs_per_sample():
    conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
    x = torch.randn(1, 3, 8, 8)
    assert ap.count_flops(conv, x) == 4 * 3 * 3 * 3 * 8 * 8
    net = nn.Sequential(conv, nn.Flatten(), nn.Linear(4 * 8 * 8, 5, bias=False))
    expected = 4 * 3 * 3 * 3 * 8 * 8 + 4 * 8 * 8 * 5
    assert ap.count_flops(net, x) == expected
    assert ap.count_flops(net, torch.randn(3, 3, 8, 8)) == expected


@pytest.mark.parametrize("training", [True, False])
def test_measure_keeps_mode_and_weights(training):
    model = make_model("toy").train(training)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ap.measure(model, make_input(batch=2), warmup=1, repeats=2)
    assert model.training is training
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_latency_on_missing_cuda_is_an_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(RuntimeError):
        ap.latency_ms(make_model("toy"), make_input(batch=1), device="cuda", warmup=0, repeats=1)
