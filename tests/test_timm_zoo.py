"""timm families that needed help to be pruned (issue 22), each at a tiny width or input, untrained:
0.3 removed from every prunable group (the classification adapter's ignore list and
``make_traceable``, core ``autoprune.prune``), the pruned model runs, and ``save_pruned`` -> load
gives identical outputs; families refused by name are refused before any work.

``TINY`` builds a family's own classes at a tiny size through timm's model arguments (the
checkpoint is loaded into a fresh tiny model with ``load_pruned``); ``BY_NAME`` builds the
smallest zoo member through the adapter and reloads it with ``cls.load_model`` (64 px or less).
The whole sweep (``benchmarks/zoo.py``) covers one model per timm family; these are the layouts
the sweep found broken: attention (head projections ignored), MetaFormer's ``Scale``, BlurPool,
CSP stages, NFNet gains, RmsNorm, Sequencer's LSTMs, the group-search budget (ECA) and SKNet's
selective kernels.
"""
from __future__ import annotations

import pytest
import timm
import torch
import torch.nn as nn

from timm.layers import GluMlp, RmsNorm
from timm.models import metaformer, mlp_mixer, resnet, sknet

import autoprune as ap
from autoprune import classification as cls
from autoprune.tasks.classification import ClassificationAdapter
from autoprune.tasks import timm_rules as timm_models
from autoprune.engine.groups import PruningGraph
from autoprune.engine.masking import masked_matches_pruned
from autoprune.engine.removal import pruned_temporarily
from conftest import assert_one_line, prunes_by_name_and_reloads, randomize_norms

RATIO = 0.3
VIT = dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=10)

# family -> (a tiny model of its classes, input size)
TINY = {
    "vit": (lambda: timm.create_model("vit_tiny_patch16_224", **VIT), 32),
    "vit_rmsnorm": (lambda: timm.create_model("vit_tiny_patch16_224", norm_layer=RmsNorm, **VIT),
                    32),
    "beit": (lambda: timm.create_model("beit_base_patch16_224", **VIT), 32),
    "cait": (lambda: timm.create_model("cait_xxs24_224", depth_token_only=1, **VIT), 32),
    "swin": (lambda: timm.create_model("swin_tiny_patch4_window7_224", img_size=32, patch_size=2,
                                       window_size=4, embed_dim=16, depths=(1, 1),
                                       num_heads=(1, 2)), 32),
    "mixer": (lambda: mlp_mixer.MlpMixer(img_size=32, patch_size=8, embed_dim=32, num_blocks=2),
              32),
    "gmixer": (lambda: mlp_mixer.MlpMixer(img_size=32, patch_size=8, embed_dim=32, num_blocks=2,
                                          mlp_ratio=(1.0, 4.0), mlp_layer=GluMlp,
                                          act_layer=nn.SiLU), 32),
    "resnext": (lambda: resnet.ResNet(block=resnet.Bottleneck, layers=(1, 1, 1, 1), cardinality=4,
                                      base_width=4, num_classes=10), 32),
    "caformer": (lambda: metaformer.MetaFormer(  # (attention widths: multiples of 32)
        depths=(1, 1, 1, 1), dims=(16, 24, 32, 64),
        token_mixers=[metaformer.SepConv] * 2 + [metaformer.Attention] * 2,
        norm_layers=[metaformer.LayerNorm2dNoBias] * 2 + [metaformer.LayerNormNoBias] * 2), 64),
    "convformer": (lambda: metaformer.MetaFormer(
        depths=(1, 1, 1, 1), dims=(16, 24, 32, 48), token_mixers=metaformer.SepConv,
        norm_layers=metaformer.LayerNorm2dNoBias), 32),
    "sequencer": (lambda: timm.create_model("sequencer2d_s", layers=(1, 1, 1, 1),
                                            embed_dims=(24, 48, 48, 48),
                                            hidden_sizes=(12, 24, 24, 24)), 32),
    # SKNet: skresnet's input split across the paths; skresnext's grouped paths on the whole input
    "skresnet": (lambda: resnet.ResNet(block=sknet.SelectiveKernelBasic, layers=(1, 1, 1, 1),
                                       block_args=dict(sk_kwargs=dict(
                                           rd_ratio=1 / 8, rd_divisor=16, split_input=True))), 32),
    "skresnext": (lambda: resnet.ResNet(block=sknet.SelectiveKernelBottleneck, layers=(1, 1, 1, 1),
                                        cardinality=4, base_width=4, block_args=dict(sk_kwargs=dict(
                                            rd_ratio=1 / 16, rd_divisor=32, split_input=False))),
                  32),
}

