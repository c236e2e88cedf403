"""Sensitivity analysis: how much the metric drops when one group alone loses a share
of its channels.

This module runs the analysis: it checks the settings, opens the file, and runs the full
analysis (every point, masked, batched or pruned for real) or hands an adaptive one to
:mod:`autoprune.engine.adaptive_analysis`; it shares the points out over torch.distributed ranks
and writes every point atomically as soon as it is measured, so a rerun computes only what is
missing. Its file (opened or resumed and checked, the points missing, the session's end) is
:mod:`autoprune.engine.analysis_file`; how one point is evaluated (a real prune undone exactly,
or masked, batched variants), :mod:`autoprune.engine.points`; the prefix cache's set-up,
:mod:`autoprune.engine.prefix_check`; the cost said first, :mod:`autoprune.engine.cost`.
"""
from __future__ import annotations

import math
import numbers
import os
import time
from typing import Any, Callable, Iterable, Mapping

import torch.nn as nn

from ..errors import ConfigError, MetricError
from .adaptive import Target, check_bound, check_target
from .adaptive_analysis import _run_adaptive
from .analysis_file import (check_same_evaluation, check_weights, finish, missing_points,
                            note_non_finite, open_record, stopped_early, table_of,
                            weights_sha256)
from .channels import check_criterion
from .cost import announce, wall
from .distributed import broadcast, rank_and_world, shard
from .fused_eval import pays_at
from .groups import PruningGraph
from .incremental import CountingEval, images_of
from .keywords import regroup
from .latency import (Timing, check_latency_table, latency_points, latency_setting,
                      measure_point_latencies, setting_differences)
from .measure import flush_denormals
from .points import EVALUATIONS, EvalFn, PointRunner, _evaluate, resolve_evaluation
from .points import as_metric, pruned_temporarily, relative_loss  # noqa: F401 - also public here
from .prefix_check import prepare_cache, unpruned_scores
from .store import Sensitivities, SensitivityRecord, ratio_key, record_from_json, shard_path, \
    write_record

DEFAULT_RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def check_ratios(ratios: Iterable[float]) -> list[float]:
    """Validate pruning ratios (each in (0, 1)) and round them to 2 decimals, sorted, unique."""
    out = []
    for r in ratios:
        if not isinstance(r, numbers.Real) or not 0.0 < float(r) < 1.0 \
                or ratio_key(r) in (0.0, 1.0):
            raise ConfigError(f"pruning ratio {r!r} is outside (0, 1): use fractions such as "
                              f"0.1 ... 0.9")
        out.append(ratio_key(r))
    if not out:
        raise ConfigError("no pruning ratios given: pass e.g. ratios=(0.1, 0.3, 0.5)")
    return sorted(set(out))


