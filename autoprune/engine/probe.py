"""The probe: channel groups whose removal breaks a forward pass, left whole with a warning.

The dependency graph does not describe every layout (attention heads read through views,
weight-standardised convs...): each listed group loses half its channels once, for a forward pass,
and is left whole if that fails or changes the shape of the prediction. The layers before the
group's first touched layer are not run again: their recorded outputs are replayed
(:class:`~autoprune.engine.prefix_cache.PrefixCache`). The verdict is kept per architecture,
groups and input shape for the life of the process.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from .data import tensors_in
from .prefix_cache import PrefixCache
from .removal import pruned_temporarily

_UNSAFE: dict[tuple, list[str]] = {}  # the probe's verdicts: (architecture, groups, input) -> names


def output_shape(value: Any) -> tuple | None:
    """The shape of the first tensor of a (nested) output: the model's prediction (later ones
    may be intermediate feature maps, whose widths pruning changes legitimately)."""
    first = next(tensors_in(value), None)
    return None if first is None else tuple(first.shape)


def leave_out_unsafe(graph: Any, groups: list) -> list:
    """``groups`` (of the :class:`~autoprune.engine.groups.PruningGraph` ``graph``, whose
    ``fingerprint`` they make) without those whose removal breaks a forward pass, with a warning
    naming them."""
    model = graph.model
    key = (type(model).__module__, type(model).__qualname__, graph.fingerprint,
           str(output_shape(graph.example_inputs)))
    if key not in _UNSAFE:
        _UNSAFE[key] = unsafe_groups(graph, groups)
    unsafe = _UNSAFE[key]
    if unsafe:
        names = ", ".join(unsafe[:4]) + (", ..." if len(unsafe) > 4 else "")
        warnings.warn(f"{len(unsafe)} of {len(groups)} channel groups of {type(model).__name__} "
                      f"cannot lose channels without breaking the model and are left whole: "
                      f"{names}", stacklevel=3)
    return [g for g in groups if g.name not in unsafe]


def unsafe_groups(graph: Any, groups: list) -> list[str]:
    """Names of the groups whose half removal makes a forward pass fail or changes the shape of
    the prediction (the first tensor the model returns); the model comes back unchanged."""
    model = graph.model
    was_training = model.training
    model.eval()
    args = graph.example_inputs if isinstance(graph.example_inputs, (list, tuple)) \
        else (graph.example_inputs,)
    unsafe = []
    cache = PrefixCache(model)  # each pass starts at the group's first layer (exact: see there)
    try:
        with torch.no_grad():
            with cache.recording():
                want = output_shape(model(*args))
            for group in groups:
                try:
                    touched = graph.touched_modules(group)
                    first = cache.first_touched(touched)
                    idxs = graph.channels_to_remove(group, 0.5)
                    with pruned_temporarily(graph, group, idxs, touched), \
                            cache.skipping_before(first):
                        fits = output_shape(model(*args)) == want
                except Exception:  # noqa: BLE001 - any failure means: not safe to prune
                    fits = False
                if not fits:
                    unsafe.append(group.name)
    finally:
        model.train(was_training)
    return unsafe
