"""Which of the analysis's evaluation helpers (the prefix cache, the folded evaluation) is in force
for a model, so that an evaluation running a copy of the model can make it apply to the copy too
(:mod:`autoprune.engine.evaluated_copy`). Keyed by the model's identity; blocks of one kind nest."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch.nn as nn

_IN_FORCE: dict[tuple[str, int], tuple[nn.Module, Any]] = {}


@contextlib.contextmanager
def in_force(kind: str, model: nn.Module, helper: Any) -> Iterator[None]:
    """``helper`` is the ``kind`` of helper in force for ``model`` for the block."""
    key = (kind, id(model))
    before = _IN_FORCE.get(key)
    _IN_FORCE[key] = (model, helper)
    try:
        yield
    finally:
        if before is None:
            _IN_FORCE.pop(key, None)
        else:
            _IN_FORCE[key] = before


def helper_for(kind: str, model: nn.Module) -> Any:
    """The ``kind`` of helper in force for ``model`` (None where there is none)."""
    found = _IN_FORCE.get((kind, id(model)))
    return found[1] if found is not None and found[0] is model else None


__all__ = ["helper_for", "in_force"]
