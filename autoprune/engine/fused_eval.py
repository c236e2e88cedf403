"""A sensitivity point evaluated faster on the CPU: each BatchNorm folded into the convolution
before it, and every convolution's weight in channels-last layout, for the length of the point's
evaluation only (the model is given back with its own Parameter objects).

On one AVX-512 core (benchmarks/README.md "Analysis cost") a forward pass of resnet50 at 224 px
takes 1.2x less time with BatchNorm folded, 1.4x with channels-last weights and 1.76x with both
(pruned variants alike); resnet18 at 128 px 1.42x, at 32 px 1.11x. Only a BatchNorm whose sole
input is a plain ``nn.Conv2d`` used by nothing else is folded (torch-pruning's dependency graph
tells), in eval mode with running statistics; timm's ``BatchNormAct2d`` keeps its activation.
The folded weights of layers a point leaves unchanged are computed once and reused. Folding
reorders float rounding (about 1e-7 relative), so it is used only for inputs of at least 160 px
a side (:func:`pays_at`: where it pays; a rule, not a timing, so ranks and resumed runs agree)
and where the whole evaluation of the unpruned model gives the plain metric within 1e-4 relative
(:meth:`FusedEval.check`, one extra evaluation; an incremental one compares its first 128
per-image scores, :meth:`FusedEval.check_scores`); it is left off on any larger difference or
any error.

An evaluation that folds the BatchNorms itself, on a copy of the model it runs (Ultralytics'
validator; ``eval_fn.folds_batchnorm``), would fold them a second time: for it nothing is
folded; while the block is in force, :func:`follow` lays out the convolution weights of that
copy channels-last (YOLOv8n at 320 px: 1.3x faster forward on one AVX-512 core), checked as
above.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.nn as nn

from .in_force import helper_for, in_force
from .incremental import close_steps, step_scores

CHECK_RTOL = 1e-4  # the masked evaluation's tolerance too
# the smallest input side where it is used: measured 1.42x at 128 px and 1.76x at 224 px, about
# 1.05x at 64 px (resnet18), and slower there with the prefix cache replaying the small maps
MIN_SIDE = 160
CHECK_IMAGES = 128  # per-image scores an incremental evaluation's check compares (a batch)


def _bn_act(module: nn.Module) -> bool:
    """timm's BatchNormAct2d: a BatchNorm2d followed by its own dropout and activation."""
    return type(module).__name__ == "BatchNormAct2d" and isinstance(module, nn.BatchNorm2d) \
        and hasattr(module, "drop") and hasattr(module, "act")


def _foldable_bn(module: nn.Module) -> bool:
    return (type(module) is nn.BatchNorm2d or _bn_act(module)) and \
        module.running_mean is not None and module.running_var is not None


def conv_bn_pairs(dg: Any) -> list[tuple[nn.Conv2d, nn.BatchNorm2d]]:
    """``(conv, bn)`` pairs of torch-pruning's dependency graph ``dg`` where ``bn``'s only input
    is ``conv`` and ``conv``'s output goes to ``bn`` alone."""
    pairs = []
    for module, node in dg.module2node.items():
        if not isinstance(module, nn.Module) or not _foldable_bn(module) or len(node.inputs) != 1:
            continue
        source = node.inputs[0]
        if type(source.module) is nn.Conv2d and len(source.outputs) == 1 \
                and source.outputs[0] is node:
            pairs.append((source.module, module))
    return pairs


