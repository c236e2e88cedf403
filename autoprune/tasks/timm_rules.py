"""timm models that need help to be pruned, and those refused by name: the rules shared by the
classification task (a timm classifier) and the segmentation task (the timm model inside an smp
``tu-`` encoder). The rules apply to every part of a model built by timm (:func:`timm_parts`).

torch-pruning's dependency graph does not describe every timm layout; the probe of
:class:`~autoprune.engine.groups.PruningGraph` leaves whole the groups whose removal breaks a
forward pass, but a layout can also break only in combination, or silently. What timm needs:

- **Attention and token-mixing models** (ViT, DeiT, BEiT, CaiT, ConViT, CoaT, CrossViT, DaViT,
  CAFormer, EdgeNeXt, EfficientFormer, Swin, PVT, XCiT, Mixer, ResMLP...): a cut of a projection
  into heads mixes heads or q/k/v (``reshape(B, N, 3, heads, -1)`` accepts any multiple of
  ``3 * heads``, so a forward pass does not always fail). The projections into heads are ignored:
  a ``qkv``, ``qk``+``v``, ``q``+``kv`` or ``q``+``k``+``v`` set of children of one module (a
  conv/linear, or a container of one with its norm), and every layer of a token-mixing MLP
  (``mlp_tokens``, ResMLP's ``linear_tokens``, gMLP's spatial gating unit), whose widths are the
  token count. So heads, head dims and token counts stay; what can go is the widths the blocks add
  to and the MLP hidden widths, where the probe finds them prunable (measured: ViT-Ti 13 groups,
  FLOPs -35 %; an ignore list of all but the MLP hidden widths kept ViT-Ti at -17 % and CaiT,
  CoaT, Swin, EfficientFormer below this).
- **CSP stages** (cspresnet, cspdarknet, cs3darknet): ``CrossStage``/``CrossStage3`` split
  ``conv_exp``'s output at a fixed ``expand_chs // 2``: ``conv_exp`` is ignored.
- :func:`make_traceable` (in place, idempotent; the state dict is unchanged): BEiT/EVA/SwinV2
  attention adds its q/v bias after the ``qkv`` linear instead of inside ``F.linear`` (so the graph
  sees the layer); ``BlurPool2d`` blurs any number of channels (its non-persistent filter was one
  copy per channel); MetaFormer's ``Scale`` reads the length of its (pruned) scale; SKNet's
  ``SelectiveKernel`` (skresnet, skresnext) slices its input and its attention per path and adds
  the weighted paths instead of ``torch.split`` / ``torch.stack`` / ``softmax``, which
  torch-pruning maps wrongly (12 of skresnet18's 20 groups were left whole, FLOPs -0 %).
- Weight-standardised convs (NFNet) and timm's ``RmsNorm`` are handled by the core (a conv's
  per-output ``gain``; ``normalized_shape`` follows the weight).
- :data:`REFUSED`: families refused by name, before any work.
"""
from __future__ import annotations

import re
import types

import torch
import torch.nn as nn

from ..engine.attributes import register_metadata_sync
from ..errors import ConfigError

# timm name prefix -> why autoprune cannot prune it (checked at the name lookup, before any work)
REFUSED: dict[str, str] = {
    "dpn": "its dual-path blocks slice the residual and the dense path out of one conv's outputs "
           "at fixed offsets, which the pruning graph cannot follow (1 of its 10 groups prunes, "
           "FLOPs -0 %); use a ResNet/ResNeXt or DenseNet instead",
    **dict.fromkeys(("eva02_tiny", "eva02_small"),
                    "its attention reshapes its output to the width of its input and its MLP is "
                    "one linear split in two halves (a packed SwiGLU), so no width can lose "
                    "channels; use eva02_base (separate SwiGLU linears), a ViT or a DeiT instead"),
}

_HEAD_PROJECTIONS = ({"qkv"}, {"qk", "v"}, {"q", "kv"}, {"q", "k", "v"})
_TOKEN_MLPS = ("mlp_tokens", "linear_tokens")
_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)


def check_supported(name: str) -> None:
    """Raise a one-line ConfigError for a timm model autoprune refuses (by name prefix)."""
    for prefix, why in REFUSED.items():
        if re.match(rf"{prefix}(\d|_|$)", name):
            raise ConfigError(f"timm model {name!r} cannot be pruned by autoprune: {why}")


def is_timm(model: nn.Module) -> bool:
    """True for a module whose class timm defines (a timm model, a timm layer)."""
    return type(model).__module__.startswith("timm.")


def timm_parts(model: nn.Module) -> list[nn.Module]:
    """The outermost timm modules of ``model``: ``[model]`` for a timm model, the timm model of
    an smp ``tu-`` encoder (or smp's encoders built from timm layers), empty for others."""
    parts: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside:
            continue
        if is_timm(module):
            parts.append(module)
            inside |= {id(m) for m in module.modules()}
    return parts


def _timm_modules(model: nn.Module) -> list[nn.Module]:
    """Every module of ``model``'s timm parts (see :func:`timm_parts`)."""
    return [m for part in timm_parts(model) for m in part.modules()]


def _layer_of(module: nn.Module) -> nn.Module | None:
    """``module`` if it is a conv/linear, the one conv/linear inside it (a conv + norm block),
    else None."""
    if isinstance(module, _LAYERS):
        return module
    layers = [m for m in module.modules() if isinstance(m, _LAYERS)]
    return layers[0] if len(layers) == 1 else None


