"""The torchvision classification zoo: every model of ``torchvision.models.list_models(module=
torchvision.models)`` (80 in torchvision 0.29.1) prunes, or is refused by name.

*Prunes* means: 0.3 on every prunable group (the classification adapter's ignore list and
``make_traceable``, core ``autoprune.prune``), the pruned model runs, and ``save_pruned`` ->
load gives identical outputs. *Refused* means a one-line ConfigError naming the model, raised by
the name lookup before anything is built (``torchvision_models.REFUSED``: empty, all 80 prune).

The file has a budget of about 2 minutes on the 2-core machine (measured: 37 s on a quiet
machine, 110 s with load average 5), so how each model is covered was decided by measurement
(one thread, build + prune + round trip). A separate run pruned and round-tripped all 80 by name
(64 px, 224 for ViT/MaxViT, issue 21's report): 0.2 s (squeezenet) to 46 s (vit_h_14) each,
8.5 minutes in all.

- ``BY_NAME``: the adapter builds the zoo model by name and ``cls.load_model`` reloads the
  checkpoint (metadata, module versions, the ShuffleNet patch): the smallest member of each
  family that costs a few seconds (0.5-1 s most; quiet machine). Inception needs 75 px.
- ``TINY``: the family's own classes at a tiny width where even the smallest member is slow
  (32/64 px, quiet machine: convnext_tiny 2, efficientnet_v2_s 5, densenet121 5, swin_t 6,
  maxvit_t 13 at its only size, 224; on the 1.7x slower VMs of 2026-11-28 vgg11_bn 20, vit_b_32
  at 224 px 12.5, alexnet 9, most of it their 4,096-unit classifiers, built, saved and
  reloaded): ``load_pruned`` into a fresh tiny model.
- every other member (larger widths and depths, up to regnet_y_128gf and vit_h_14 with 630 M
  parameters): its name resolves without refusal, and built on the meta device (no memory, no
  weights) it is the model class of a pruned model of its family with no layer type that
  family's pruned models lack: the same blocks, so the same graph patterns. The one pattern that
  only depth brings (Swin-S/B: a concat torch-pruning cannot map behind 18 blocks) is covered by
  ``tests/test_groups.py::test_a_group_through_a_concat_torch_pruning_cannot_map_is_left_out``.
"""
from __future__ import annotations

import functools
from unittest import mock

import pytest
import torch
import torch.nn as nn
import torchvision
from torchvision.models import (AlexNet, VGG, convnext, densenet, efficientnet, maxvit,
                                swin_transformer, vision_transformer)
from torchvision.models.vgg import make_layers as make_vgg_layers

import autoprune as ap
from autoprune import classification as cls
from autoprune.tasks.classification import models as torchvision_models
from autoprune.tasks.classification import ClassificationAdapter
from conftest import assert_one_line, prunes_by_name_and_reloads

ZOO = torchvision.models.list_models(module=torchvision.models)
RATIO = 0.3

# zoo model -> input size (pixels)
BY_NAME = {"efficientnet_b0": 32, "googlenet": 32, "inception_v3": 75,
           "mnasnet0_5": 32, "mobilenet_v2": 32, "mobilenet_v3_small": 32, "regnet_x_400mf": 32,
           "regnet_y_400mf": 32, "resnet18": 32, "resnext50_32x4d": 32,
           "shufflenet_v2_x0_5": 32, "squeezenet1_0": 32, "squeezenet1_1": 32}


def _small_classifier(build, features: int) -> nn.Module:
    """The model ``build()`` makes (AlexNet, VGG) with its classifier's layers at a tiny width:
    the same layer types, 32 units where torchvision fixes 4,096. Built on the meta device, then
    given memory and initialised: its 58-120 M parameters would cost seconds to make."""
    with torch.device("meta"):
        model = build()
        model.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(features, 32), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(32, 32), nn.ReLU(True), nn.Linear(32, 10))
    model.to_empty(device="cpu")
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return model


