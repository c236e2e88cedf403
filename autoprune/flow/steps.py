"""Pruning in steps (``prune_steps=K``): the channel counts each step keeps, on a schedule that
is a callable (as Torch-Pruning's ``iterative_pruning_ratio_scheduler``), and one
:class:`~autoprune.engine.prune.PruneResult` for the steps together."""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch.nn as nn

from ..engine.channels import channels_to_keep
from ..engine.groups import PruningGraph
from ..engine.prune import PruneResult
from ..errors import ConfigError

Schedule = Callable[[int, int], float]  # (step k of K, K) -> share of the removal done after k


def check_schedule(schedule: Any, steps: int) -> Schedule | None:
    """Refuse a ``prune_schedule`` that is not a callable giving non-decreasing shares in
    [0, 1] ending at 1 (one-line ConfigError); None: the default."""
    if schedule is None:
        return None
    if not callable(schedule):
        raise ConfigError(f"prune_schedule={schedule!r:.40} must be a callable (step, steps) -> "
                          f"share of the removal done after that step, e.g. lambda k, K: k / K")
    shares = [schedule(k, steps) for k in range(1, steps + 1)]
    if any(not isinstance(s, (int, float)) or not 0 <= s <= 1 for s in shares) or \
            shares != sorted(shares) or abs(shares[-1] - 1) > 1e-9:
        raise ConfigError(f"prune_schedule gives {shares}: it must rise from step to step "
                          f"within [0, 1] and reach 1 at the last step")
    return schedule


def step_targets(model: nn.Module, example: Any, chosen: Mapping[str, float], steps: int,
                 round_to: int | None, ignored: Any, schedule: Schedule | None = None
                 ) -> list[Callable[[list[PruneResult]], dict[str, float]]]:
    """For each of ``steps`` steps, a function of the steps done so far giving that step's
    ratios: by default each group keeps ``keep^(k/steps)`` of its channels after step k
    (the same share of what is left at every step); a ``schedule`` gives the share ``s`` of the
    removal done after step k instead (the group keeps ``n0 - s * (n0 - final)`` channels). Counts
    are rounded (in ``round_to`` multiples); the last step keeps exactly one-shot's count, so the
    pruned model ends with the channels (and FLOPs) of pruning ``chosen`` at once."""
    if steps == 1:
        return [lambda done: dict(chosen)]
    graph = PruningGraph(model, example, ignored)
    start = {g.name: g.channels for g in graph.groups if chosen.get(g.name, 0) > 0}
    counts: dict[str, list[int]] = {}
    for name, n0 in start.items():
        final = channels_to_keep(n0, chosen[name], round_to)
        unit = round_to if round_to and round_to > 1 else 1
        path = []
        for k in range(1, steps):
            n = n0 * (final / n0) ** (k / steps) if schedule is None else \
                n0 - schedule(k, steps) * (n0 - final)
            n = max(final, min(n0, int(n / unit + 0.5) * unit))
            path.append(n)
        path.append(final)
        for i in range(1, len(path)):  # never grow back
            path[i] = min(path[i], path[i - 1])
        counts[name] = path

    def ratios(k: int) -> Callable[[list[PruneResult]], dict[str, float]]:
        def of(done: list[PruneResult]) -> dict[str, float]:
            now = dict(start)
            for step in done:
                now.update({g: p["kept"] for g, p in step.plan.items()})
            return {g: (now[g] - path[k]) / now[g] for g, path in counts.items()
                    if path[k] < now[g]}
        return of

    return [ratios(k) for k in range(steps)]


def combined(done: list[PruneResult], chosen: Mapping[str, float]) -> PruneResult:
    """One :class:`PruneResult` for pruning in steps: FLOPs and parameters from before the first
    step to after the last; per group the first channel count, the last kept one, the ratio
    asked for and the removed indices of the unpruned model."""
    if len(done) == 1:
        return done[0]
    plan: dict[str, dict[str, Any]] = {}
    alive: dict[str, list[int]] = {}
    for step in done:
        for name, p in step.plan.items():
            indices = alive.setdefault(name, list(range(p["channels"])))
            removed = set(p["removed"])
            alive[name] = [c for i, c in enumerate(indices) if i not in removed]
            first = plan.get(name, {}).get("channels", p["channels"])
            plan[name] = {"channels": first, "kept": p["kept"], "ratio": chosen.get(name, 0.0),
                          "removed": sorted(set(range(first)) - set(alive[name]))}
    return PruneResult(done[-1].model, plan, params_before=done[0].params_before,
                       params_after=done[-1].params_after, flops_before=done[0].flops_before,
                       flops_after=done[-1].flops_after)
