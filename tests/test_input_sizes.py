"""A model whose forward constrains its input (a halo, window or patch size that must tile the
feature maps, a fixed image size): an input size it cannot take is refused in one line naming
the layer and its sizes, before any data is read (the classification flow, its adapter) and by
``prunable_groups`` (the engine), instead of the library's bare AssertionError."""
from __future__ import annotations

import pytest
import timm
import torch

import autoprune
from autoprune import classification as cls
from autoprune.tasks.classification import ClassificationAdapter
from autoprune.tasks.classification.input_sizes import may_constrain

from conftest import assert_one_line


def test_the_classification_flow_refuses_a_size_a_halo_block_cannot_tile_before_any_data(
        tmp_path):
    missing = tmp_path / "no-data-here"  # a data error would come later: the size is first
    with pytest.raises(autoprune.ConfigError) as e:
        cls.train("halonet26t", str(missing), input_size=64, epochs=1, save_dir=tmp_path / "o",
                  progress=False)
    text = assert_one_line(e)
    assert "input_size=64 does not fit timm/halonet26t" in text
    assert "HaloAttn" in text and "block_size=8" in text and "input_size=256" in text
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name, words", [
    ("swin_tiny_patch4_window7_224", ["PatchEmbed", "img_size=(224, 224)", "input_size=224"]),
    ("maxvit_tiny_tf_224", ["partition_size=(7, 7)", "must be divisible by window (7)"]),
])
def test_the_adapter_names_the_constraint_and_a_size_that_fits(name, words, tmp_path):
    with pytest.raises(autoprune.ConfigError) as e:
        ClassificationAdapter(str(tmp_path / "missing"), model_name=name, input_size=64)
    text = assert_one_line(e)
    assert all(w in text for w in words), text


def test_sizes_that_fit_and_models_without_such_layers_pass():
    ClassificationAdapter(model_name="halonet26t", input_size=256, num_classes=10)
    with torch.device("meta"):
        assert not may_constrain(timm.create_model("resnet18", num_classes=10))
        assert may_constrain(timm.create_model("halonet26t", num_classes=10))


def test_a_built_model_is_checked_too():
    model = timm.create_model("swin_tiny_patch4_window7_224", num_classes=10)
    adapter = ClassificationAdapter(num_classes=10, input_size=64)
    with pytest.raises(autoprune.ConfigError, match="img_size=.224, 224.") as e:
        adapter.check_model(model)
    assert_one_line(e)


def test_prunable_groups_refuses_inputs_the_model_cannot_take_in_one_line():
    model = timm.create_model("halonet26t", num_classes=10).eval()
    with pytest.raises(autoprune.ConfigError) as e:
        autoprune.prunable_groups(model, torch.randn(1, 3, 64, 64))
    text = assert_one_line(e)
    assert "cannot run on inputs of shape (1, 3, 64, 64)" in text
    assert "HaloAttn" in text and "block_size=8" in text
