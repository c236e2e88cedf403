"""After pruning, and after loading a pruned checkpoint, the channel metadata of the model
libraries agrees with the real shapes: smp encoders' ``out_channels``, timm's ``num_features``,
``head_hidden_size`` and ``feature_info``."""
from __future__ import annotations

import pytest
import torch

import autoprune
from autoprune.flow.checkpoints import load_model
from autoprune.tasks import get_adapter


def _pruned(task, name, tmp_path, **classes):
    torch.manual_seed(0)
    adapter = get_adapter(task, input_size=64, **classes)
    arch = adapter.arch_key(name)
    model = adapter.build(arch).eval()
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = autoprune.prunable_groups(model, x, ignored)
    fresh = adapter.build(arch).eval()
    autoprune.prune(model, x, {g.name: 0.3 for g in groups}, ignored_layers=ignored)
    path = autoprune.save_pruned(model, tmp_path / "m.pt", task=task, arch=arch,
                                 build=adapter.build_kwargs(model), input_size=64)
    return fresh, model, load_model(path), x


@pytest.mark.parametrize("name", ["smp/unet/resnet18", "smp/fpn/mobilenet_v2"])
def test_smp_encoder_out_channels_follow_pruning(name, tmp_path):
    fresh, pruned, loaded, x = _pruned("segmentation", name, tmp_path, num_classes=3)
    for model in (pruned, loaded):
        with torch.no_grad():
            real = [f.shape[1] for f in model.encoder(x)]
        assert model.encoder.out_channels == real
        assert real != fresh.encoder.out_channels  # pruning did change them


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv3_small_100"])
def test_timm_channel_attributes_follow_pruning(name, tmp_path):
    fresh, pruned, loaded, x = _pruned("classification", name, tmp_path, num_classes=3)
    for model in (pruned, loaded):
        modules = dict(model.named_modules())
        seen = {}
        hooks = [modules[i["module"]].register_forward_hook(
            lambda _m, _i, out, n=i["module"]: seen.__setitem__(n, out.shape[1]))
            for i in model.feature_info]
        with torch.no_grad():
            features = model.forward_features(x)
        for hook in hooks:
            hook.remove()
        assert model.num_features == features.shape[1] < fresh.num_features
        assert model.head_hidden_size == model.get_classifier().in_features
        assert [i["num_chs"] for i in model.feature_info] == \
            [seen[i["module"]] for i in model.feature_info]
        assert [i["num_chs"] for i in model.feature_info] != \
            [i["num_chs"] for i in fresh.feature_info]