def head_projections(module: nn.Module) -> list[nn.Module]:
    """The layers of ``module`` that project into attention heads, or whose widths are a token
    count (a token-mixing MLP); empty for other modules (see the module doc)."""
    children = {name: layer for name, child in module.named_children()
                if (layer := _layer_of(child)) is not None}
    found = [children[n] for names in _HEAD_PROJECTIONS if names <= set(children)
             for n in sorted(names)]
    mixers = [getattr(module, n) for n in _TOKEN_MLPS if isinstance(getattr(module, n, None),
                                                                   nn.Module)]
    if type(module).__name__ == "SpatialGatingUnit":
        mixers.append(module)
    return found + [m for mixer in mixers for m in mixer.modules() if isinstance(m, _LAYERS)]


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """What the timm parts of ``model`` need ignored (empty for most): the projections into
    attention heads and the token-mixing MLPs; the ``conv_exp`` of CSP stages."""
    ignored: dict[int, nn.Module] = {}
    for m in _timm_modules(model):
        for layer in head_projections(m):
            ignored[id(layer)] = layer
        if type(m).__name__ in ("CrossStage", "CrossStage3") and hasattr(m, "conv_exp"):
            ignored.update((id(c), c) for c in m.conv_exp.modules() if isinstance(c, nn.Conv2d))
    return list(ignored.values())


def _blur_any_width(module: nn.Module) -> None:
    """timm ``BlurPool2d`` with ``channels=None``: one filter expanded to the input's channels
    (the same values as the per-channel copies)."""
    if module.channels is not None:
        module.filt = module.filt[:1].clone()
        module.channels = None


def _scale_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm MetaFormer ``Scale.forward`` with the scale's own length instead of the ``shape``
    recorded when it was built."""
    return x * self.scale.view((-1,) + tuple(self.shape[1:]))


def _first_conv(module: nn.Module) -> nn.Module:
    return next(m for m in module.modules() if isinstance(m, nn.Conv2d))


def _selective_kernel_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm ``SelectiveKernel.forward`` (SKNet) without ``torch.split`` and ``torch.stack``: each
    path reads its slice of the input (as wide as its conv's inputs now), the paths are added,
    the attention's ``fc_select`` output is sliced into one part per path, the softmax across
    the paths is written out (max, exp, sum) and the paths weighted by it are added. The same
    function (equal up to float rounding), made of ops torch-pruning maps channel by channel
    (it maps a ``torch.split`` part to the wrong consumer when a part has several)."""
    if self.split_input:
        x_paths, start = [], 0
        for path in self.paths:
            width = _first_conv(path).in_channels
            x_paths.append(path(x[:, start:start + width]))
            start += width
    else:
        x_paths = [path(x) for path in self.paths]
    attn = self.attn
    s = sum(x_paths[1:], x_paths[0]).mean((2, 3), keepdim=True)
    s = attn.fc_select(attn.act(attn.bn(attn.fc_reduce(s))))
    width = s.shape[1] // len(x_paths)
    logits = [s[:, i * width:(i + 1) * width] for i in range(len(x_paths))]
    top = logits[0]
    for logit in logits[1:]:
        top = torch.maximum(top, logit)
    weights = [torch.exp(logit - top) for logit in logits]
    total = sum(weights[1:], weights[0])
    # weight * path, not path * weight: torch-pruning's trace then reaches the paths' convs
    # before fc_select, and the paths' group is rooted at a path conv (C channels, not the
    # 2C packed ones of fc_select, which no grouped path conv of SKNeXt would fit)
    out = (weights[0] / total) * x_paths[0]
    for path, weight in zip(x_paths[1:], weights[1:]):
        out = out + (weight / total) * path
    return out


@register_metadata_sync
def sync_selective_kernels(model: nn.Module) -> None:
    """timm ``SelectiveKernel``'s ``in_channels`` and ``out_channels`` from its pruned path convs
    (the input split across the paths, or the whole input for each)."""
    for module in model.modules():
        if type(module).__name__ == "SelectiveKernel" and hasattr(module, "paths"):
            convs = [_first_conv(path) for path in module.paths]
            module.out_channels = convs[0].out_channels
            module.in_channels = sum(c.in_channels for c in convs) if module.split_input \
                else convs[0].in_channels


def make_traceable(model: nn.Module) -> nn.Module:
    """Make the timm layers of ``model`` prunable (see the module doc; in place, idempotent,
    outputs equal up to float rounding, state dict unchanged); a model without timm parts is
    returned as it is."""
    for module in _timm_modules(model):
        kind = type(module).__name__
        if isinstance(getattr(module, "qkv_bias_separate", None), bool) and \
                isinstance(getattr(module, "qkv", None), nn.Linear):
            module.qkv_bias_separate = True
        elif kind == "BlurPool2d" and hasattr(module, "filt"):
            _blur_any_width(module)
        elif kind == "Scale" and type(module).__module__ == "timm.models.metaformer":
            module.forward = types.MethodType(_scale_forward, module)
        elif kind == "SelectiveKernel" and hasattr(module, "paths") and hasattr(module, "attn"):
            module.forward = types.MethodType(_selective_kernel_forward, module)
    return model