# family -> (a tiny model of its classes, input size)
TINY = {
    "convnext": (lambda: convnext.ConvNeXt(
        [convnext.CNBlockConfig(8, 16, 1), convnext.CNBlockConfig(16, None, 1)],
        num_classes=10), 32),
    "densenet": (lambda: densenet.DenseNet(growth_rate=8, block_config=(2, 2),
                                           num_init_features=16, num_classes=10), 32),
    "efficientnet_v2": (lambda: efficientnet.EfficientNet(
        [efficientnet.FusedMBConvConfig(1, 3, 1, 8, 8, 1),
         efficientnet.FusedMBConvConfig(4, 3, 2, 8, 16, 1),
         efficientnet.MBConvConfig(4, 3, 2, 16, 24, 1)],
        dropout=0.0, last_channel=64, num_classes=10), 32),
    "swin": (lambda: swin_transformer.SwinTransformer(
        [4, 4], 16, [1, 1], [2, 2], [2, 2], num_classes=10), 32),
    "swin_v2": (lambda: swin_transformer.SwinTransformer(
        [4, 4], 16, [1, 1], [2, 2], [2, 2], num_classes=10,
        block=swin_transformer.SwinTransformerBlockV2,
        downsample_layer=swin_transformer.PatchMergingV2), 32),
    "maxvit": (lambda: maxvit.MaxVit((32, 32), 8, 2, [8, 16], [1, 1], 4, 0.0, num_classes=10),
               32),
    # AlexNet's features as they are (2.5 M parameters), VGG's at a tiny width; the classifier
    # of both at 32 units; a ViT of one layer at 32 px (vit_b_32 needs 224)
    "alexnet": (lambda: _small_classifier(AlexNet, 256 * 6 * 6), 64),
    "vgg": (lambda: _small_classifier(lambda: VGG(make_vgg_layers([8, "M", 16, "M", 16],
                                                                  batch_norm=True)), 16 * 7 * 7),
            32),
    "vision_transformer": (lambda: vision_transformer.VisionTransformer(
        32, 8, 1, 2, 16, 32, num_classes=10), 32),
}


def family(name: str) -> str:
    """The family of a zoo model: its builder's module, with EfficientNetV2 and Swin V2 apart
    (other blocks in the same modules)."""
    if name.startswith(("efficientnet_v2", "swin_v2")):
        return name.rsplit("_", 1)[0]
    module = torchvision.models.get_model_builder(name).__module__.rsplit(".", 1)[1]
    return {"swin_transformer": "swin"}.get(module, module)


COVERED = [n for n in ZOO if n not in BY_NAME and n not in torchvision_models.REFUSED]


def _prune_all(model: nn.Module, x: torch.Tensor) -> ap.PruneResult:
    """0.3 on every prunable group, with the classification adapter's help for this model."""
    ignored = ClassificationAdapter().ignored_layers(model)
    groups = ap.prunable_groups(model, x, ignored)
    result = ap.prune(model, x, {g.name: RATIO for g in groups}, ignored_layers=ignored)
    assert result.flops_after < result.flops_before
    assert all(p["kept"] < p["channels"] for p in result.plan.values())
    return result


def test_every_zoo_model_is_covered():
    # a model torchvision adds fails here until it is pruned, covered by its family or refused
    pruned_families = {family(n) for n in BY_NAME} | set(TINY)
    assert set(BY_NAME) <= set(ZOO) and not set(BY_NAME) & set(torchvision_models.REFUSED)
    assert {family(n) for n in COVERED} <= pruned_families
    assert len(ZOO) == len(BY_NAME) + len(COVERED) + len(torchvision_models.REFUSED)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_prunes_by_name_and_reloads(name, tmp_path):
    prunes_by_name_and_reloads(f"torchvision/{name}", BY_NAME[name], tmp_path, _prune_all)


