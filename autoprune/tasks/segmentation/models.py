"""segmentation-models-pytorch models for the segmentation adapter: architecture keys
(``smp/<arch>/<encoder>``), building with random or named encoder weights, checked ``model_kwargs``,
the head conv, and unused encoder stages made to pass their input through.

smp encoders built shallower than they are (PSPNet's ``encoder_depth=3`` on mobilenet_v2 /
efficientnet) still run the deeper stages and throw their outputs away; torch-pruning does not
see those stages, so pruning would leave them with stale input widths. ``build_segmenter`` makes
such modules return their input (the model's outputs are unchanged, checked; the weights stay, so
smp state_dicts still load).
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import segmentation_models_pytorch as smp
import timm

from .. import timm_rules
from ...engine.attributes import output_channels, register_metadata_sync
from ...engine.provenance import Provenance, file_provenance
from ...errors import AutopruneError, ConfigError
from .pretrained import build_with_encoder_weights, read_encoder_file

STRIDE = 32  # smp encoders downsample 32x: input sides must be multiples of this
ARCH_ALIASES = {"unet++": "unetplusplus", "deeplabv3+": "deeplabv3plus", "deeplab": "deeplabv3"}
# architectures refused by name, before any work, and why (none today: MAnet's attention fusion
# blocks, once refused for a group search that did not finish, are handled by the walk budget of
# autoprune.engine.groups)
REFUSED: dict[str, str] = {}


def _architectures() -> dict[str, type]:
    return smp.MODEL_ARCHITECTURES_MAPPING


def resolve_arch(name: str, encoder: str | None = None, default_encoder: str | None = None) -> str:
    """Canonical key ``smp/<arch>/<encoder>`` of ``"unet/resnet18"``, ``"Unet-resnet18"``,
    ``"smp/unet/resnet18"`` or ``name="unet", encoder="resnet18"`` (``default_encoder`` when
    neither names one)."""
    rest = name[4:] if name.lower().startswith("smp/") else name
    sep = "/" if "/" in rest else ("-" if "-" in rest else None)
    arch, enc = rest.split(sep, 1) if sep else (rest, None)
    if enc and encoder and enc != encoder:
        raise ConfigError(f"model {name!r} names encoder {enc!r} but encoder={encoder!r}: "
                          f"name it once")
    enc = enc or encoder or default_encoder
    key = arch.lower().replace("_", "").replace(" ", "")
    key = ARCH_ALIASES.get(key, key)
    if key in REFUSED:
        raise ConfigError(f"{arch!r} cannot be pruned by autoprune: {REFUSED[key]}")
    if key not in _architectures():
        raise ConfigError(f"unknown segmentation model {arch!r}: use one of "
                          f"{', '.join(_architectures())} (segmentation-models-pytorch)")
    if not enc:
        raise ConfigError(f"model {name!r} names no encoder: pass encoder='resnet18' (or "
                          f"model='{key}/resnet18')")
    known = enc in smp.encoders.get_encoder_names()
    if not known and enc.startswith("tu-"):
        known = timm.is_model(enc[3:])
    if known and enc.startswith("tu-"):
        timm_rules.check_supported(enc[3:])  # a timm family refused by name
    if not known:
        raise ConfigError(f"unknown encoder {enc!r}: use resnet18, resnet34, mobilenet_v2, "
                          f"efficientnet-b0, another smp encoder or tu-<timm model name>")
    return f"smp/{key}/{enc}"


def arch_of_model(model: nn.Module) -> str | None:
    """``smp/<arch>/<encoder>`` of an smp model object (its class and the encoder it was built
    with), or None when it is not an smp model."""
    name = next((k for k, cls in _architectures().items() if type(model) is cls), None)
    if name is None:
        return None
    encoder = (getattr(model, "_hub_mixin_config", None) or {}).get("encoder_name")
    if not encoder and "-" in str(getattr(model, "name", "")):
        encoder = str(model.name).split("-", 1)[1]  # smp's "u-resnet18", "fpn-resnet18"...
    if not encoder:
        return None
    try:
        return resolve_arch(name, encoder)
    except ConfigError:
        return None


def _pass_through(x: Any, *args: Any, **kwargs: Any) -> Any:
    return x


def skip_unused_modules(model: nn.Module, size: int = 64, in_channels: int = 3) -> list[str]:
    """Make modules that run but do not reach the output return their input instead.

    Returns their names. A module is skipped only if the model's output stays bit-identical.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return []
    ran: set[nn.Module] = set()
    hooks = [m.register_forward_hook(lambda m, i, o: ran.add(m)) for m in model.modules()]
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():  # also when called under no_grad (loading a checkpoint)
            for side in (size, 2 * size, 4 * size):  # a deep pyramid (PAN) needs 128 px or more
                x = torch.randn(1, in_channels, side, side,
                                generator=torch.Generator().manual_seed(0))
                try:
                    out = model(x.to(next(model.parameters()).device))
                    break
                except RuntimeError:
                    if side == 4 * size:
                        raise
            grads = torch.autograd.grad(out.float().sum(), params, allow_unused=True)
    finally:
        for h in hooks:
            h.remove()
    dead = {id(p) for p, g in zip(params, grads) if g is None}
    skipped: list[str] = []
    for name, module in model.named_modules():
        own = list(module.parameters())
        if not name or module not in ran or not own or not all(id(p) in dead for p in own) \
                or any(name.startswith(s + ".") for s in skipped):
            continue
        module.forward = _pass_through
        skipped.append(name)
    if skipped:
        with torch.no_grad():
            same = torch.equal(model(x), out.detach())
        if not same:  # the "dead" outputs were used after all (e.g. for a shape): undo
            for name in skipped:
                del model.get_submodule(name).forward
            skipped = []
    model.train(was_training)
    return skipped


