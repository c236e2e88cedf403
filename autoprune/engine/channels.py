"""Which channels a prunable group loses: importance criteria (torch-pruning's), how many
channels a ratio keeps, and the choice that respects GroupNorm groups, attention heads, packed
(GLU) parts and grouped convs."""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch_pruning as tp

from ..errors import ConfigError

CRITERIA = ("l1_norm", "l2_norm", "fpgm", "bn_scale")
ROOT_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def _importance(criterion: Any) -> Any:
    """torch-pruning's importance for a criterion's name, or ``criterion`` itself when it is a
    callable scoring a torch-pruning group's channels (a ``tp.importance.Importance`` or any
    ``f(group) -> tensor of scores``, higher = kept), as Torch-Pruning's pruners take it."""
    if callable(criterion):
        return criterion
    if criterion == "l1_norm":
        return tp.importance.GroupMagnitudeImportance(p=1, group_reduction="mean", normalizer=None)
    if criterion == "l2_norm":
        return tp.importance.GroupMagnitudeImportance(p=2, group_reduction="mean", normalizer=None)
    if criterion == "fpgm":
        return tp.importance.FPGMImportance(p=2, normalizer=None)
    if criterion == "bn_scale":
        return tp.importance.BNScaleImportance(normalizer=None)
    raise ConfigError(f"unknown criterion {criterion!r}: use one of {', '.join(CRITERIA)}, or "
                      f"pass a callable scoring a group's channels")


def check_criterion(criterion: Any) -> Any:
    """Return ``criterion`` if it is supported (a name of :data:`CRITERIA` or a callable), else
    raise a ConfigError naming the choices."""
    _importance(criterion)
    return criterion


def criterion_name(criterion: Any) -> str:
    """How a criterion is recorded in a sensitivity file: its name, or a callable's name."""
    if isinstance(criterion, str) or criterion is None:
        return criterion
    return getattr(criterion, "__name__", None) or type(criterion).__name__


def channels_to_keep(channels: int, ratio: float, round_to: int | None = None) -> int:
    """How many of ``channels`` survive pruning ``ratio`` of them (at least one;
    ``round_to`` multiples)."""
    if not 0.0 <= ratio < 1.0:
        raise ConfigError(f"pruning ratio {ratio} is outside [0, 1): pass a fraction such as 0.3")
    keep = channels - math.floor(ratio * channels + 0.5)
    if round_to and round_to > 1 and ratio > 0:
        keep = max(round_to, math.floor(keep / round_to + 0.5) * round_to)
    return max(1, min(channels, keep))


def channels_to_remove(graph: Any, group: Any, ratio: float, criterion: str = "l1_norm",
                       round_to: int | None = None) -> list[int]:
    """Indices of the least important channels that pruning ``ratio`` of ``group`` (a group of
    the :class:`~autoprune.engine.groups.PruningGraph` ``graph``) removes.

    With a multi-group GroupNorm in the group the same number of channels goes from each of
    its groups (the least important of each), so its channel count stays divisible. A
    multi-head attention whose embedding the group cuts (a ViT's) loses the same number of
    channels from each head, so every head keeps its own channels. A layer whose outputs are
    packed parts multiplied together (a GLU MLP's ``fc1``, chunked in a value and a gate half)
    loses the same positions from every part: ``ratio`` of its outputs in all, not twice."""
    full = graph.tp_group(group)
    channels = len(full[0].idxs)
    parts = packed_parts(graph, group, channels)
    units = channels // parts  # positions: one channel of each packed part
    blocks = blocks_of(full)
    keep = channels_to_keep(channels, ratio, round_to) // parts
    blocks = 1 if parts % blocks == 0 or units % blocks else blocks  # (parts hold blocks)
    keep = max(blocks, keep // blocks * blocks)
    n_remove = units - keep
    if n_remove <= 0:
        return []
    scores = _importance(criterion)(full)
    if scores is None:  # e.g. bn_scale on a group without BatchNorm
        scores = _importance("l1_norm")(full)
    scores = scores.detach().float().cpu()
    unit_scores = scores.view(parts, units).sum(0)
    size, per_block = units // blocks, n_remove // blocks
    removed = []
    for b in range(blocks):
        order = torch.argsort(unit_scores[b * size:(b + 1) * size], stable=True)
        removed += (order[:per_block] + b * size).tolist()
    removed = [i + p * units for i in removed for p in range(parts)]
    return sorted(keep_one_per_part(full, set(removed), scores, channels))


def packed_parts(graph: Any, group: Any, channels: int) -> int:
    """How many packed parts the root's outputs hold (1 for most layers): a layer whose
    output is chunked into parts that are then multiplied together (a GLU MLP's ``fc1``)
    couples output ``i`` with ``i + channels / parts``, ``i + 2 * channels / parts``...;
    torch-pruning removes the partners of a channel with it. Read from the group of channel
    0. A grouped (not depthwise) conv in the group counts its conv groups as parts: each
    keeps the same input positions (torch-pruning slices a grouped conv's inputs that way),
    as ResNeXt / SKNet convs need. The least common multiple of both; kept per group name and
    width."""
    key = (group.name, channels)
    if key not in graph._parts:
        root = graph.modules[group.root]
        found = {i for dep, idxs in graph.tp_group(group, [0])
                 if dep.target.module is root and graph.dg.is_out_channel_pruning_fn(
                     dep.handler) for i in idxs}
        parts = len(found)
        packed = parts > 1 and channels % parts == 0 and \
            found == {p * (channels // parts) for p in range(parts)}
        convs = [dep.target.module.groups for dep, _ in graph.tp_group(group)
                 if grouped(dep.target.module)]
        parts = math.lcm(parts if packed else 1, *convs)
        graph._parts[key] = parts if channels % parts == 0 else 1
    return graph._parts[key]


def blocks_of(tp_group) -> int:
    """How many equal blocks the channel choice must respect: the least common multiple of
    the ``num_groups`` of the GroupNorms and the ``num_heads`` of the multi-head attentions
    in the group (1 without either)."""
    counts = []
    for dep, _ in tp_group:
        module = dep.target.module
        if isinstance(module, nn.GroupNorm):
            counts.append(module.num_groups)
        elif isinstance(module, nn.MultiheadAttention):
            counts.append(module.num_heads)
    return math.lcm(1, *counts)


def grouped(module: Any) -> bool:
    """True for a grouped conv that is not depthwise (``groups`` > 1, fewer than its inputs)."""
    return isinstance(module, nn.modules.conv._ConvNd) and module.groups > 1 and \
        tp.ops.module2type(module) != tp.ops.OPTYPE.DEPTHWISE_CONV


def keep_one_per_part(tp_group, removed: set[int], scores: torch.Tensor,
                      channels: int) -> set[int]:
    """``removed`` minus, for every layer that makes only part of the group's channels (one input
    of a concatenation that a depthwise conv couples, as in DeepLabV3+'s decoder), its most
    important channel when all of its channels would go: no layer is left with none."""
    for item in tp_group:
        module = item.dep.target.module
        part = set(getattr(item, "root_idxs", None) or ())
        if not isinstance(module, ROOT_TYPES) or not part or len(part) >= channels:
            continue
        if _cuts_outputs(item) and part <= removed:
            removed.discard(max(part, key=lambda i: (scores[i].item(), -i)))
    return removed


def _cuts_outputs(item) -> bool:
    handler = item.dep.handler
    return getattr(handler, "__name__", "") == "prune_out_channels"
