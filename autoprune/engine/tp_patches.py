"""Patches to torch-pruning's dependency search, applied on import by :mod:`.groups`.

- Index mappings are recomputed only when a :class:`~.groups.PruningGraph`'s channel counts
  changed (torch-pruning redoes them for every group: quadratic).
- A concat or reshape whose mapping torch-pruning cannot compute is marked, and the groups
  through it are left out, instead of failing the whole graph.
- The walk forming one group runs within a budget (:func:`walk_budget`): a runaway walk raises
  :class:`OverBudget` and its group is left whole.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch_pruning as tp

_tp_update_index_mapping = tp.dependency.index_mapping.update_index_mapping


def _update_index_mapping_when_stale(graph: tp.DependencyGraph) -> None:
    """torch-pruning recomputes every index mapping of the graph (concat offsets, reshape strides)
    each time it forms a group: quadratic in the groups (densenet121 spent half its pruning
    there, Swin S minutes). A graph of a :class:`PruningGraph` is marked fresh once mapped and
    stale when channel counts change (:meth:`PruningGraph.resized`); other graphs keep
    torch-pruning's behaviour."""
    if getattr(graph, "_autoprune_mapping_fresh", False):
        return
    _tp_update_index_mapping(graph)
    if hasattr(graph, "_autoprune_mapping_fresh"):
        graph._autoprune_mapping_fresh = True


_tp_update_concat_index_mapping = tp.dependency.index_mapping.update_concat_index_mapping


def _update_concat_index_mapping_or_mark(graph: tp.DependencyGraph, node) -> None:
    """torch-pruning's concat mapping, which raises TypeError where it cannot infer the widths of
    the inputs (Swin-S/B's PatchMerging: a concat on dim -1 behind 18 blocks); such a concat is
    marked instead, and a group through it is left out (:func:`_unmapped`)."""
    try:
        _tp_update_concat_index_mapping(graph, node)
    except TypeError:
        if not hasattr(graph, "_autoprune_mapping_fresh"):  # not a PruningGraph's
            raise
        node.autoprune_unmapped = True


_tp_update_reshape_index_mapping = tp.dependency.index_mapping.update_reshape_index_mapping


def _update_reshape_index_mapping_or_mark(graph: tp.DependencyGraph, node) -> None:
    """torch-pruning's reshape mapping, which divides by zero where a reshape makes fewer
    channels than there are input channels and does not divide them (SHViT's single-head
    attention); such a reshape is marked instead, and a group through it is left out."""
    try:
        _tp_update_reshape_index_mapping(graph, node)
    except ZeroDivisionError:
        if not hasattr(graph, "_autoprune_mapping_fresh"):  # not a PruningGraph's
            raise
        node.autoprune_unmapped = True


tp.dependency.index_mapping.update_index_mapping = _update_index_mapping_when_stale
tp.dependency.index_mapping.update_concat_index_mapping = _update_concat_index_mapping_or_mark
tp.dependency.index_mapping.update_reshape_index_mapping = _update_reshape_index_mapping_or_mark

# The walk that forms one group while a PruningGraph lists its groups has a budget. torch-pruning
# maps channel indices through every reshape that folds channels into other axes (an ECA or
# global-context block's view, an area attention's heads): the index lists grow by the folded
# size at each such step, and on some graphs (MAnet's fusion blocks, ECA-ResNets, FocalNet's
# modulation, YOLO12's area attention unless ignored) the walk revisits the same layers with
# ever new index sets for many minutes. Measured on 2 cores: a healthy group of the zoo (ResNets,
# DenseNets, ViT-B, YOLOv8) maps no folded index (the most: VGG-11's last conv at 224 px, flattened
# into its classifier, 150k) and holds at most ~1000 items (ViT-B/16), each layer reached at most 6
# times; the runaway walks pass 2 million folded indices or 169 visits of one layer. A group over
# budget is left whole (with a warning); the check costs ~1 s per such root.
MAX_FOLDED_INDICES = 200_000  # indices mapped through reshapes that fold channels, per group
MAX_GROUP_ITEMS = 5_000  # dependency items of one group
MAX_VISITS = 64  # times one layer (and pruning direction) is reached in one group


class OverBudget(Exception):
    """The group being formed went over its budget (see :data:`MAX_FOLDED_INDICES`)."""


class WalkBudget:
    """What the walk forming one group has spent, and what it reached."""

    def __init__(self) -> None:
        self.folded = 0
        self.items = 0
        self.visits: dict[tuple[int, Any], int] = {}
        self.reached: list[Any] = []  # the dependency of every item added

    def fold(self, count: int) -> None:
        self.folded += count
        if self.folded > MAX_FOLDED_INDICES:
            raise OverBudget(f"over {MAX_FOLDED_INDICES} folded channel indices")

    def add(self, dep: Any) -> None:
        self.items += 1
        key = (id(dep.target), dep.handler)
        self.visits[key] = self.visits.get(key, 0) + 1
        self.reached.append(dep)
        if self.items > MAX_GROUP_ITEMS:
            raise OverBudget(f"over {MAX_GROUP_ITEMS} items")
        if self.visits[key] > MAX_VISITS:
            raise OverBudget(f"one layer reached over {MAX_VISITS} times")


_WALK: WalkBudget | None = None  # the budget of the group a PruningGraph is forming, if any
_tp_flatten_mapping = tp.dependency.index_mapping._FlattenIndexMapping.__call__
_tp_add_dep = tp.dependency.Group.add_dep


def _flatten_mapping_within_budget(self, idxs):
    if _WALK is not None:
        _WALK.fold(len(idxs) * (1 if self.reverse else self._stride))
    return _tp_flatten_mapping(self, idxs)


def _add_dep_within_budget(self, dep, idxs):
    if _WALK is not None:
        _WALK.add(dep)
    return _tp_add_dep(self, dep, idxs)


tp.dependency.index_mapping._FlattenIndexMapping.__call__ = _flatten_mapping_within_budget
tp.dependency.Group.add_dep = _add_dep_within_budget


@contextlib.contextmanager
def walk_budget() -> Iterator[WalkBudget]:
    """The budget of the group being formed inside the ``with`` (off again after it)."""
    global _WALK
    _WALK = budget = WalkBudget()
    try:
        yield budget
    finally:
        _WALK = None