# timm.create_model arguments that load a file or fetch weights (a tu- encoder passes unknown
# model_kwargs on to timm)
TIMM_LOADING = frozenset({"pretrained", "pretrained_cfg", "pretrained_cfg_overlay",
                          "checkpoint_path", "cache_dir", "pretrained_strict"})


def _check_model_kwargs(name: str, encoder: str, model_kwargs: dict[str, Any] | None
                        ) -> dict[str, Any]:
    """Refuse what smp would silently drop (unknown keys go to the encoder and vanish) and what
    would change the model's output (aux classifier, activation)."""
    kwargs = dict(model_kwargs or {})
    ours = {"encoder_name", "encoder_weights", "in_channels", "classes"}
    allowed = set(inspect.signature(_architectures()[name].__init__).parameters) - ours - \
        {"self", "kwargs", "aux_params", "activation"}
    for key in kwargs:
        if encoder.startswith("tu-") and (key in TIMM_LOADING or "pretrained" in key):
            raise ConfigError(f"model_kwargs {key!r} would make timm load or fetch weights for "
                              f"the {encoder} encoder: drop it (pass encoder_weights= for "
                              f"the encoder's weights)")
        if key in ours:
            raise ConfigError(f"model_kwargs {key!r} is set by autoprune: pass it as an argument "
                              f"(encoder, encoder_weights, in_channels, num_classes)")
        if key in ("aux_params", "activation") and kwargs[key] is not None:
            raise ConfigError(f"model_kwargs {key!r} is not supported: autoprune trains and "
                              f"prunes models that return raw class logits")
        if key not in allowed and key not in ("aux_params", "activation") \
                and not encoder.startswith("tu-"):
            raise ConfigError(f"model_kwargs {key!r} is not a setting of smp {name}: check "
                              f"model_kwargs (it takes {', '.join(sorted(allowed))})")
    return kwargs


def build_segmenter(arch: str, num_classes: int, in_channels: int = 3,
                    model_kwargs: dict[str, Any] | None = None,
                    encoder_weights: str | os.PathLike | None = None
                    ) -> tuple[nn.Module, Provenance | None]:
    """An smp model with random weights, or with ``encoder_weights``: a local file of encoder
    weights, or a weights name smp knows for the encoder (``"imagenet"``...: read by smp's own
    loader from the Hugging Face cache, fetched there when the network allows); and where the
    encoder's weights came from (None: random)."""
    _, name, encoder = resolve_arch(arch).split("/", 2)
    kwargs = _check_model_kwargs(name, encoder, model_kwargs)
    local = encoder_weights is not None and Path(encoder_weights).is_file()
    named = encoder_weights is not None and not local
    if named and (not isinstance(encoder_weights, str) or "/" in str(encoder_weights)
                  or str(encoder_weights).endswith((".pt", ".pth", ".safetensors"))):
        raise ConfigError(f"encoder_weights={str(encoder_weights)!r} is not a file: pass a "
                          f"local file of encoder weights, or a weights name such as "
                          f"'imagenet'")
    provenance = None
    try:
        if named:
            model, provenance = build_with_encoder_weights(
                name, encoder, encoder_weights, in_channels=in_channels, classes=num_classes,
                **kwargs)
        else:
            model = smp.create_model(name, encoder_name=encoder, in_channels=in_channels,
                                     encoder_weights=None, classes=num_classes, **kwargs)
    except AutopruneError:
        raise  # one line already (weights not cached, a damaged file): as it is
    except (TypeError, ValueError, KeyError, AssertionError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(f"smp cannot build {arch} with {kwargs or 'these settings'} "
                          f"({first}): check model_kwargs") from None
    if local:
        state = read_encoder_file(encoder_weights, encoder)  # weights-only, one line if bad
        try:
            model.encoder.load_state_dict(state)
        except (RuntimeError, KeyError, AttributeError) as e:
            first = str(e).strip().splitlines()[0][:160]
            raise ConfigError(f"encoder_weights {encoder_weights} do not fit the {encoder} "
                              f"encoder ({first})") from None
        provenance = file_provenance(encoder_weights)
    timm_rules.make_traceable(model)  # a tu- encoder's timm layers (state dict unchanged)
    skip_unused_modules(model, in_channels=in_channels)
    return model, provenance


def head_conv(model: nn.Module) -> nn.Module | None:
    """The conv that produces the class maps (smp's ``segmentation_head[0]``), if found."""
    head = getattr(model, "segmentation_head", None)
    convs = [m for m in head.modules() if isinstance(m, nn.Conv2d)] if head is not None else []
    return convs[0] if convs else None


def output_classes(model: nn.Module) -> int | None:
    conv = head_conv(model)
    return conv.out_channels if conv is not None else None


@register_metadata_sync
def sync_encoder_channels(model: nn.Module) -> None:
    """smp encoders' ``out_channels`` (read by decoders and user code) from the feature maps the
    pruned encoder really returns."""
    for module in model.modules():
        if type(module).__module__.startswith("segmentation_models_pytorch.encoders") and \
                hasattr(module, "_out_channels") and hasattr(module, "_in_channels"):
            side = 2 ** (getattr(module, "_depth", 5) + 1)
            param = next(module.parameters())
            x = torch.zeros(1, module._in_channels, side, side, device=param.device,
                            dtype=param.dtype)
            features, _ = output_channels(module, x)
            module._out_channels = [f.shape[1] for f in features]
