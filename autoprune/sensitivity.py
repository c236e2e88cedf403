"""Sensitivity analysis: how much the metric drops when one group alone loses a share of its channels.

Each point prunes the group for real (in place), evaluates, and puts the touched modules back
exactly as they were (same Parameter objects), so the model comes back bit-identical. With a
sensitivity file every point is written atomically as soon as it is measured and a rerun computes
only what is missing.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import numbers
import os
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from .errors import ConfigError, MetricError, SensitivityFileError
from .groups import PrunableGroup, PruningGraph, check_criterion
from .measure import flush_denormals
from .masking import BatchedVariants, NotBatchable, mask_points, masked_matches_pruned
from .prefix_cache import PrefixCache
from .distributed import barrier, broadcast, gather, rank_and_world, shard
from .store import (Sensitivities, SensitivityRecord, absorb_shards, check_fingerprint, ratio_key,
                    read_record, record_from_json, remove_stale_temp_files, shard_path, write_record)

DEFAULT_RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
EvalFn = Callable[[nn.Module], Any]
EVALUATIONS = ("auto", "masked", "prune")


def check_ratios(ratios: Iterable[float]) -> list[float]:
    """Validate pruning ratios (each in (0, 1)) and round them to 2 decimals, sorted, unique."""
    out = []
    for r in ratios:
        if not isinstance(r, numbers.Real) or not 0.0 < float(r) < 1.0 or ratio_key(r) in (0.0, 1.0):
            raise ConfigError(f"pruning ratio {r!r} is outside (0, 1): use fractions such as 0.1 ... 0.9")
        out.append(ratio_key(r))
    if not out:
        raise ConfigError("no pruning ratios given: pass e.g. ratios=(0.1, 0.3, 0.5)")
    return sorted(set(out))


def as_metric(value: Any, where: str) -> float:
    """Turn what an eval_fn returned into a finite float, or raise a MetricError."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise MetricError(f"eval_fn returned {type(value).__name__} {where}: it must return one "
                          f"number (e.g. top-1 accuracy as a float)")
    value = float(value)
    if not math.isfinite(value):
        raise MetricError(f"eval_fn returned {value} {where}: check the evaluation data and the "
                          f"model (empty loader? diverged weights?)")
    return value


def relative_loss(baseline: float, metric: float, higher_is_better: bool = True) -> float:
    """``(baseline - metric) / |baseline|``; the sign is flipped when lower is better."""
    drop = baseline - metric if higher_is_better else metric - baseline
    return drop / abs(baseline)


