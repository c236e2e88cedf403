"""torchvision classifiers that need help to be pruned, and those refused by name.

- **ShuffleNetV2**: its channel shuffle (``view`` -> ``transpose`` -> ``view``) stops
  torch-pruning's tracer (``ZeroDivisionError`` in its reshape index mapping).
  :func:`make_traceable` gives each block a numerically identical ``forward`` whose shuffle is one
  ``index_select``; the core leaves out every group that crosses such a channel gather
  (:mod:`autoprune.groups`), and the convs whose channels are shuffled are ignored, so the stage
  widths stay and the branch-internal widths, the stem and the last conv are pruned.
- **Swin, Swin V2, MaxViT**: torch-pruning's dependency graph does not finish (minutes, or a
  ``TypeError`` in its index mapping) on a group that crosses the window-partition reshapes: the
  embedding every block adds to, and the q/k/v widths split into heads. Only the widths that stay
  inside a block are pruned: the MLP hidden width, and MaxViT's MBConv expansion, squeeze-excitation
  and first stem conv; every other conv/linear is ignored. (Swin-S/B's PatchMerging concat, which
  torch-pruning cannot map, is handled by the core: groups through it are left out.)
- :data:`REFUSED` names the models refused before any work (none today); a torchvision model that
  is not an image classifier is refused by the classification task's name lookup.
- **Ultralytics YOLO classification models** (``yolo11n-cls``...): their split blocks become the
  detection package's split-free twins, their head returns logits, their attention blocks keep
  their widths (:mod:`.yolo_cls`).

State dicts are untouched: a pruned model loads into a plain torchvision model of its shapes; a
ShuffleNetV2's ONNX export holds a ``Gather`` where torchvision's holds two reshapes.
"""
from __future__ import annotations

import types

import torch
import torch.nn as nn
from torchvision.models.maxvit import MaxVit, MBConv, PartitionAttentionLayer
from torchvision.models.shufflenetv2 import InvertedResidual
from torchvision.models.swin_transformer import SwinTransformerBlock

from ...engine.attributes import output_channels, register_metadata_sync
from ...errors import ConfigError
from .yolo_names import is_yolo_classifier

# torchvision name -> why autoprune cannot prune it (checked at the name lookup, before any work)
REFUSED: dict[str, str] = {}


def check_supported(name: str) -> None:
    """Raise a one-line ConfigError for a torchvision model autoprune cannot prune."""
    if name in REFUSED:
        raise ConfigError(f"torchvision model {name!r} cannot be pruned by autoprune: "
                          f"{REFUSED[name]}; pick another architecture (e.g. convnext_tiny, "
                          f"vit_b_16, resnet50)")


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """What a torchvision model needs ignored (empty for most): the ShuffleNetV2 convs whose
    channels are shuffled, and every conv/linear of a Swin or MaxViT but those whose width stays
    inside a block; a YOLO classification model's attention blocks."""
    if is_yolo_classifier(model):
        from .yolo_cls import ignored_layers as yolo_ignored
        return yolo_ignored(model)
    inner = _inner_roots(model)
    if inner is not None:
        return [m for m in model.modules()
                if isinstance(m, (nn.Conv2d, nn.Linear)) and m not in inner]
    return _shuffled_convs(model)


def _inner_roots(model: nn.Module) -> set[nn.Module] | None:
    """The layers of a Swin / MaxViT whose output width stays inside a block; None for other
    models."""
    roots: set[nn.Module] = set()
    window_model = False
    for m in model.modules():
        if isinstance(m, SwinTransformerBlock):  # V2 blocks too
            roots.add(m.mlp[0])
        elif isinstance(m, MBConv):
            roots |= {m.layers.conv_a[0], m.layers.conv_b[0], m.layers.squeeze_excitation.fc1,
                      m.layers.squeeze_excitation.fc2}
        elif isinstance(m, PartitionAttentionLayer):
            roots.add(m.mlp_layer[1])
        elif isinstance(m, MaxVit):
            roots.add(m.stem[0][0])  # its output stays in the stem; the second conv's does not
        else:
            continue
        window_model = True
    return roots if window_model else None


def _shuffled_convs(model: nn.Module) -> list[nn.Module]:
    """The ShuffleNetV2 convs writing a block's concatenation and the depthwise convs reading a
    shuffled tensor (torch-pruning cannot even list the groups they root)."""
    blocks = [m for m in model.modules() if isinstance(m, InvertedResidual)]
    ignored = []
    for i, block in enumerate(blocks):
        ignored.append(block.branch2[-3])
        if len(block.branch1):
            ignored += [block.branch1[2]] + ([block.branch1[0]] if i else [])
    return ignored


def _shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """torchvision's ``channel_shuffle`` as one channel gather (same values)."""
    c = x.shape[1]
    order = torch.arange(c, device=x.device).view(groups, c // groups).t().reshape(-1)
    return x.index_select(1, order)


def _shuffle_block_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``torchvision.models.shufflenetv2.InvertedResidual.forward`` with :func:`_shuffle`."""
    if self.stride == 1:
        x1, x2 = x.chunk(2, dim=1)
        out = torch.cat((x1, self.branch2(x2)), dim=1)
    else:
        out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
    return _shuffle(out, 2)


def make_traceable(model: nn.Module) -> nn.Module:
    """Give every torchvision ShuffleNetV2 block of ``model`` the gather-based shuffle, a YOLO
    classification model its split-free twins and logits head (in place, idempotent; other
    models are returned as they are)."""
    if is_yolo_classifier(model):
        from .yolo_cls import make_traceable as yolo_traceable
        return yolo_traceable(model)
    for module in model.modules():
        if isinstance(module, InvertedResidual):
            module.forward = types.MethodType(_shuffle_block_forward, module)
    return model


@register_metadata_sync
def sync_timm_channels(model: nn.Module) -> None:
    """timm's ``num_features``, ``head_hidden_size`` and ``feature_info`` channel counts from the
    pruned layers (one forward pass of the features: at the image size of the model's patch
    embedding if it has one, else at 64 px, else at the size of its pretrained config)."""
    if not type(model).__module__.startswith("timm.") or not hasattr(model, "forward_features"):
        return
    info = getattr(model, "feature_info", None)
    info = info if isinstance(info, list) else []
    native = tuple((getattr(model, "pretrained_cfg", None) or {}).get("input_size", (3, 224, 224)))
    fixed = next((tuple(m.img_size) for m in model.modules()  # a patch embedding's image size
                  if type(m).__name__ == "PatchEmbed" and getattr(m, "img_size", None)), None)
    sizes = [(native[0], *fixed)] if fixed else []
    sizes += [s for s in ((native[0], 64, 64), native) if s not in sizes]
    param = next(model.parameters())
    for attempt, size in enumerate(sizes):
        x = torch.zeros(1, *size, device=param.device, dtype=param.dtype)
        try:
            features, seen = output_channels(model, x, [i.get("module", "") for i in info],
                                             call=lambda m, inputs: m.forward_features(inputs))
            break
        except (RuntimeError, AssertionError, ValueError):  # a fixed input size (BoTNet, CoaT)
            if attempt == len(sizes) - 1:
                raise
    if torch.is_tensor(features) and features.dim() == 4 and hasattr(model, "num_features"):
        model.num_features = features.shape[1]
    classifier = model.get_classifier() if hasattr(model, "get_classifier") else None
    if isinstance(classifier, nn.Linear) and hasattr(model, "head_hidden_size"):
        model.head_hidden_size = classifier.in_features
    for item in info:
        if item.get("module") in seen:
            item["num_chs"] = seen[item["module"]]
