"""How one sensitivity point is evaluated: a real prune undone exactly, or masked variants.

:func:`pruned_temporarily` removes a group's channels for the length of a block and restores the
model (and torch-pruning's graph) exactly. :class:`PointRunner` evaluates the points of one group
after another, either that way or as masked, batched variants (:mod:`autoprune.masking`) where a
check against a real prune allows it.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import time
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from .progress import progress_bar

from ..errors import MetricError
from .fused_eval import FusedEval, pays_at
from .groups import PrunableGroup, PruningGraph
from .masking import BatchedVariants, NotBatchable, mask_points, masked_matches_pruned
from .prefix_cache import PrefixCache
from .removal import pruned_temporarily

EvalFn = Callable[[nn.Module], Any]
EVALUATIONS = ("auto", "masked", "prune")
# the loss recorded for a pruned point whose metric is NaN or infinite (higher / lower is better):
# a metric that fell to nothing, or a stand-in for an infinite loss; never within a tolerance
NON_FINITE_LOSS = {True: 1.0, False: 1e6}


def as_metric(value: Any, where: str, finite: bool = True) -> float:
    """Turn what an eval_fn returned into a float, finite unless ``finite=False``, or raise a
    MetricError."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise MetricError(f"eval_fn returned {type(value).__name__} {where}: it must return one "
                          f"number (e.g. top-1 accuracy as a float)")
    value = float(value)
    if finite and not math.isfinite(value):
        raise MetricError(f"eval_fn returned {value} {where}: check the evaluation data and the "
                          f"model (empty loader? diverged weights?)")
    return value


def relative_loss(baseline: float, metric: float, higher_is_better: bool = True) -> float:
    """``(baseline - metric) / |baseline|``; the sign is flipped when lower is better."""
    drop = baseline - metric if higher_is_better else metric - baseline
    return drop / abs(baseline)