def _folded(conv: nn.Conv2d, bn: nn.BatchNorm2d | None, channels_last: bool
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = conv.weight.detach()
    bias = conv.bias.detach() if conv.bias is not None else None
    if bn is not None:
        scale = torch.rsqrt(bn.running_var + bn.eps)
        if bn.weight is not None:
            scale = scale * bn.weight.detach()
        shift = -bn.running_mean * scale
        if bias is not None:
            shift = shift + bias * scale
        if bn.bias is not None:
            shift = shift + bn.bias.detach()
        weight = weight * scale.reshape(-1, 1, 1, 1)
        bias = shift
    return (weight.contiguous(memory_format=torch.channels_last) if channels_last else weight), bias


def _sources(conv: nn.Conv2d, bn: nn.BatchNorm2d | None) -> list[torch.Tensor | None]:
    tensors = [conv.weight, conv.bias]
    if bn is not None:
        tensors += [bn.weight, bn.bias, bn.running_mean, bn.running_var]
    return tensors


def pays_at(inputs: Any) -> bool:
    """Whether the folded evaluation is used for a model called with ``inputs`` (its first
    4-D tensor): images of at least :data:`MIN_SIDE` pixels a side. Decided by the input, not
    by timing, so that ranks and resumed runs decide alike (their numbers merge)."""
    for x in inputs if isinstance(inputs, (tuple, list)) else (inputs,):
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            return min(x.shape[-2:]) >= MIN_SIDE
    return False


class FusedEval:
    """Folds ``conv_bn_pairs`` for a block, convolution weights laid out channels-last where
    ``channels_last``."""

    def __init__(self, model: nn.Module, dg: Any, fold: bool = True):
        self.model, self.fold = model, fold  # fold: False when the evaluation folds itself
        pairs = conv_bn_pairs(dg) if fold else []
        self.bn_of = {conv: bn for conv, bn in pairs}
        self.convs = _convs(model)
        self.enabled = bool(self.convs)
        self.checked = False
        self.channels_last = True
        # conv -> (the tensors it was folded from, version of each and the layout, folded weight,
        # folded bias)
        self._memo: dict[nn.Module, tuple[list, list, torch.Tensor, torch.Tensor | None]] = {}

    def _weights(self, conv: nn.Conv2d, bn: nn.BatchNorm2d | None, keep: bool
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        sources = _sources(conv, bn)
        versions = [t._version if t is not None else None for t in sources] + \
            [self.channels_last]
        memo = self._memo.get(conv)
        if memo is not None and len(memo[0]) == len(sources) and versions == memo[1] and \
                all(a is b for a, b in zip(memo[0], sources)):
            return memo[2], memo[3]
        weight, bias = _folded(conv, bn, self.channels_last)
        if keep:  # holding the sources keeps their identity unique while memoised
            self._memo[conv] = (sources, versions, weight, bias)
        return weight, bias

    @contextlib.contextmanager
    def applied(self, changed: Iterable[nn.Module] = (), skipped: Iterable[nn.Module] = ()
                ) -> Iterator[None]:
        """Folded, channels-last weights for the block. ``changed``: the layers a prune has just
        replaced (computed afresh, not memoised); ``skipped``: layers that will not run (the
        prefix cache replays their stage), left as they are."""
        if not self.enabled:
            yield
            return
        if not self.fold:  # the evaluation's own copy is laid out (follow)
            with in_force("layout", self.model, self):
                yield
            return
        changed, skipped = set(changed), set(skipped)
        convs, bns = [], []
        with torch.no_grad():
            for conv in self.convs:
                if conv in skipped:
                    continue
                bn = self.bn_of.get(conv)
                if bn is not None and bn in skipped:  # its BatchNorm's output is replayed
                    bn = None
                weight, bias = self._weights(conv, bn, keep=conv not in changed and
                                             (bn is None or bn not in changed))
                convs.append((conv, conv._parameters["weight"], conv._parameters.get("bias")))
                conv._parameters["weight"] = weight
                conv._parameters["bias"] = bias
                if bn is not None:
                    bns.append((bn, bn.__dict__.get("forward")))
                    bn.forward = _after_folding(bn)
        try:
            yield
        finally:
            for conv, weight, bias in convs:
                conv._parameters["weight"] = weight
                conv._parameters["bias"] = bias
            for bn, own in bns:
                if own is None:
                    del bn.forward
                else:
                    bn.forward = own

    def check_scores(self, steps: Callable[[], Iterator[Any]], base: torch.Tensor,
                     images: int = CHECK_IMAGES) -> bool:
        """Once, for an incremental evaluation: do its first ``images`` per-image scores, folded
        (``steps()``: the unpruned model's steps), equal ``base``'s (the plain ones) within
        :data:`CHECK_RTOL`? Cheaper than a whole evaluation; off for good if not."""
        def same() -> bool:
            got: list[torch.Tensor] = []
            run = steps()
            try:
                for step in run:
                    got.append(step_scores(step))
                    if sum(map(len, got)) >= images:
                        break
            finally:
                close_steps(run)
            scores = torch.cat(got) if got else torch.zeros(0)
            ref = base[:len(scores)].double()
            return 0 < len(scores) <= len(base) and bool(
                torch.all((scores - ref).abs() <= CHECK_RTOL * ref.abs().clamp(min=1.0)))
        return self._check(same)

    def check(self, evaluate: Callable[[], float], baseline: float) -> bool:
        """Once: does ``evaluate()`` (the whole evaluation of the unpruned model, folded) give
        ``baseline`` (the plain one's metric) within :data:`CHECK_RTOL`? Off for good if not:
        a metric can magnify float rounding (one that divides by a spread near zero), and only
        the metric tells."""
        return self._check(lambda: abs(evaluate() - baseline) <= CHECK_RTOL * abs(baseline or 1.0))

    def _check(self, same: Callable[[], bool]) -> bool:
        """Once: ``same()`` run folded decides whether the folded evaluation stays on (an error
        turns it off: it only means evaluating the plain way)."""
        if self.checked or not self.enabled:
            return self.enabled
        self.checked = True
        try:
            with self.applied():
                self.enabled = bool(same())
        except Exception:  # noqa: BLE001 - any failure only means: evaluate the plain way
            self.enabled = False
        if not self.enabled:
            self._memo.clear()
        return self.enabled


def follow(model: nn.Module, copy: nn.Module) -> None:
    """While a :class:`FusedEval` of ``model`` that does not fold is in force: lay out the
    convolution weights of ``copy`` (the folded copy of ``model`` an evaluation runs)
    channels-last. Otherwise nothing."""
    fused = helper_for("layout", model)
    if fused is None or not fused.channels_last or copy is model:
        return
    with torch.no_grad():
        for conv in _convs(copy):
            conv.weight.data = conv.weight.data.contiguous(memory_format=torch.channels_last)


def _convs(model: nn.Module) -> list[nn.Conv2d]:
    """The plain 2-D convolutions of ``model`` with a weight (those the block lays out)."""
    return [m for m in model.modules()
            if type(m) is nn.Conv2d and m.weight is not None and m.weight.dim() == 4]


def _after_folding(bn: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """What ``bn`` computes once folded: nothing, or (BatchNormAct2d) its dropout and act."""
    if _bn_act(bn):
        return lambda x: bn.act(bn.drop(x))
    return lambda x: x
