"""Real channel removal: per-group ratios in, a smaller model and its plan out."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch.nn as nn

from ..errors import ConfigError
from .attributes import sync_metadata
from .checkpoint import BASE_SHAPES
from .channels import check_criterion
from .groups import PruningGraph
from .measure import count_flops, count_params


@dataclass
class PruneResult:
    """The pruned model, what was removed (``plan``), and parameters/FLOPs (MACs) before and after.

    ``plan[group] = {"channels": before, "kept": after, "ratio": asked, "removed": [indices]}``.
    """

    model: nn.Module
    plan: dict[str, dict[str, Any]] = field(default_factory=dict)
    params_before: int = 0
    params_after: int = 0
    flops_before: int = 0
    flops_after: int = 0

    @property
    def flops_reduction(self) -> float:
        """Fraction of FLOPs removed."""
        return 1.0 - self.flops_after / self.flops_before if self.flops_before else 0.0

    @property
    def params_reduction(self) -> float:
        """Fraction of parameters removed."""
        return 1.0 - self.params_after / self.params_before if self.params_before else 0.0


def check_ratio_map(ratios: Mapping[str, float]) -> dict[str, float]:
    """Validate ``{group: ratio}``: every ratio a number in [0, 1)."""
    out = {}
    for name, r in ratios.items():
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) \
                or not 0.0 <= r < 1.0:
            raise ConfigError(f"ratio {r!r} for group {name!r} is outside [0, 1): pass the "
                              f"fraction of channels to remove, e.g. 0.3")
        out[name] = float(r)
    return out


def check_round_to(round_to: int | None) -> None:
    """Refuse a ``round_to`` that is not None or a positive whole number."""
    if round_to is not None and (isinstance(round_to, bool) or not isinstance(round_to, int)
                                 or round_to < 1):
        raise ConfigError(f"round_to={round_to!r} must be a positive whole number such as 8")


def remove_channels(model: nn.Module, example_inputs: Any, ratios: Mapping[str, float], *,
                    criterion: str = "l1_norm", round_to: int | None = None,
                    ignored_layers: Iterable[Any] = (),
                    chosen_by: Callable[[str, float], list[int]] | None = None
                    ) -> dict[str, dict[str, Any]]:
    """What :func:`prune` does to ``model`` (in place), without counting parameters and FLOPs
    before and after: for a caller that only needs the smaller model (a candidate to time).
    ``chosen_by(group, ratio)``: the channels to remove, where the caller has chosen them on the
    unpruned model that ``model`` is a copy of (with the same ``criterion`` and ``round_to``).
    Returns the plan (:class:`PruneResult`'s ``plan``)."""
    ratios = check_ratio_map(ratios)
    check_criterion(criterion)
    check_round_to(round_to)
    graph = PruningGraph(model, example_inputs, ignored_layers)
    graph.check_names(ratios)
    if not hasattr(model, BASE_SHAPES):  # what it was before any pruning: checked on load
        setattr(model, BASE_SHAPES, {k: list(v.shape) for k, v in model.state_dict().items()})
    plan: dict[str, dict[str, Any]] = {}
    chosen = []
    for group in graph.groups:
        ratio = ratios.get(group.name, 0.0)
        if ratio <= 0:
            continue
        idxs = chosen_by(group.name, ratio) if chosen_by else \
            graph.channels_to_remove(group, ratio, criterion, round_to)
        chosen.append((group, idxs))
        plan[group.name] = {"channels": group.channels, "kept": group.channels - len(idxs),
                            "ratio": ratio, "removed": idxs}
    for group, idxs in chosen:  # indices of one group are not shifted by removing another's
        graph.remove(group, idxs)
    if chosen:
        sync_metadata(model)
    return plan


def prune(model: nn.Module, example_inputs: Any, ratios: Mapping[str, float], *,
          criterion: str = "l1_norm", round_to: int | None = None,
          ignored_layers: Iterable[Any] = (), flops_before: int | None = None) -> PruneResult:
    """Remove ``ratios[group]`` of each group's channels from ``model`` **in place**.

    Channels are chosen by ``criterion`` (``l1_norm``, ``l2_norm``, ``fpgm``, ``bn_scale``) on the
    unpruned weights, group by group, so the choice for one group does not depend on the others
    (the same choice the sensitivity analysis measured). At least one channel is kept;
    ``round_to`` keeps multiples of that many channels. ``flops_before``: the model's FLOPs on
    ``example_inputs`` where the caller has counted them already (an allocation pruning copies
    of one model several times). Returns a :class:`PruneResult` whose ``model`` is the same
    object, now smaller.
    """
    check_ratio_map(ratios)  # a bad argument is refused before anything is counted
    check_criterion(criterion)
    check_round_to(round_to)
    result = PruneResult(model, params_before=count_params(model),
                         flops_before=count_flops(model, example_inputs)
                         if flops_before is None else flops_before)
    result.plan = remove_channels(model, example_inputs, ratios, criterion=criterion,
                                  round_to=round_to, ignored_layers=ignored_layers)
    result.params_after = count_params(model)
    result.flops_after = count_flops(model, example_inputs)
    return result