# zoo name -> input size (pixels)
BY_NAME = {"cs3darknet_focus_s": 64, "nf_regnet_b0": 32, "resnetblur18": 32, "ecaresnet26t": 32}


def _build(family: str) -> nn.Module:
    torch.manual_seed(0)
    model = TINY[family][0]()
    model.reset_classifier(10)
    return timm_models.make_traceable(model).eval()


def _prune_all(model: nn.Module, x: torch.Tensor) -> ap.PruneResult:
    ignored = ClassificationAdapter().ignored_layers(model)
    groups = ap.prunable_groups(model, x, ignored)
    result = ap.prune(model, x, {g.name: RATIO for g in groups}, ignored_layers=ignored)
    assert result.flops_after < result.flops_before
    return result


def _heads_intact(model: nn.Module, fresh: nn.Module) -> None:
    """Every projection into attention heads kept all its outputs (no head or q/k/v mixed)."""
    kept = {n: m for n, m in fresh.named_modules()}
    for name, module in model.named_modules():
        for layer in timm_models.head_projections(module):
            ref = dict(kept[name].named_modules())
            own = {m: n for n, m in module.named_modules()}
            width = "out_features" if isinstance(layer, nn.Linear) else "out_channels"
            assert getattr(layer, width) == getattr(ref[own[layer]], width), f"{name}: a head cut"


@pytest.mark.parametrize("family", list(TINY))
def test_prunes_at_tiny_width_and_reloads(family, tmp_path):
    size = TINY[family][1]
    model = _build(family)
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    _prune_all(model, x)
    with torch.no_grad():
        out = model(x)
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    _heads_intact(model, _build(family))
    path = ap.save_pruned(model, tmp_path / "m.pt")
    with torch.no_grad():
        assert torch.equal(ap.load_pruned(path, _build(family)).eval()(x), out)


def test_a_vit_keeps_its_heads_and_loses_embedding_and_mlp_channels():
    model = _build("vit")
    result = _prune_all(model, torch.randn(1, 3, 32, 32))
    assert set(result.plan) == {"patch_embed.proj", "blocks.0.mlp.fc1", "blocks.1.mlp.fc1"}
    assert model.patch_embed.proj.out_channels == 34 and model.blocks[0].mlp.fc1.out_features == 134
    assert model.blocks[0].attn.qkv.out_features == 3 * 48  # 3 heads of 16, for q, k and v
    assert model.blocks[0].attn.qkv.in_features == 34


def test_a_packed_glu_mlp_loses_the_ratio_asked_from_both_halves_alike():
    # gmixer: fc1 makes 2 x 64 outputs, chunked into a value and a gate half, multiplied
    model = _build("gmixer")
    x = torch.randn(1, 3, 32, 32)
    ignored = ClassificationAdapter().ignored_layers(model)
    groups = {g.name: g for g in ap.prunable_groups(model, x, ignored)}
    result = ap.prune(model, x, {name: 0.25 for name in groups}, ignored_layers=ignored)
    for i, block in enumerate(model.blocks):
        plan = result.plan[f"blocks.{i}.mlp_channels.fc1"]
        assert plan["channels"] == 128 and plan["kept"] == 96  # 0.25 removed, not 0.5
        removed = set(plan["removed"])
        assert removed == {i + 64 for i in removed if i < 64} | {i for i in removed if i < 64}
        assert block.mlp_channels.fc1.out_features == 96
        assert block.mlp_channels.fc2.in_features == 48
    assert model(x).shape == (1, 10)