def weights_sha256(model: nn.Module) -> str:
    """A hash of every parameter and buffer (names, shapes and bytes)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def pruned_temporarily(graph: PruningGraph, group: PrunableGroup, idxs: Sequence[int]) -> Iterator[None]:
    """Remove channels ``idxs`` of ``group`` for the duration of the block, then restore exactly."""
    modules = graph.touched_modules(group)
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
        graph.remove(group, idxs)
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


def _evaluate(model: nn.Module, eval_fn: EvalFn, where: str) -> float:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return as_metric(eval_fn(model), where)
    finally:
        model.train(was_training)


def _open_record(path, graph: PruningGraph, *, arch, criterion, higher_is_better,
                 metric_name) -> SensitivityRecord:
    """The record to fill: the file at ``path`` if it exists (checked against this model), else new.

    Points that a killed distributed run left in shard files are merged in (and saved).
    """
    groups = {g.name: g.channels for g in graph.groups}
    model_meta = {"arch": arch, "fingerprint": graph.fingerprint, "groups": groups}
    if path is not None:
        remove_stale_temp_files(path)
    if path is None or not os.path.exists(path):
        record = SensitivityRecord(model=model_meta, criterion=criterion,
                                   metric={"name": metric_name, "baseline": None,
                                           "higher_is_better": higher_is_better})
    else:
        record = read_record(path)
        check_fingerprint(record, path, graph.fingerprint)
        if record.criterion != criterion:
            raise SensitivityFileError(f"{path} was measured with criterion {record.criterion!r}: "
                                       f"pass criterion={record.criterion!r} or a new file path")
        if bool(record.metric.get("higher_is_better", True)) != bool(higher_is_better):
            raise SensitivityFileError(f"{path} was measured with higher_is_better="
                                       f"{record.metric.get('higher_is_better')}: pass the same, "
                                       f"or a new file path")
        record.model = {**record.model, **model_meta, "arch": record.model.get("arch") or arch}
    if path is not None:
        shards = absorb_shards(record, path)
        if shards:
            write_record(record, path)
            for shard_file in shards:
                shard_file.unlink(missing_ok=True)
    return record


def _stopped_early(record: SensitivityRecord, group: str, ratio: float, cap: float | None) -> bool:
    """True when a smaller ratio of ``group`` already lost more than ``cap``."""
    if cap is None:
        return False
    return any(r < ratio and loss > cap for r, loss in record.sensitivities.get(group, {}).items())


def _check_weights(record: SensitivityRecord, model: nn.Module, path) -> None:
    weights = weights_sha256(model)
    stored = record.model.get("weights_sha256")
    if stored and stored != weights:
        if record.sensitivities:
            raise SensitivityFileError(
                f"{path} was measured on other weights of this model: finishing it would mix "
                f"two models; pass a new file path (or delete the old one)")
        record.metric["baseline"] = None  # only a baseline of the other weights: measure anew
    record.model["weights_sha256"] = weights


def _prepare_cache(model: nn.Module, eval_fn: EvalFn, graph: PruningGraph,
                   points: list[tuple[str, float]], baseline: float) -> PrefixCache | None:
    """Record the unpruned stage outputs, then check that replaying them changes nothing."""
    cache = PrefixCache(model)
    with cache.recording():
        recorded = _evaluate(model, eval_fn, "for the unpruned model")
    if not cache.enabled or recorded != baseline:  # no usable stages, or a non-deterministic eval
        return None
    first = max(cache.first_touched(graph.touched_modules(graph.group(n))) for n, _ in points)
    with cache.skipping_before(first) as skipped:
        replayed = _evaluate(model, eval_fn, "for the unpruned model")
    return cache if skipped and replayed == recorded else None


def _by_group(points: list[tuple[str, float]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name, ratio in points:
        out.setdefault(name, []).append(ratio)
    return out


class _Captured(Exception):
    pass


def _first_call(model: nn.Module, eval_fn: EvalFn) -> tuple[tuple, dict] | None:
    """The arguments of the first model call ``eval_fn`` makes (the evaluation is cut short)."""
    seen: dict[str, Any] = {}

    def hook(module, args, kwargs):
        seen["call"] = (args, kwargs)
        raise _Captured

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        _evaluate(model, eval_fn, "for the unpruned model")
    except _Captured:
        pass
    finally:
        handle.remove()
    return seen.get("call")


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def resolve_evaluation(model: nn.Module, evaluation: str) -> str:
    """``"masked"`` or ``"prune"``: what ``evaluation="auto"`` means for ``model``. Batching
    variants pays where the device has idle width (a GPU); on a CPU a batch of 8 variants costs
    what 8 passes cost, and a real prune computes fewer channels (benchmarks/README.md)."""
    if evaluation != "auto":
        return evaluation
    return "masked" if any(p.is_cuda for p in model.parameters()) else "prune"


class _PointRunner:
    """Evaluates the points of one group after another: real prune, or masked batched variants
    (checked against a real prune once per group, and on one point's metric once per run)."""

    def __init__(self, model: nn.Module, eval_fn: EvalFn, graph: PruningGraph, criterion: str,
                 cache: PrefixCache | None, evaluation: str, batch_variants: int, total: int,
                 progress: bool, label: str):
        self.model, self.eval_fn, self.graph, self.criterion = model, eval_fn, graph, criterion
        self.cache, self.k = cache, batch_variants
        evaluation = resolve_evaluation(model, evaluation)
        self.masking = evaluation == "masked"
        self.requested = evaluation
        self.checked = False               # one point's metric compared with a real prune
        self.call: tuple[tuple, dict] | None = None
        self.reference: Any = None
        self.counts = {"masked": 0, "pruned": 0}  # points evaluated each way
        self.unmaskable: list[str] = []            # groups whose masked outputs differed
        self.bar = tqdm(total=total, desc="sensitivity" + label, unit="pt",
                        disable=not progress or not total, dynamic_ncols=True)

    # -- one way or the other ----------------------------------------------------------------
    def _skipping(self, group: PrunableGroup):
        first = self.cache.first_touched(self.graph.touched_modules(group)) if self.cache else 0
        return self.cache.skipping_before(first) if self.cache else contextlib.nullcontext()

    def _real(self, group: PrunableGroup, ratio: float, idxs: list[int]) -> float:
        self.counts["pruned"] += 1
        with pruned_temporarily(self.graph, group, idxs), self._skipping(group):
            return _evaluate(self.model, self.eval_fn, f"for group {group.name} at ratio {ratio:.2f}")

    def _masked(self, group: PrunableGroup, chunk: list[tuple[float, list[int]]]) -> list[float]:
        masks = [mask_points(self.graph, group, idxs) for _, idxs in chunk]
        with BatchedVariants(self.model, masks) as variants, self._skipping(group):
            if self.cache:
                self.cache.repeat = len(chunk)
            try:
                metrics = []
                for k, (ratio, _) in enumerate(chunk):
                    variants.select(k)
                    metrics.append(_evaluate(self.model, self.eval_fn,
                                             f"for group {group.name} at ratio {ratio:.2f}"))
                self.counts["masked"] += len(chunk)
                return metrics
            finally:
                if self.cache:
                    self.cache.repeat = 1

    # -- per group ---------------------------------------------------------------------------
    def _maskable(self, group: PrunableGroup, idxs: list[int]) -> bool:
        if self.call is None:
            self.call = _first_call(self.model, self.eval_fn)
            if self.call is None:
                self.masking = False
                return False
            with _eval_mode(self.model):
                self.reference = self._forward()
        with _eval_mode(self.model):
            return masked_matches_pruned(self.model, self.graph, group, idxs, self._forward,
                                         self.reference, lambda: self._pruned_forward(group, idxs))

    def _forward(self) -> Any:
        args, kwargs = self.call
        return self.model(*args, **kwargs)

    def _pruned_forward(self, group: PrunableGroup, idxs: list[int]) -> Any:
        with pruned_temporarily(self.graph, group, idxs):
            return self._forward()

    def run(self, name: str, ratios: list[float], baseline: float, higher_is_better: bool,
            skip: Callable[[float], bool]) -> Iterator[tuple[float, float]]:
        """Yield ``(ratio, loss)`` for the ratios of group ``name`` not skipped (``skip(ratio)``
        is asked just before each point, so an early stop sees the points yielded so far)."""
        group = self.graph.group(name)
        self.bar.set_postfix_str(name)
        plans = [(r, self.graph.channels_to_remove(group, r, self.criterion)) for r in ratios]
        work = [p for p in plans if p[1]]
        masked = self.masking and len(work) > 1 and \
            self._maskable(group, work[len(work) // 2][1])
        if self.masking and len(work) > 1 and not masked:
            self.unmaskable.append(name)
        results: dict[float, float] = {}
        while True:
            todo = [(r, idxs) for r, idxs in plans if r not in results]
            if not todo:
                break
            ratio, idxs = todo[0]
            if skip(ratio):
                results[ratio] = math.nan
                self.bar.update()
                continue
            if not idxs:  # too few channels to remove any at this ratio
                metrics = {ratio: baseline}
            elif masked and self.masking:
                chunk = [p for p in todo if p[1]][:self.k]
                metrics = self._masked_or_none(group, chunk)
                if metrics is None:
                    continue  # masking was switched off: evaluate for real
            else:
                metrics = {ratio: self._real(group, ratio, idxs)}
            for r in sorted(metrics):
                if r != ratio and skip(r):
                    break  # an early stop discards the rest of a batched chunk
                results[r] = relative_loss(baseline, metrics[r], higher_is_better)
                self.bar.update()
                yield r, results[r]

    def _masked_or_none(self, group: PrunableGroup, chunk: list[tuple[float, list[int]]]
                        ) -> dict[float, float] | None:
        """Metrics of ``chunk`` from one batched pass; the first time also a real prune of one
        point must give the same metric. None (and masking off for good) if anything differs."""
        try:
            metrics = dict(zip((r for r, _ in chunk), self._masked(group, chunk)))
        except NotBatchable:
            self.masking = False
            return None
        if not self.checked:
            ratio, idxs = chunk[len(chunk) // 2]
            real = self._real(group, ratio, idxs)
            if abs(real - metrics[ratio]) > 1e-4 * abs(real or 1.0):
                self.masking = False
                return None
            self.checked = True
            metrics[ratio] = real
        return metrics

    def close(self) -> None:
        self.bar.close()

    def summary(self) -> dict[str, Any]:
        """How the points were evaluated (recorded in the file's ``extra``)."""
        return {"mode": self.requested, "batch_variants": self.k, "points": dict(self.counts),
                "unmaskable_groups": self.unmaskable}


def sensitivity(model: nn.Module, example_inputs: Any, eval_fn: EvalFn, *,
                groups: Iterable[str] | None = None, ratios: Iterable[float] = DEFAULT_RATIOS,
                sensitivities_file: str | os.PathLike | None = None, criterion: str = "l1_norm",
                ignored_layers: Iterable[Any] = (), higher_is_better: bool = True,
                metric_name: str = "metric", arch: str | None = None,
                early_stop: float | None = None, extra: Mapping[str, Any] | None = None,
                prefix_cache: bool = True, evaluation: str = "auto",
                batch_variants: int = 8, progress: bool = True) -> Sensitivities:
    """Measure ``{group: {ratio: loss}}`` for each prunable group and ratio.

    For each point the group alone loses ``ratio`` of its channels (chosen by ``criterion``),
    ``eval_fn(model)`` is called (model in eval mode, under ``torch.no_grad``) and
    ``loss = (baseline - metric) / |baseline|`` is recorded (sign flipped if not
    ``higher_is_better``). The model comes back bit-identical.

    With ``sensitivities_file`` the points already in the file are reused and every new point is
    written atomically as soon as it is measured: an interrupted run resumes where it stopped.
    ``early_stop`` (off by default) skips a group's larger ratios once its loss passes that cap;
    it and ``extra`` (e.g. how the evaluation data was subset) are recorded in the file.
    ``prefix_cache`` (on by default) replays the unchanged first part of the network from one
    recorded pass instead of recomputing it (see :mod:`autoprune.prefix_cache`); it is checked
    once against a normal evaluation and switches itself off if the two differ.
    ``evaluation`` chooses how a point is evaluated: ``"prune"`` removes the channels for real;
    ``"masked"`` zeroes them with hooks and evaluates up to ``batch_variants`` ratios of a group in
    one forward pass (see :mod:`autoprune.masking`), after checking once per group that masking
    gives the outputs of a real prune (else that group is pruned for real) and once per run that
    both give the same metric; ``"auto"`` (default) does the same checks, times both ways on the
    first group and keeps the faster one. Every recorded number is a real-prune number up to
    float noise; ``extra["evaluation"]`` in the file says what was used.
    Under ``torch.distributed`` (torchrun) the points are shared out over the ranks; each rank
    keeps its points in a shard file and rank 0 merges them into ``sensitivities_file``; every
    rank returns the full result. Returns the requested groups and the ratios measured.
    """
    ratios = check_ratios(ratios)
    check_criterion(criterion)
    if evaluation not in EVALUATIONS:
        raise ConfigError(f"evaluation={evaluation!r} is not one of {', '.join(EVALUATIONS)}")
    if not isinstance(batch_variants, int) or batch_variants < 1:
        raise ConfigError(f"batch_variants={batch_variants!r} must be a positive integer such as 8")
    if early_stop is not None and (not isinstance(early_stop, (int, float))
                                   or not math.isfinite(early_stop) or early_stop <= 0):
        raise ConfigError(f"early_stop={early_stop!r} must be a positive loss such as 0.5")
    rank, world = rank_and_world()
    graph = PruningGraph(model, example_inputs, ignored_layers)
    names = [g.name for g in graph.groups] if groups is None else list(groups)
    graph.check_names(names)
    path = sensitivities_file

    record = None
    if rank == 0:
        record = _open_record(path, graph, arch=arch or type(model).__name__,
                              criterion=criterion, higher_is_better=higher_is_better,
                              metric_name=metric_name)
        record.extra.update({**dict(extra or {}), "early_stop": early_stop})
        pending = [(n, r) for n in names for r in ratios if not record.has_point(n, r)]
        if pending or record.metric.get("baseline") is None:
            _check_weights(record, model, path)
        if record.metric.get("baseline") is None:
            baseline = _evaluate(model, eval_fn, "for the unpruned model")
            if baseline == 0:
                raise MetricError("the unpruned model scores 0: a relative loss needs a non-zero "
                                  "baseline; evaluate a trained model or use another metric")
            record.metric["baseline"] = baseline
        if path is not None:
            write_record(record, path)
    record = record_from_json(broadcast(record.to_json() if record else None))
    baseline = float(record.metric["baseline"])

    missing = [(n, r) for n in names for r in ratios if not record.has_point(n, r)]
    # with early stop a group's ratios must be measured in order, by one rank; batched variants
    # need a group's ratios together too
    whole_groups = early_stop is not None or resolve_evaluation(model, evaluation) == "masked"
    mine = [p for p in missing if p[0] in set(shard(names, rank, world))] if whole_groups else \
        shard(missing, rank, world)
    own = SensitivityRecord(model=record.model, metric=record.metric, criterion=criterion,
                            extra=record.extra)
    target = path if rank == 0 else (shard_path(path, rank) if path is not None else None)

    flush_denormals()  # pruned variants of trained weights are full of them on CPU
    cache = _prepare_cache(model, eval_fn, graph, mine, baseline) if prefix_cache and \
        len(mine) >= 4 else None
    runner = _PointRunner(model, eval_fn, graph, criterion, cache, evaluation, batch_variants,
                          len(mine), progress, f" [rank {rank}/{world}]" if world > 1 else "")
    for name, ratios_left in _by_group(mine).items():
        for ratio, loss in runner.run(name, ratios_left, baseline, higher_is_better,
                                      skip=lambda r: _stopped_early(record, name, r, early_stop)):
            for rec in (record, own):
                rec.set_point(name, ratio, loss)
            if target is not None:
                write_record(record if rank == 0 else own, target)
    runner.close()
    if mine:
        record.extra["evaluation"] = own.extra["evaluation"] = runner.summary()
        if target is not None:
            write_record(record if rank == 0 else own, target)

    if world > 1:
        for points in gather(own.sensitivities):
            for name, pts in points.items():
                for ratio, loss in pts.items():
                    record.set_point(name, ratio, loss)
        if rank == 0 and path is not None:
            write_record(record, path)
            for r in range(1, world):
                shard_path(path, r).unlink(missing_ok=True)
        barrier()
    return {n: {r: record.sensitivities[n][r] for r in ratios if r in record.sensitivities.get(n, {})}
            for n in names}
