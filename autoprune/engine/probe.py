"""The probe: channel groups whose removal breaks a forward pass, left whole with a warning.

The dependency graph does not describe every layout (attention heads read through views,
weight-standardised convs...): a group that, losing half its channels, makes a forward pass fail
or changes the shape of the prediction is left whole. The groups lose them together first, and
only a set that fails is split (:func:`unsafe_groups`). The layers before the first pruned layer
are not run again: their recorded outputs are replayed
(:class:`~autoprune.engine.prefix_cache.PrefixCache`). The verdict is kept per architecture,
groups and input shape for the life of the process.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

from .data import tensors_in
from .prefix_cache import PrefixCache
from .removal import restored_after

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
    the prediction (the first tensor the model returns); the model comes back unchanged.

    The groups are tested together first: a set whose removal, all at once, keeps the forward
    whole is safe (real pruning removes them together too); a set that fails is split in two, and
    the failing half split again, down to a few groups, whose members are tested alone; where
    both halves fail (unsafe groups are many: attention models), each member is tested alone. So
    a model with a few unsafe groups costs a few dozen forward passes, not one per group (yolov9s:
    145 groups). A group is left out when it breaks the model alone, and the members of a set
    that passes whole are taken as safe (benchmarks/probe_speed.py checks the verdicts against
    testing one group at a time)."""
    model = graph.model
    was_training = model.training
    model.eval()
    args = graph.example_inputs if isinstance(graph.example_inputs, (list, tuple)) \
        else (graph.example_inputs,)
    cache = PrefixCache(model)  # each pass starts at the first layer it prunes (exact: see there)
    try:
        with torch.no_grad():
            with cache.recording():
                want = output_shape(model(*args))

            def fits(plans: list[tuple[Any, list]]) -> bool:
                """Whether removing half of every group of ``plans`` keeps the prediction."""
                touched = [m for _, modules in plans for m in modules]
                try:
                    with restored_after(graph, touched):
                        for group, _ in plans:
                            graph.remove(group, graph.channels_to_remove(group, 0.5))
                        with cache.skipping_before(cache.first_touched(touched)):
                            return output_shape(model(*args)) == want
                except Exception:  # noqa: BLE001 - any failure means: not safe to prune
                    return False

            def alone(plans: list[tuple[Any, list]]) -> list[str]:
                return [group.name for group, touched in plans if not fits([(group, touched)])]

            def breaking(plans: list[tuple[Any, list]], fails: bool = False) -> list[str]:
                """The groups of ``plans`` that break the model alone (``fails``: the set
                is known to fail together, so not tested again)."""
                if len(plans) <= _ALONE:
                    return alone(plans)
                if not fails and fits(plans):
                    return []
                left, right = plans[:len(plans) // 2], plans[len(plans) // 2:]
                if fits(left):
                    return breaking(right, fails=True)
                if fits(right):
                    return breaking(left, fails=True)
                return alone(plans)  # both halves fail: unsafe groups are many here (attention)

            plans = []
            for group in groups:
                try:
                    plans.append((group, list(graph.touched_modules(group))))
                except Exception:  # noqa: BLE001 - a group the graph cannot even walk
                    plans.append((group, None))
            walked = [p for p in plans if p[1] is not None]
            unsafe = set(breaking(walked)) | {g.name for g, t in plans if t is None}
            return [g.name for g in groups if g.name in unsafe]
    finally:
        model.train(was_training)


_ALONE = 3  # a failing set of this many groups or fewer is tested one group at a time