def check_analysis_options(*, evaluation: str = "auto", batch_variants: int = 8,
                           early_stop: float | None = None, adaptive: bool = False,
                           target: Any = None, bound: str = "confidence",
                           confidence: float = 0.999, plan: bool = False,
                           fused_eval: bool = True, **_: Any) -> None:
    """Refuse a bad ``evaluation``, ``batch_variants``, ``early_stop``, ``fused_eval`` or adaptive
    setting (``adaptive``, ``target``, ``bound``, ``confidence``, ``plan``): a one-line
    ConfigError."""
    for name, flag in (("adaptive", adaptive), ("plan", plan), ("fused_eval", fused_eval)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{name}={flag!r} must be True or False")
    if target is not None:
        check_target(target)
    check_bound(bound, confidence)
    if adaptive and early_stop is not None:
        raise ConfigError(f"early_stop={early_stop!r} and adaptive=True both cut the analysis "
                          f"short: pass one (adaptive measures only what the allocation needs)")
    if evaluation not in EVALUATIONS:
        raise ConfigError(f"evaluation={evaluation!r} is not one of {', '.join(EVALUATIONS)}")
    if isinstance(batch_variants, bool) or not isinstance(batch_variants, int) \
            or batch_variants < 1:
        raise ConfigError(f"batch_variants={batch_variants!r} must be a positive integer such as 8")
    if early_stop is not None and (isinstance(early_stop, bool)
                                   or not isinstance(early_stop, (int, float))
                                   or not math.isfinite(early_stop) or early_stop <= 0):
        raise ConfigError(f"early_stop={early_stop!r} must be a positive loss such as 0.5")


# how the points are measured (``sensitivity(options=...)``) and the defaults
ANALYSIS_DEFAULTS = {"early_stop": None, "prefix_cache": True, "fused_eval": True,
                     "evaluation": "auto",
                     "batch_variants": 8, "adaptive": False, "target": None,
                     "bound": "confidence", "confidence": 0.999, "plan": False}
DEFAULT_TARGET = Target("loss", 0.05)  # an adaptive analysis's target when none is given
# sensitivity()'s former keywords: the argument that holds each now, and its field there
SENSITIVITY_RENAMED = {**{k: ("options", k) for k in ("early_stop", "prefix_cache", "evaluation",
                                                      "batch_variants")},
                       **{f"latency_{k}": ("latency", k)
                          for k in ("device", "threads", "batch", "runtime")}}


def analysis_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` checked (an unknown key or a bad value: one-line ConfigError), with the
    defaults of :data:`ANALYSIS_DEFAULTS` for the keys not given."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(ANALYSIS_DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown analysis option {unknown[0]!r}: use "
                          f"{', '.join(ANALYSIS_DEFAULTS)}")
    options = {**ANALYSIS_DEFAULTS, **options}
    check_analysis_options(**options)
    return options


def _by_group(points: list[tuple[str, float]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name, ratio in points:
        out.setdefault(name, []).append(ratio)
    return out


def sensitivity(model: nn.Module, example_inputs: Any, eval_fn: EvalFn, *,
                groups: Iterable[str] | None = None, ratios: Iterable[float] = DEFAULT_RATIOS,
                sensitivities_file: str | os.PathLike | None = None, criterion: str = "l1_norm",
                ignored_layers: Iterable[Any] = (), higher_is_better: bool = True,
                metric_name: str = "metric", arch: str | None = None,
                extra: Mapping[str, Any] | None = None,
                options: Mapping[str, Any] | None = None, progress: bool = True,
                latency: bool | Timing | Mapping[str, Any] = False,
                **renamed: Any) -> Sensitivities:
    """Measure ``{group: {ratio: loss}}`` for each prunable group and ratio.

    ``options`` (how the points are measured; every key optional): ``early_stop`` (a loss cap,
    None: off), ``prefix_cache`` (True), ``fused_eval`` (True), ``evaluation`` ("auto", "prune"
    or "masked") and
    ``batch_variants`` (8), explained below; ``adaptive`` (False), ``target`` (``{"loss": 0.05}``,
    ``{"flops": 0.5}`` or ``{"latency": 0.4}``; loss 0.05 when not given), ``bound``
    ("confidence" or "exact") and ``confidence`` (0.999): measure only the points and images the
    allocation for ``target`` needs (:mod:`autoprune.engine.adaptive`; the early stop on images
    needs an ``eval_fn`` with ``incremental``, :mod:`autoprune.engine.incremental`; real prune
    only); ``plan`` (False): print the expected cost and return the table as it is, measuring and
    writing nothing (with ``progress``, every analysis prints it before its points). ``latency``:
    True, or a :class:`Timing` (or a dict of its fields), times each point too. The former keywords
    (``early_stop=``, ``latency_threads=``...) still work, with a FutureWarning.

    For each point the group alone loses ``ratio`` of its channels (chosen by ``criterion``),
    ``eval_fn(model)`` is called (model in eval mode, under ``torch.no_grad``) and
    ``loss = (baseline - metric) / |baseline|`` is recorded (sign flipped if not
    ``higher_is_better``). The model comes back bit-identical.

    With ``sensitivities_file`` the points already in the file are reused and every new point is
    written atomically as soon as it is measured: an interrupted run resumes where it stopped.
    ``early_stop`` (off by default) skips a group's larger ratios once its loss passes that cap;
    it and ``extra`` (e.g. how the evaluation data was subset) are recorded in the file, and a
    rerun with the same cap does not measure the skipped ratios. A NaN or infinite metric at a
    pruned point is recorded as the worst loss (1.0, or 1e6 when lower is better), with a warning
    and a note in ``extra["non_finite_points"]``; at the unpruned model it is a MetricError.
    ``prefix_cache`` (on by default) replays the unchanged first part of the network from one
    recorded pass instead of recomputing it (see :mod:`autoprune.prefix_cache`); it is checked
    once against a normal evaluation and switches itself off if the two differ. ``fused_eval``
    (on by default; CPU, real prune) folds each BatchNorm into the convolution before it and lays
    convolution weights out channels-last while a point is evaluated (1.76x for resnet50 at
    224 px, see :mod:`autoprune.engine.fused_eval`); checked once against the plain metric.
    ``evaluation`` chooses how a point is evaluated: ``"prune"`` removes the channels for real;
    ``"masked"`` zeroes them with hooks and evaluates up to ``batch_variants`` ratios of a group in
    one forward pass (see :mod:`autoprune.masking`), after checking once per group that masking
    gives the outputs of a real prune (else that group is pruned for real) and once per run that
    both give the same metric; ``"auto"`` (default) does the same checks, times both ways on the
    first group and keeps the faster one. Every recorded number is a real-prune number up to
    float noise; ``extra["evaluation"]`` in the file says what was used.
    Under ``torch.distributed`` (torchrun) the points are shared out over the ranks; each rank
    keeps its points in a shard file and rank 0 merges them into ``sensitivities_file``; every
    rank returns the full result. Returns the requested groups and the ratios measured (with
    ``latency=True`` a dict whose ``.record`` is the whole
    :class:`~autoprune.engine.store.SensitivityRecord`, latencies included).

    ``latency`` also times each point's really pruned model (a temporary prune, whatever
    ``evaluation`` is) as its :class:`Timing` says (device, CPU threads, batch copies of the
    first example, runtime: torch eager, or ONNX Runtime / OpenVINO on the exported model;
    ``latency=True``: the CPU, torch's current threads, batch 1, eager), paired with the unpruned
    model (see :mod:`autoprune.engine.latency`): ``record.latency[group][ratio]`` is pruned /
    unpruned latency, ``extra["latency"]`` the setting and ``baseline_ms``. Resumable like the
    losses; a file timed in another setting is refused. Under torchrun rank 0 times, alone.
    """
    former = regroup("sensitivity", renamed, SENSITIVITY_RENAMED)
    opts = analysis_options({**dict(options or {}), **former.get("options", {})})
    early_stop, evaluation = opts["early_stop"], opts["evaluation"]
    adaptive, plan = opts["adaptive"], opts["plan"]
    goal = check_target(opts["target"]) if opts["target"] is not None else DEFAULT_TARGET
    eval_fn = CountingEval(eval_fn, images_of(eval_fn, (extra or {}).get("eval_images")))
    scores = None  # adaptive, incremental: (the unpruned model's per-image scores, cache)
    timing = Timing.of(latency, **former.get("latency", {})) if latency else None
    ratios = check_ratios(ratios)
    check_criterion(criterion)
    if timing is not None:
        timing.check()
    rank, world = rank_and_world()
    graph = PruningGraph(model, example_inputs, ignored_layers)
    names = [g.name for g in graph.groups] if groups is None else list(groups)
    graph.check_names(names)
    path = sensitivities_file

    record = None
    if rank == 0:
        weights = weights_sha256(model)
        how = {**dict(extra or {}), "early_stop": early_stop}
        record = open_record(path, graph, arch=arch or type(model).__name__,
                             criterion=criterion, higher_is_better=higher_is_better,
                             metric_name=metric_name, weights=weights, extra=how)
        if timing is not None and record.latency:  # refused before any point is measured
            wanted = latency_setting(example_inputs, **timing.kwargs())
            if setting_differences(record.extra.get("latency"), wanted):
                check_latency_table(record, wanted, path)
        pending = missing_points(record, names, ratios, early_stop)
        if pending:
            check_same_evaluation(record, how, path)
        else:  # nothing to measure: a complete file keeps the record of how it was measured
            how = {k: v for k, v in how.items() if k not in record.extra}
            if record.model.get("weights_sha256") not in (None, weights):
                print(f"[autoprune] {path} holds a complete table measured on other weights of "
                      f"this model; using it as is (pass a new path to measure these weights)",
                      flush=True)
        record.extra.update(how)
        if pending or record.metric.get("baseline") is None:
            check_weights(record, weights, path)
        if record.metric.get("baseline") is None:
            if adaptive and eval_fn.incremental is not None:  # with the per-image scores
                scores = unpruned_scores(model, eval_fn, graph, shard(names, rank, world),
                                         opts["prefix_cache"])
                baseline = scores[1]
            else:
                baseline = _evaluate(model, eval_fn, "for the unpruned model")
            if baseline == 0:
                raise MetricError("the unpruned model scores 0: a relative loss needs a non-zero "
                                  "baseline; evaluate a trained model or use another metric")
            record.metric["baseline"] = baseline
        if path is not None and not plan:
            write_record(record, path)
    record = record_from_json(broadcast(record.to_json() if record else None))
    baseline = float(record.metric["baseline"])
    if adaptive:
        summary, own = _run_adaptive(model, example_inputs, eval_fn, graph, record, names,
                                     ratios, higher_is_better, opts, goal, scores, criterion,
                                     None if plan else path, progress)
        return finish(record, summary, None if plan else path, names, ratios, own=own,
                      time_points=None if plan else _point_timer(
                          model, example_inputs, graph, names, ratios, criterion, timing,
                          path, progress))

    missing = missing_points(record, names, ratios, early_stop)
    # with early stop a group's ratios must be measured in order, by one rank; batched variants
    # need a group's ratios together too
    whole_groups = early_stop is not None or resolve_evaluation(model, evaluation) == "masked"
    mine = [p for p in missing if p[0] in set(shard(names, rank, world))] if whole_groups else \
        shard(missing, rank, world)
    own = SensitivityRecord(model=record.model, metric=record.metric, criterion=criterion,
                            extra=record.extra)
    target = path if rank == 0 else (shard_path(path, rank) if path is not None else None)

    flush_denormals()  # pruned variants of trained weights are full of them on CPU
    calls = eval_fn.calls
    cache, copying = prepare_cache(model, eval_fn, graph, mine, baseline) \
        if opts["prefix_cache"] and len(mine) >= 4 else (None, 0.0)
    runner = PointRunner(model, eval_fn, graph, criterion, cache, evaluation,
                         opts["batch_variants"], 0 if plan else len(mine), progress,
                         f" [rank {rank}/{world}]" if world > 1 else "",
                         opts["fused_eval"] and pays_at(example_inputs), baseline)
    cost = None
    passes = eval_fn.seconds[calls:]  # recording the prefix cache, checking its replay
    clean = calls > 0  # the baseline, evaluated first, decoded the batches
    timed = passes[0] - copying if passes and clean else None
    replayed = passes[1] if len(passes) > 1 and cache else None
    if mine and not plan and runner.prepare_fused():  # checked on one whole folded evaluation
        folded = eval_fn.seconds[-1]  # what a point's evaluation costs now
        if replayed is not None and passes[0] > copying:
            replayed *= folded / (passes[0] - copying)
        timed = folded if clean else None
    if (progress or plan) and rank == 0 and missing:  # the expected cost, before the points
        cost = announce(model, example_inputs, eval_fn, graph, runner, missing, timed,
                        replayed=replayed)
    if plan:
        runner.close()
        return table_of(record, names, ratios)
    start = time.perf_counter()
    for name, ratios_left in _by_group(mine).items():
        for ratio, loss in runner.run(name, ratios_left, baseline, higher_is_better,
                                      skip=lambda r: stopped_early(record, name, r, early_stop)):
            for rec in (record, own):
                rec.set_point(name, ratio, loss)
            note_non_finite(record.extra, runner.non_finite)  # own.extra is record.extra
            if target is not None:
                write_record(record if rank == 0 else own, target)
    runner.close()
    summary = {**runner.summary(), **eval_fn.counts(), **wall(cost, start)} \
        if mine or eval_fn.calls else None
    return finish(record, summary, path, names, ratios, own=own, non_finite=runner.non_finite,
                  time_points=_point_timer(model, example_inputs, graph, names, ratios,
                                           criterion, timing, path, progress))


def _point_timer(model: nn.Module, example_inputs: Any, graph: PruningGraph, names: list[str],
                 ratios: list[float], criterion: Any, timing: Timing | None, path: Any,
                 progress: bool) -> Callable[[SensitivityRecord], None] | None:
    """What times the analysis's points at its end (None: the analysis times nothing): each
    point of ``names`` x ``ratios`` not timed yet, written to ``path`` as it goes."""
    if timing is None:
        return None
    write = None if path is None else lambda r: write_record(r, path)
    return lambda record: measure_point_latencies(
        model, example_inputs, graph, record, latency_points(record, names, ratios),
        criterion=criterion, timing=timing, path=path, progress=progress, write=write)
