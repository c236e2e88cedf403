"""Model attributes that repeat a layer's channel count and must follow pruning.

torch-pruning resizes the layers and their own channel attributes; a few models also keep a count
of their own that ``forward`` reads, e.g. torchvision's ``VisionTransformer.hidden_dim``
(``x.reshape(n, self.hidden_dim, n_h * n_w)``). Each is recomputed from the resized layers after
pruning and after loading a pruned checkpoint. Classes are matched by module and class name, so
the core imports no model library.

Model libraries also keep descriptive channel metadata that ``forward`` does not read but other
code does (smp encoders' ``out_channels``, timm's ``num_features`` and ``feature_info``): a task
registers a function that makes it true again (:func:`register_metadata_sync`); it runs once at
the end of :func:`~autoprune.engine.prune.prune` and after loading a pruned checkpoint.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
import torch.nn as nn

# (class module, class name) -> {attribute: dotted path of the channel count it repeats}
DERIVED: dict[tuple[str, str], dict[str, str]] = {
    ("torchvision.models.vision_transformer", "VisionTransformer"):
        {"hidden_dim": "conv_proj.out_channels"},
}


def sync_attributes(model: nn.Module, holders: Iterable[nn.Module] | None = None) -> None:
    """Set every attribute of :data:`DERIVED` in ``model`` from the layer it repeats (in place),
    and every norm's ``normalized_shape`` from its weight (:func:`_sync_normalized_shape`);
    ``holders``: :func:`attribute_holders` of ``model``, listed once for many calls."""
    for module in model.modules() if holders is None else holders:
        _sync_normalized_shape(module)
        for attr, source in DERIVED.get((type(module).__module__, type(module).__name__),
                                        {}).items():
            value = module
            for part in source.split("."):
                value = getattr(value, part)
            setattr(module, attr, value)


def attribute_holders(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` that :func:`sync_attributes` may change (a norm's
    ``normalized_shape``, a class of :data:`DERIVED`): a pruning graph syncs only these after each
    removal, instead of walking every module of the model."""
    return [m for m in model.modules() if hasattr(m, "normalized_shape")
            or (type(m).__module__, type(m).__name__) in DERIVED]


def _sync_normalized_shape(module: nn.Module) -> None:
    """A norm's ``normalized_shape`` is the shape of its elementwise weight by definition; the
    norms torch-pruning knows (``nn.LayerNorm``) it resizes itself, others (timm's ``RmsNorm``,
    ``RmsNorm2d``, ``SimpleNorm``...) only get their weight pruned: set the shape from it."""
    shape = getattr(module, "normalized_shape", None)
    weight = module._parameters.get("weight")
    if weight is None or not isinstance(shape, (tuple, list, int)):
        return
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if len(dims) == weight.dim() and dims != tuple(weight.shape):
        new = tuple(weight.shape)
        module.normalized_shape = new[0] if isinstance(shape, int) else type(shape)(new)


MetadataSync = Callable[[nn.Module], None]
METADATA_SYNCS: list[MetadataSync] = []


def register_metadata_sync(fn: MetadataSync) -> MetadataSync:
    """Register ``fn(model)``, which sets a model library's channel metadata from the resized
    layers (in place; it may run a forward pass); usable as a decorator."""
    if fn not in METADATA_SYNCS:
        METADATA_SYNCS.append(fn)
    return fn


def sync_metadata(model: nn.Module) -> None:
    """Run every registered metadata sync on ``model``."""
    for fn in METADATA_SYNCS:
        fn(model)


def output_channels(model: nn.Module, inputs: Any, names: Iterable[str] = (),
                    call: Callable[[nn.Module, Any], Any] | None = None
                    ) -> tuple[Any, dict[str, int]]:
    """Run ``call(model, inputs)`` (default ``model(inputs)``) once in eval mode without grad and
    return its output with ``{name: channels}`` of the named submodules' 4-D (N, C, H, W)
    outputs; the model's mode is kept."""
    modules = dict(model.named_modules())
    seen: dict[str, int] = {}
    hooks = [modules[n].register_forward_hook(
        lambda _m, _i, out, n=n: seen.__setitem__(n, out.shape[1])
        if torch.is_tensor(out) and out.dim() == 4 else None) for n in names if n in modules]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = call(model, inputs) if call else model(inputs)
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    return out, seen