def _evaluate(model: nn.Module, eval_fn: EvalFn, where: str, finite: bool = True) -> float:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return as_metric(eval_fn(model), where, finite)
    finally:
        model.train(was_training)


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
def eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode under no_grad for the block (its mode restored after)."""
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


class PointRunner:
    """Evaluates the points of one group after another: real prune, or masked batched variants
    (checked against a real prune once per group, and on one point's metric once per run)."""

    def __init__(self, model: nn.Module, eval_fn: EvalFn, graph: PruningGraph, criterion: str,
                 cache: PrefixCache | None, evaluation: str, batch_variants: int, total: int,
                 progress: bool, label: str, fused: bool = True,
                 baseline: float | None = None):
        self.model, self.eval_fn, self.graph, self.criterion = model, eval_fn, graph, criterion
        self.cache, self.k = cache, batch_variants
        # BatchNorm folded, channels-last weights: a real prune on the CPU (fused_eval.py)
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        folds = bool(getattr(eval_fn, "folds_batchnorm", False))  # on its own copy
        self.fused = FusedEval(model, graph.dg, fold=not folds) if fused and on_cpu else None
        self.baseline = baseline  # the unpruned model's metric: what the folded one must give
        self.base_scores: torch.Tensor | None = None  # its per-image scores (set where known)
        evaluation = resolve_evaluation(model, evaluation)
        self.masking = evaluation == "masked"
        self.requested = evaluation
        self.checked = False               # one point's metric compared with a real prune
        self.call: tuple[tuple, dict] | None = None
        self.reference: Any = None  # the unpruned outputs of that call (masked checks)
        self.referenced = False
        self.counts = {"masked": 0, "pruned": 0, "reused": 0}  # points evaluated each way;
        # reused: a ratio removing the same channels as a smaller one
        self.unmaskable: list[str] = []            # groups whose masked outputs differed
        self.non_finite: list[str] = []            # "group@ratio" whose metric was NaN or inf
        self.bar = progress_bar(total=total, desc="sensitivity" + label, unit="pt",
                                enabled=bool(progress and total))

    # -- one way or the other ----------------------------------------------------------------
    @property
    def fused_on(self) -> bool:
        """The folded evaluation is checked and on."""
        return self.fused is not None and self.fused.checked and self.fused.enabled

    def prepare_fused(self) -> bool:
        """The folded evaluation is on: for inputs large enough (``fused_eval.pays_at``, told
        from the first batch), checked once on the unpruned model's metric (or, where its
        per-image scores are known, on the first of them)."""
        if self.fused is None or not self.fused.enabled:
            return False
        if not self.fused.checked:
            if self.call is None:
                self.call = _first_call(self.model, self.eval_fn)
            if self.call is None or self.baseline is None or not pays_at(self.call[0]):
                self.fused.enabled = False
                return False
            with eval_mode(self.model):
                incremental = getattr(self.eval_fn, "incremental", None)
                if self.base_scores is not None and incremental is not None:
                    self.fused.check_scores(lambda: incremental(self.model, start=0),
                                            self.base_scores)
                else:
                    self.fused.check(lambda: _evaluate(
                        self.model, self.eval_fn, "for the unpruned model, BatchNorm folded"),
                        self.baseline)
        return self.fused.enabled

    def folded(self) -> contextlib.AbstractContextManager:
        """The unpruned model folded for the block, where the folded evaluation is on (the cost
        estimate times it so)."""
        return self.fused.applied() if self.fused_on else contextlib.nullcontext()

    @contextlib.contextmanager
    def _faster(self, group: PrunableGroup, fused: bool) -> Iterator[None]:
        """For a real prune of ``group``: the folded evaluation (``fused``), then the prefix
        cache's replay (entered in this order: a replayed stage's layers are left unfolded)."""
        touched = self.graph.touched_modules(group)
        first = self.cache.first_touched(touched) if self.cache else 0
        skipped = self.cache.skipped_modules(first) if self.cache else set()
        with (self.fused.applied(touched, skipped) if fused and self.fused
              else contextlib.nullcontext()), \
                (self.cache.skipping_before(first) if self.cache else contextlib.nullcontext()):
            if self.cache and fused:  # replayed outputs in the weights' layout: no mixed formats
                self.cache.memory_format = torch.channels_last
            try:
                yield
            finally:
                if self.cache:
                    self.cache.memory_format = torch.preserve_format

    def _real(self, group: PrunableGroup, ratio: float, idxs: list[int]) -> float:
        self.counts["pruned"] += 1
        fused = self.prepare_fused()

        def evaluate(folded: bool) -> float:
            with pruned_temporarily(self.graph, group, idxs), self._faster(group, folded):
                return _evaluate(self.model, self.eval_fn,
                                 f"for group {group.name} at ratio {ratio:.2f}", finite=False)
        try:
            return evaluate(fused)
        except Exception:
            if not fused:
                raise
            # a pruned variant the folded layout cannot run: plain from here on, this point too
            self.fused.enabled = False
            return evaluate(False)

    def _masked(self, group: PrunableGroup, chunk: list[tuple[float, list[int]]]) -> list[float]:
        masks = [mask_points(self.graph, group, idxs) for _, idxs in chunk]
        with BatchedVariants(self.model, masks) as variants, self._faster(group, False):
            if self.cache:
                self.cache.repeat = len(chunk)
            try:
                metrics = []
                for k, (ratio, _) in enumerate(chunk):
                    variants.select(k)
                    metrics.append(_evaluate(self.model, self.eval_fn,
                                             f"for group {group.name} at ratio {ratio:.2f}",
                                             finite=False))
                return metrics
            finally:
                if self.cache:
                    self.cache.repeat = 1

    def setup_seconds(self, name: str, ratio: float) -> float:
        """Seconds a point of ``name`` at ``ratio`` takes around its evaluation, timed without
        evaluating: its channels chosen, the group pruned and restored, the folded layout and
        the prefix cache's replay set up and undone (the cost estimate's per-point overhead)."""
        start = time.perf_counter()
        group = self.graph.group(name)
        idxs = self.graph.channels_to_remove(group, ratio, self.criterion)
        if idxs:
            with pruned_temporarily(self.graph, group, idxs), \
                    self._faster(group, self.fused_on):
                pass
        return time.perf_counter() - start

    @contextlib.contextmanager
    def pruned(self, name: str, ratio: float) -> Iterator[bool]:
        """Group ``name`` pruned at ``ratio`` for real (and its unchanged prefix replayed), the
        model in eval mode under no_grad, for the length of the block; yields False (nothing
        pruned) when the ratio removes no channel. For an evaluation the caller drives itself
        (the adaptive analysis)."""
        group = self.graph.group(name)
        idxs = self.graph.channels_to_remove(group, ratio, self.criterion)
        if not idxs:
            yield False
            return
        self.counts["pruned"] += 1
        fused = self.prepare_fused()
        with pruned_temporarily(self.graph, group, idxs), self._faster(group, fused), \
                eval_mode(self.model):
            yield True

    # -- per group ---------------------------------------------------------------------------
    def _maskable(self, group: PrunableGroup, idxs: list[int]) -> bool:
        if self.call is None:
            self.call = _first_call(self.model, self.eval_fn)
        if self.call is None:
            self.masking = False
            return False
        if not self.referenced:
            with eval_mode(self.model):
                self.reference = self._forward()
            self.referenced = True
        with eval_mode(self.model):
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
        # a ratio that removes the same channels as a smaller one is the same model: reuse it
        first: dict[tuple[int, ...], float] = {}
        same_as: dict[float, float] = {}
        for r, idxs in plans:
            key = tuple(sorted(idxs))
            if idxs and key in first:
                same_as[r] = first[key]
            first.setdefault(key, r)
        work = [p for p in plans if p[1] and p[0] not in same_as]
        masked = self.masking and len(work) > 1 and \
            self._maskable(group, work[len(work) // 2][1])
        if self.masking and len(work) > 1 and not masked:
            self.unmaskable.append(name)
        results: dict[float, float] = {}
        raw: dict[float, float] = {}  # the metric of each ratio evaluated
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
            elif ratio in same_as and same_as[ratio] in raw:
                metrics = {ratio: raw[same_as[ratio]]}
                self.counts["reused"] += 1
            elif masked and self.masking and ratio not in same_as:
                chunk = [p for p in todo if p[1] and p[0] not in same_as][:self.k]
                metrics = self._masked_or_none(group, chunk)
                if metrics is None:
                    continue  # masking was switched off: evaluate for real
            else:
                metrics = {ratio: self._real(group, ratio, idxs)}
            for r in sorted(metrics):
                if r != ratio and skip(r):
                    break  # an early stop discards the rest of a batched chunk
                raw[r] = metrics[r]
                results[r] = self._loss(name, r, baseline, metrics[r], higher_is_better)
                self.bar.update()
                yield r, results[r]

    def _loss(self, name: str, ratio: float, baseline: float, metric: float,
              higher_is_better: bool) -> float:
        """The relative loss; for a NaN or infinite metric the worst loss (NON_FINITE_LOSS),
        noted in ``non_finite`` with a warning, so the analysis can still finish."""
        if math.isfinite(metric):
            return relative_loss(baseline, metric, higher_is_better)
        loss = NON_FINITE_LOSS[bool(higher_is_better)]
        self.non_finite.append(f"{name}@{ratio:.2f}")
        tqdm.write(f"[autoprune] warning: eval_fn returned {metric} for group {name} at ratio "
                   f"{ratio:.2f}: recorded as loss {loss:g}, so this point is never chosen "
                   f"within a tolerance")
        return loss

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
            if not abs(real - metrics[ratio]) <= 1e-4 * abs(real or 1.0):  # NaN: differs
                self.masking = False
                return None
            self.checked = True
            metrics[ratio] = real
        self.counts["masked"] += len(chunk)  # counted once kept: a chunk the check threw away
        return metrics                       # was evaluated for real, and is counted there

    def close(self) -> None:
        self.bar.close()

    def summary(self) -> dict[str, Any]:
        """How the points were evaluated (recorded in the file's ``extra``)."""
        return {"mode": self.requested, "batch_variants": self.k, "points": dict(self.counts),
                "unmaskable_groups": self.unmaskable,
                "fused_eval": bool(self.fused_on)}