@pytest.mark.parametrize("name", list(TINY))
def test_prunes_at_tiny_width(name, tmp_path):
    build, size = TINY[name]
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    _prune_all(model, x)
    with torch.no_grad():
        out = model(x)
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    path = ap.save_pruned(model, tmp_path / "m.pt")
    with torch.no_grad():
        assert torch.equal(ap.load_pruned(path, build()).eval()(x), out)


def _on_meta(name: str) -> nn.Module:
    """The zoo model ``name`` without memory or weights (RegNet computes its widths with
    tensors: on the CPU)."""
    from torchvision.models.regnet import BlockParams

    widths = BlockParams.from_init_params.__func__

    def on_cpu(klass, *args, **kwargs):
        with torch.device("cpu"):
            return widths(klass, *args, **kwargs)

    with mock.patch.object(BlockParams, "from_init_params", classmethod(on_cpu)), \
            torch.device("meta"):
        return torchvision.models.get_model(name, weights=None, num_classes=10)


def _types(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules()}


@functools.lru_cache(maxsize=None)
def _pruned_family(fam: str) -> tuple[set[type], set[type]]:
    """The model classes and the layer types of the models of family ``fam`` pruned above."""
    models = [_on_meta(n) for n in BY_NAME if family(n) == fam]
    models += [TINY[fam][0]()] if fam in TINY else []
    return {type(m) for m in models}, set().union(*map(_types, models))


@pytest.mark.parametrize("name", COVERED)
def test_family_member_is_covered_by_a_pruned_model(name):
    assert ClassificationAdapter().arch_key(f"torchvision/{name}") == f"torchvision/{name}"
    classes, layer_types = _pruned_family(family(name))
    model = _on_meta(name)
    assert type(model) in classes, f"{name}: no {type(model).__name__} is pruned above"
    missing = _types(model) - layer_types
    assert not missing, f"{name} has layer types its pruned family models lack: {missing}"


def test_refused_by_name_before_any_work(monkeypatch):
    def no_build(*args, **kwargs):
        raise AssertionError("a refused model was built")

    monkeypatch.setattr(torchvision.models, "get_model", no_build)
    monkeypatch.setitem(torchvision_models.REFUSED, "alexnet", "a reason given here")
    adapter = ClassificationAdapter(num_classes=10)
    with pytest.raises(ap.ConfigError) as info:
        adapter.arch_key("torchvision/alexnet")
    assert assert_one_line(info).startswith(
        "torchvision model 'alexnet' cannot be pruned by autoprune: a reason given here")
    for name in ("fasterrcnn_resnet50_fpn", "raft_small", "r3d_18", "quantized_resnet18",
                 "torchvision/deeplabv3_resnet50"):
        with pytest.raises(ap.ConfigError) as info:
            adapter.arch_key(name)
        assert "is not an image classifier" in assert_one_line(info)


def test_sensitivity_of_a_vit_restores_it_exactly():
    # pruning a ViT's embedding resizes each attention's out_proj inside the MultiheadAttention:
    # the analysis must put those back too, and keep every head's channels together
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(32, 8, 2, 4, 32, 64, num_classes=10).eval()
    nn.init.normal_(model.heads.head.weight)  # torchvision starts the head at zero
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(x)
    sens = ap.sensitivity(model, x[:1], lambda m: float(-(m(x) - ref).abs().mean()) + 10.0,
                          ratios=(0.3, 0.6), progress=False)
    assert sens["conv_proj"][0.3] > 0  # the embedding group: a real loss, measured
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    result = ap.prune(model, x[:1], {"conv_proj": 0.3})
    assert result.plan["conv_proj"]["kept"] % 4 == 0  # a multiple of the heads: 32 -> 20
    kept = sorted(set(range(32)) - set(result.plan["conv_proj"]["removed"]))
    assert [sum(i // 8 == h for i in kept) for h in range(4)] == [5] * 4  # 5 per head
    assert model.hidden_dim == 20 and model(x).shape == (4, 10)
