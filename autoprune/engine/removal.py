"""Removing a group's channels (or several groups') for the length of a block, then restoring
the model and the graph exactly (the sensitivity points and the groups' probe use it)."""
from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator, Sequence

import torch.nn as nn


@contextlib.contextmanager
def pruned_temporarily(graph: Any, group: Any, idxs: Sequence[int],
                       touched: Sequence[Any] | None = None) -> Iterator[None]:
    """Remove channels ``idxs`` of ``group`` (a :class:`~autoprune.engine.groups.PrunableGroup` of
    the :class:`~autoprune.engine.groups.PruningGraph` ``graph``) for the duration of the block,
    then restore exactly; ``touched``: ``graph.touched_modules(group)`` where the caller has
    it already."""
    with restored_after(graph, graph.touched_modules(group) if touched is None else touched):
        graph.remove(group, idxs)
        yield


@contextlib.contextmanager
def restored_after(graph: Any, touched: Sequence[Any]) -> Iterator[None]:
    """Undo, after the block, what removing channels in it did to the layers ``touched`` (the
    groups' ``graph.touched_modules``, together) and to ``graph``: several groups removed in one
    block are restored at once."""
    modules = list(dict.fromkeys(touched))
    # a layer that resizes its own sub-layers (MultiheadAttention's out_proj) is restored with them
    modules += [sub for m in modules if m is not graph.model for sub in m.modules()
                if sub is not m and sub not in modules]
    saved = [(m, dict(m._parameters), dict(m._buffers),
              {k: v for k, v in m.__dict__.items() if not k.startswith("_")}) for m in modules]
    dg = graph.dg
    # torch-pruning's own op nodes (concat, split, slice) keep channel sizes that pruning edits,
    # some in place (ConcatPruner decrements concat_sizes): without this, the next group's
    # channel indices would be mapped through the sizes of an already restored prune
    ops = [(node.module, {k: copy.deepcopy(v) if isinstance(v, (list, tuple, dict)) else v
                          for k, v in node.module.__dict__.items() if not k.startswith("_")})
           for node in dg.module2node.values()
           if isinstance(node.module, nn.Module) and node.module not in graph.names]
    param_names, module2node = dict(dg._param_to_name), dict(dg.module2node)
    param_nodes = {node: node.module for node in module2node.values()
                   if isinstance(node.module, nn.Parameter)}
    history = len(dg._pruning_history)
    try:
        yield
    finally:
        for m, params, buffers, attrs in saved:
            m._parameters.clear()
            m._parameters.update(params)
            m._buffers.clear()
            m._buffers.update(buffers)
            m.__dict__.update(attrs)
        for op, attrs in ops:
            op.__dict__.update(attrs)
        dg._param_to_name, dg.module2node = param_names, module2node
        for node, param in param_nodes.items():
            node.module = param
        del dg._pruning_history[history:]
        graph.resized()  # a mapping computed while pruned no longer holds