def test_grouped_convs_lose_the_same_positions_from_each_conv_group():
    model = _build("resnext")
    x = torch.randn(1, 3, 32, 32)
    result = _prune_all(model, x)
    for i in range(1, 5):  # each stage's grouped conv2: its input and output groups are pruned
        conv = getattr(model, f"layer{i}")[0].conv2
        assert conv.groups == 4 and f"layer{i}.0.conv1" in result.plan
        assert f"layer{i}.0.conv2" in result.plan
        removed = sorted(result.plan[f"layer{i}.0.conv1"]["removed"])
        width = result.plan[f"layer{i}.0.conv1"]["channels"] // 4
        assert removed == sorted(r % width + g * width for r in removed for g in range(4)
                                 if r < width) and removed
    assert result.flops_reduction > 0.4  # grouped-conv groups were left whole before
    assert model(x).shape == (1, 10)


def test_make_traceable_keeps_the_outputs():
    # the BEiT bias added after the linear, BlurPool's single filter, MetaFormer's Scale
    for build, size in (TINY["beit"], TINY["convformer"],
                        (lambda: timm.create_model("resnetblur18", num_classes=10), 32)):
        torch.manual_seed(0)
        plain = build().eval()
        patched = timm_models.make_traceable(build()).eval()
        patched.load_state_dict(plain.state_dict())
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            torch.testing.assert_close(patched(x), plain(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["skresnet", "skresnext"])
def test_selective_kernels_compute_what_timm_computes(family):
    torch.manual_seed(0)
    plain = randomize_norms(TINY[family][0]()).eval()
    patched = timm_models.make_traceable(TINY[family][0]()).eval()
    patched.load_state_dict(plain.state_dict())
    assert any(type(m).__name__ == "SelectiveKernel" for m in patched.modules())
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(patched(x), plain(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["skresnet", "skresnext"])
def test_selective_kernel_groups_remove_the_channels_they_name(family):
    # a wrong channel mapping through the paths runs but computes something else: a real prune of
    # each group must equal zeroing the same channels (their paths' outputs, the input slices)
    model = randomize_norms(_build(family))
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    graph = PruningGraph(model, x, ClassificationAdapter().ignored_layers(model))
    names = {g.name for g in graph.groups}
    assert "layer1.0.conv1.paths.0.conv" in names or "layer1.0.conv2.paths.0.conv" in names
    with torch.no_grad():
        reference = model(x)
    for group in graph.groups:
        idxs = graph.channels_to_remove(group, RATIO)
        with pruned_temporarily(graph, group, idxs), torch.no_grad():
            pruned = model(x)
        assert masked_matches_pruned(model, graph, group, idxs, lambda: model(x), reference,
                                     lambda: pruned), group.name


def test_skresnet18_prunes_its_selective_kernels_and_reloads(tmp_path):
    def prune_all(model: nn.Module, x: torch.Tensor) -> None:
        result = _prune_all(model, x)
        assert result.flops_reduction > 0.2  # -0 % when its path groups were left whole
        assert "layer4.1.conv1.paths.0.conv" in result.plan
        kernels = [m for m in model.modules() if type(m).__name__ == "SelectiveKernel"]
        for sk in kernels:  # its channel counts follow the pruned path convs
            first = sk.paths[0].conv
            assert sk.out_channels == first.out_channels
            assert sk.in_channels == sum(p.conv.in_channels for p in sk.paths)
        assert any(sk.out_channels < 64 for sk in kernels)

    prunes_by_name_and_reloads("skresnet18", 64, tmp_path, prune_all)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_prunes_by_name_and_reloads(name, tmp_path):
    prunes_by_name_and_reloads(name, BY_NAME[name], tmp_path, _prune_all)


@pytest.mark.parametrize("name, reason", [
    ("dpn48b", "its dual-path blocks slice"),
    ("timm/dpn68", "its dual-path blocks slice"),
    ("eva02_tiny_patch14_224", "its attention reshapes its output to the width of its input"),
])
def test_refused_by_name_before_any_work(name, reason, monkeypatch):
    def no_build(*args, **kwargs):
        raise AssertionError("a refused model was built")

    monkeypatch.setattr(timm, "create_model", no_build)
    with pytest.raises(ap.ConfigError) as info:
        ClassificationAdapter(num_classes=10).arch_key(name)
    bare = name.split("/")[-1]
    assert assert_one_line(info).startswith(
        f"timm model {bare!r} cannot be pruned by autoprune: {reason}")
    assert " instead" in str(info.value)


def test_a_timm_encoder_without_a_head_is_refused_at_build_with_what_to_pick():
    # timm builds gemma4_vit_167m_enc with num_classes=0 whatever is asked (was: "the model
    # predicts 768 classes... build it with num_classes=10", which the user cannot do)
    with pytest.raises(ap.ConfigError) as info:
        ClassificationAdapter(num_classes=10).build("timm/gemma4_vit_167m_enc")
    assert assert_one_line(info).startswith("timm model 'gemma4_vit_167m_enc' is a feature "
                                            "encoder without a classification head")


def test_the_refusals_match_only_their_families():
    for name in ("eva02_base_patch14_224", "resnet18", "densenet121"):
        timm_models.check_supported(name)  # no error
    assert all(any(n.startswith(p) for n in timm.list_models()) for p in timm_models.REFUSED)


# -- the timm model inside an smp tu- encoder gets the same rules (autoprune.tasks.timm_rules) ----
def _segmenter(encoder: str):
    from autoprune.tasks.segmentation import SegmentationAdapter

    torch.manual_seed(0)
    adapter = SegmentationAdapter(num_classes=3, input_size=64, progress=False)
    key = adapter.arch_key(f"unet/{encoder}")
    return adapter, key, adapter.build(key).eval()


def test_a_tu_encoder_keeps_its_heads_whole():
    adapter, _, model = _segmenter("tu-edgenext_xx_small")
    ignored = {id(m) for m in adapter.ignored_layers(model)}
    heads = [layer for m in model.encoder.modules() for layer in timm_models.head_projections(m)]
    assert len(heads) == 3 and all(id(layer) in ignored for layer in heads)  # XCA's qkv


def test_a_tu_encoder_is_made_traceable_prunes_and_reloads(tmp_path):
    from autoprune import segmentation as seg

    adapter, key, model = _segmenter("tu-resnetblur18")
    blur = [m for m in model.modules() if type(m).__name__ == "BlurPool2d"]
    assert blur and all(m.channels is None and m.filt.shape[0] == 1 for m in blur)
    x = adapter.example_inputs(model)
    ignored = adapter.ignored_layers(model)
    groups = ap.prunable_groups(model, x, ignored)
    assert len(groups) == 22  # 18 without make_traceable: the probe left the blurred ones whole
    result = ap.prune(model, x, {g.name: RATIO for g in groups}, ignored_layers=ignored)
    assert result.flops_reduction > 0.45
    path = ap.save_pruned(model, tmp_path / "p.pt", task="segmentation", arch=key,
                          build=adapter.build_kwargs(model), input_size=64)
    with torch.no_grad():
        assert torch.equal(seg.load_model(path)(x), model(x))


def test_a_refused_timm_family_is_refused_as_a_tu_encoder():
    from autoprune.tasks.segmentation import SegmentationAdapter

    with pytest.raises(ap.ConfigError) as info:
        SegmentationAdapter(num_classes=3).arch_key("unet/tu-dpn68")
    assert assert_one_line(info).startswith("timm model 'dpn68' cannot be pruned by autoprune")
