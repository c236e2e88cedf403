"""Adding zero channels to a layer's outputs and to every layer coupled with them: the inverse of
removing channels. A pruned model whose library needs equal channel counts somewhere (Ultralytics'
C2f splits one conv's output into two equal halves) can be written back in the library's own
modules this way, with the same outputs.

A padded output channel has zero weights, a zero bias and, after a BatchNorm, a zero scale and
shift: it is exactly 0 after any activation with f(0) = 0; a layer that reads it gets zero input
weights for it, so it adds nothing either way. Callers check the outputs (the activation is not
known here).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn as nn
import torch_pruning as tp


def _graph(model: nn.Module, example_inputs: Any) -> tp.DependencyGraph:
    """torch-pruning's graph of ``model`` (traced through autograd: frozen parameters, as in a
    saved checkpoint, are unfrozen for the trace); mode and ``requires_grad`` are kept."""
    was_training = model.training
    frozen = [p for p in model.parameters() if not p.requires_grad]
    try:
        for p in frozen:
            p.requires_grad_(True)
        with torch.enable_grad():
            return tp.DependencyGraph().build_dependency(model, example_inputs=example_inputs,
                                                          verbose=False)
    finally:
        model.train(was_training)
        for p in frozen:
            p.requires_grad_(False)


def _group(dg: tp.DependencyGraph, module: nn.Module, idxs: Sequence[int] | None = None):
    pruner = dg.get_pruner_of_module(module)
    if idxs is None:
        idxs = list(range(pruner.get_out_channels(module)))
    return dg.get_pruning_group(module, pruner.prune_out_channels, list(idxs))


def _insertions(pairs: list[tuple[int, int]], channels: int, count: int) -> list[int]:
    """Positions (in the layer's current numbering) after which ``count`` zero channels go: the end
    of each run of the root's channels ``0 .. channels - 1`` in this layer."""
    pairs = sorted(set(pairs))
    ends, start = [], 0
    for k in range(1, len(pairs) + 1):
        if k < len(pairs) and pairs[k] == (pairs[k - 1][0] + 1, pairs[k - 1][1] + 1):
            continue
        run = pairs[start:k]
        if [r for _, r in run] != list(range(channels)):
            raise ValueError("the layer holds the channels in another order or in part")
        ends.append(run[-1][0] + 1)
        start = k
    return ends


def _insert(t: torch.Tensor, dim: int, ends: list[int], count: int, fill: float) -> torch.Tensor:
    parts, last = [], 0
    shape = list(t.shape)
    shape[dim] = count
    pad = torch.full(shape, fill, dtype=t.dtype, device=t.device)
    for end in ends:
        parts += [t.narrow(dim, last, end - last), pad]
        last = end
    parts.append(t.narrow(dim, last, t.shape[dim] - last))
    return torch.cat(parts, dim)


def _set(module: nn.Module, name: str, value: torch.Tensor) -> None:
    old = getattr(module, name)
    if isinstance(old, nn.Parameter):
        setattr(module, name, nn.Parameter(value, requires_grad=old.requires_grad))
    else:
        setattr(module, name, value)


def _pad_module(module: nn.Module, outputs: bool, ends: list[int], count: int) -> None:
    """Insert ``count`` zero channels after each of ``ends`` into ``module``'s
    outputs (or inputs)."""
    added = count * len(ends)
    with torch.no_grad():
        if isinstance(module, nn.modules.conv._ConvNd):
            depthwise = module.groups == module.in_channels == module.out_channels \
                and module.groups > 1
            if module.groups > 1 and not depthwise or module.transposed:
                raise ValueError(f"grouped or transposed {type(module).__name__}")
            if outputs or depthwise:
                _set(module, "weight", _insert(module.weight, 0, ends, count, 0.0))
                if module.bias is not None:
                    _set(module, "bias", _insert(module.bias, 0, ends, count, 0.0))
                module.out_channels += added
                if depthwise:
                    module.in_channels += added
                    module.groups += added
            else:
                _set(module, "weight", _insert(module.weight, 1, ends, count, 0.0))
                module.in_channels += added
        elif isinstance(module, nn.Linear):
            dim = 0 if outputs else 1
            _set(module, "weight", _insert(module.weight, dim, ends, count, 0.0))
            if outputs and module.bias is not None:
                _set(module, "bias", _insert(module.bias, 0, ends, count, 0.0))
            if outputs:
                module.out_features += added
            else:
                module.in_features += added
        elif isinstance(module, nn.modules.batchnorm._BatchNorm):
            for name, fill in (("weight", 0.0), ("bias", 0.0), ("running_mean", 0.0),
                               ("running_var", 1.0)):
                if getattr(module, name, None) is not None:
                    _set(module, name, _insert(getattr(module, name), 0, ends, count, fill))
            module.num_features += added
        elif any(True for _ in module.parameters(recurse=False)) or \
                any(b is not None for b in module._buffers.values()):
            raise ValueError(f"cannot pad the channels of a {type(module).__name__}")


def pad_channels(model: nn.Module, example_inputs: Any, module: nn.Module, count: int) -> None:
    """Append ``count`` zero channels to the outputs of ``module`` (a Conv or Linear inside
    ``model``) and to every layer coupled with them (BatchNorms, residual partners, the input
    weights of the layers that read them, after each copy a concatenation makes), in place.
    A ValueError, with ``model`` unchanged, when a coupled layer is of a kind this cannot pad
    (grouped convs, norms over several channels, ...)."""
    if count <= 0:
        return
    dg = _graph(model, example_inputs)
    group = _group(dg, module)
    channels = len(group[0].idxs)
    layers: dict[nn.Module, dict[bool, list[tuple[int, int]]]] = {}
    names = {m for m in model.modules()}
    for item in group:
        target = item.dep.target.module
        if not isinstance(target, nn.Module) or target not in names:
            continue  # torch-pruning's own nodes (concat, add...) hold no weights
        outputs = dg.is_out_channel_pruning_fn(item.dep.handler)
        layers.setdefault(target, {}).setdefault(outputs, []).extend(
            zip(item.idxs, item.root_idxs))
    plan = [(m, outputs, _insertions(pairs, channels, count))
            for m, sides in layers.items() for outputs, pairs in sides.items()]
    saved = [(m, dict(m._parameters), dict(m._buffers), dict(m.__dict__)) for m, _, _ in plan]
    try:
        for m, outputs, ends in plan:
            _pad_module(m, outputs, ends, count)
    except Exception:
        for m, params, buffers, attrs in saved:  # all or nothing
            m.__dict__.update(attrs)
            m._parameters.clear()
            m._parameters.update(params)
            m._buffers.clear()
            m._buffers.update(buffers)
        raise


def remove_channels(model: nn.Module, example_inputs: Any, module: nn.Module,
                    idxs: Sequence[int]) -> None:
    """Remove output channels ``idxs`` of ``module`` and their coupled channels everywhere in
    ``model`` (in place; what :func:`pad_channels` added, for instance)."""
    if idxs:
        _group(_graph(model, example_inputs), module, idxs).prune()
