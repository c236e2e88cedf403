"""Model attributes that repeat a layer's channel count and must follow pruning.

torch-pruning resizes the layers and their own channel attributes; a few models also keep a count
of their own that ``forward`` reads, e.g. torchvision's ``VisionTransformer.hidden_dim``
(``x.reshape(n, self.hidden_dim, n_h * n_w)``). Each is recomputed from the resized layers after
pruning and after loading a pruned checkpoint. Classes are matched by module and class name, so
the core imports no model library.
"""
from __future__ import annotations

import torch.nn as nn

# (class module, class name) -> {attribute: dotted path of the channel count it repeats}
DERIVED: dict[tuple[str, str], dict[str, str]] = {
    ("torchvision.models.vision_transformer", "VisionTransformer"):
        {"hidden_dim": "conv_proj.out_channels"},
}


def sync_attributes(model: nn.Module) -> None:
    """Set every attribute of :data:`DERIVED` in ``model`` from the layer it repeats (in place)."""
    for module in model.modules():
        for attr, source in DERIVED.get((type(module).__module__, type(module).__name__),
                                        {}).items():
            value = module
            for part in source.split("."):
                value = getattr(value, part)
            setattr(module, attr, value)
