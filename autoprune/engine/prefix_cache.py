"""Skip the part of the forward pass that pruning a group cannot change.

Pruning a group changes nothing that runs before the group's first touched layer. During one
recording pass over the evaluation data (unpruned model) the outputs of the model's *stages*
(top-level children, with ``nn.Sequential`` containers expanded) are kept per batch; while a
group is evaluated, every stage that finishes before the group's first touched layer returns its
recorded output instead of computing it. Batches are recognised by their content (exact
comparison), so any ``eval_fn`` works; unknown inputs are computed normally. The result is
checked once against a normal evaluation and the cache switches itself off on any difference.

An evaluation that runs a copy of the model instead (Ultralytics' validator runs a fused copy)
calls :func:`follow` on the copy: the cache then records or replays on the copy, its modules
matched by name (a BatchNorm folded into its convolution counts from that convolution).

On the CPU its memory budget is a third of the memory available when it starts (shared by the
ranks torchrun started on the machine; at least 1 GiB), on a GPU 1 GiB; a recording that
outgrows it drops what it holds at once and the cache stays off, so the recording pass never
holds more than the budget (resnet50's stage outputs at 224 px are about 16 MB an image: 2,000
images, 32 GB).
"""
from __future__ import annotations

import contextlib
import os
import time
import types
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from .in_force import helper_for, in_force
from .memory import available_bytes


def _stages(model: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    out = []
    for name, child in model.named_children():
        full = f"{prefix}{name}"
        if isinstance(child, nn.Sequential) and len(child):
            out += _stages(child, full + ".")
        else:
            out.append((full, child))
    return out


class OverBudget(Exception):
    """A recording stopped because what it would hold outgrew the cache's memory budget."""


MIN_BUDGET = 1 << 30
BUDGET_SHARE = 1 / 3  # of MemAvailable


def memory_budget(device: torch.device | None = None) -> int:
    """Bytes the cache may hold on ``device`` (where the model's outputs are kept): on the CPU
    :data:`BUDGET_SHARE` of the memory available now (Linux' ``MemAvailable``, shared by the
    ranks torchrun started on this machine, ``LOCAL_WORLD_SIZE``), at least :data:`MIN_BUDGET`;
    on a GPU :data:`MIN_BUDGET` (the masked evaluation's batched variants need that memory; as
    measured on an H100), and where the memory cannot be read."""
    if device is not None and device.type != "cpu":
        return MIN_BUDGET
    available = available_bytes()
    if available is None:
        return MIN_BUDGET
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(MIN_BUDGET, int(available * BUDGET_SHARE / local))


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def _first_tensor(args: tuple) -> torch.Tensor | None:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    return None


Undo = Callable[[], None]


def follow(model: nn.Module, copy: nn.Module) -> None:
    """Make the prefix cache that is recording or replaying for ``model`` (if any) do the same on
    ``copy``, the copy of ``model`` (fused or not) that an evaluation runs instead. Call it once
    the copy is in the form it will run in (after fusing). The hooks and replays that copying
    carried over from ``model`` are taken off ``copy`` first; the cache's own come off it
    again when the cache's block ends."""
    cache = helper_for("prefix cache", model)
    if cache is not None and copy is not model:
        cache._follow(copy)


class PrefixCache:
    """Recorded stage outputs of the unpruned model, replayed while a pruned group is evaluated."""

    def __init__(self, model: nn.Module, max_bytes: int | None = None):
        self.model = model
        device = next((p.device for p in model.parameters()), None)
        self.max_bytes = memory_budget(device) if max_bytes is None else max_bytes
        self.stages = _stages(model)
        self.names = {m: n for n, m in model.named_modules()}
        self.inputs: list[torch.Tensor] = []          # model input of each recorded batch
        self.outputs: dict[str, list[torch.Tensor]] = {}
        self.span: dict[str, tuple[int, int]] = {}    # stage -> (first, last) leaf call index
        self.leaf_index: dict[str, int] = {}          # leaf module name -> its first call index
        self.enabled = False
        # while recording or replaying: how to do it on a module tree, what it put on the model
        # (hook ids, replacement forwards: a copy of the model carries them) and the undoers
        self._attach: Callable[[nn.Module], list[Undo]] | None = None
        self._hook_ids: set[int] = set()
        # id(replacement forward) -> (it, the stage's own forward): held, so the id stays its
        self._replays: dict[int, tuple[Callable, Any]] = {}
        self._undo: list[Undo] = []
        self.repeat = 1  # replayed outputs are repeated this many times along the batch (variants)
        # the layout replayed 4-D outputs are given (channels-last while fused_eval's weights are)
        self.memory_format = torch.preserve_format
        self.recording_seconds = 0.0  # of the recording pass, spent copying what it holds
        self._batch: int | None = None

    # -- recording ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def recording(self, stop_over_budget: bool = False) -> Iterator[None]:
        """Run the unpruned evaluation inside this block to fill the cache. With
        ``stop_over_budget`` a recording that outgrows the budget raises :class:`OverBudget`
        at once (an evaluation made only to record need not finish)."""
        used, counter = [0], [0]
        over = [False]  # the budget was exceeded: nothing more is held

        def hold(t: torch.Tensor) -> torch.Tensor | None:
            used[0] += t.numel() * t.element_size()
            if used[0] > self.max_bytes and not over[0]:
                over[0] = True
                self.outputs.clear()
                self.inputs.clear()
                if stop_over_budget:
                    raise OverBudget(f"the stage outputs outgrew {self.max_bytes} bytes")
            if over[0]:
                return None
            start = time.perf_counter()
            kept = _copy(t)
            self.recording_seconds += time.perf_counter() - start
            return kept

        calls: dict[str, int] = {}

        def on_leaf(name):
            def hook(module, args):
                if len(self.inputs) <= 1:
                    self.leaf_index.setdefault(name, counter[0])
                counter[0] += 1
            return hook

        def on_model(module, args):
            x = _first_tensor(args)
            if x is not None:
                kept = hold(x)
                if kept is not None:
                    self.inputs.append(kept)
                counter[0] = 0

        def on_stage(name):
            def hook(module, args, output):
                calls[name] = calls.get(name, 0) + 1
                if isinstance(output, torch.Tensor):
                    kept = hold(output)
                    if kept is not None:
                        self.outputs.setdefault(name, []).append(kept)
            return hook

        def attach(root: nn.Module) -> list[Undo]:
            modules = dict(root.named_modules())
            handles = [root.register_forward_pre_hook(on_model)]
            handles += [m.register_forward_pre_hook(on_leaf(n)) for n, m in modules.items()
                        if next(m.children(), None) is None]
            handles += [modules[n].register_forward_hook(on_stage(n)) for n, _ in self.stages
                        if n in modules]
            self._hook_ids.update(h.id for h in handles)
            return [h.remove for h in handles]

        with self._attached(attach):
            yield
        batches = 0 if over[0] else len(self.inputs)
        # keep stages called once per batch, with a tensor output, inside the memory budget
        self.outputs = {n: o for n, o in self.outputs.items()
                        if len(o) == batches and calls.get(n) == batches}
        for name, _ in self.stages:
            idx = [i for leaf, i in self.leaf_index.items() if _under(leaf, name)]
            if idx and name in self.outputs:
                self.span[name] = (min(idx), max(idx))
        self.enabled = batches > 0 and used[0] <= self.max_bytes and bool(self.span)
        if not self.enabled:
            self.outputs, self.inputs = {}, []

    # -- replay ------------------------------------------------------------------------------
    def first_touched(self, modules: list[nn.Module]) -> int:
        """Leaf call index of the earliest of ``modules`` (0 when unknown: nothing skipped)."""
        idx = [self._call_index(self.names.get(m)) for m in modules]
        return min(idx) if idx and None not in idx else 0  # type: ignore[type-var]

    def _call_index(self, name: str | None) -> int | None:
        """The recorded call index of the module ``name``; for one the evaluated model did not
        call (a BatchNorm its fused copy folded into the convolution before it) the earliest
        call under its nearest enclosing module that has one: never later than its own would
        be, so a stage that contains it is never skipped."""
        if name is None:
            return None
        if name in self.leaf_index:
            return self.leaf_index[name]
        while name:
            name = name.rpartition(".")[0]
            under = [i for leaf, i in self.leaf_index.items() if _under(leaf, name)]
            if under:
                return min(under)
        return None

    def _find_batch(self, x: torch.Tensor) -> int | None:
        for i, ref in enumerate(self.inputs):
            if ref.shape == x.shape and ref.dtype == x.dtype and \
                    torch.equal(ref, x.to(ref.device)):
                return i
        return None

    def _skipped(self, first: int) -> list[tuple[str, nn.Module]]:
        return [(n, m) for n, m in self.stages
                if self.enabled and n in self.span and self.span[n][1] < first]

    def skipped_modules(self, first: int) -> set[nn.Module]:
        """The modules that do not run while :meth:`skipping_before` ``first`` is in force."""
        return {sub for _, stage in self._skipped(first) for sub in stage.modules()}

    @contextlib.contextmanager
    def skipping_before(self, first: int) -> Iterator[int]:
        """Stages that end before leaf call ``first`` replay their recorded outputs; yields how
        many stages are skipped."""
        skip = self._skipped(first)
        if not skip:
            yield 0
            return

        def on_model(module, args):
            x = _first_tensor(args)
            self._batch = self._find_batch(x) if x is not None else None

        def replay(name: str, forward: Callable) -> Callable:
            def run(*args: Any, **kwargs: Any):
                if self._batch is None:
                    return forward(*args, **kwargs)
                out = self.outputs[name][self._batch]
                device = (_first_tensor(args).device if _first_tensor(args) is not None
                          else out.device)
                layout = self.memory_format if out.dim() == 4 else torch.preserve_format
                out = out.to(device, copy=True, memory_format=layout)
                return out.repeat(self.repeat, *([1] * (out.dim() - 1))) if self.repeat > 1 else out
            return run

        def attach(root: nn.Module) -> list[Undo]:
            modules = dict(root.named_modules())
            handle = root.register_forward_pre_hook(on_model)
            self._hook_ids.add(handle.id)
            undo = [handle.remove]
            for name, _ in skip:
                module = modules.get(name)
                if module is None:
                    continue
                own = module.__dict__.get("forward")  # an instance-level forward?
                run = replay(name, module.forward)
                self._replays[id(run)] = (run, own)
                module.forward = run
                undo.append(lambda module=module, own=own: _set_forward(module, own))
            return undo

        try:
            with self._attached(attach):
                yield len(skip)
        finally:
            self._batch = None

    # -- following a copy ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _attached(self, attach: Callable[[nn.Module], list[Undo]]) -> Iterator[None]:
        """``attach`` on the model for the block, and on every copy :func:`follow` is given."""
        self._attach, self._hook_ids, self._replays = attach, set(), {}
        self._undo = attach(self.model)
        try:
            with in_force("prefix cache", self.model, self):
                yield
        finally:
            for undo in reversed(self._undo):
                undo()
            self._attach, self._undo, self._hook_ids, self._replays = None, [], set(), {}

    def _follow(self, copy: nn.Module) -> None:
        """Take what copying carried over from the model off ``copy``, then attach there."""
        if self._attach is None:
            return
        for module in copy.modules():  # what copying carried over from the model
            for hooks in (module._forward_pre_hooks, module._forward_hooks,
                          module._forward_pre_hooks_with_kwargs,
                          module._forward_hooks_with_kwargs, module._forward_hooks_always_called):
                for hook_id in self._hook_ids & set(hooks):
                    del hooks[hook_id]
            forward = module.__dict__.get("forward")
            replay, own = self._replays.get(id(forward), (None, None))
            if forward is not None and replay is forward:
                if isinstance(own, types.MethodType) and isinstance(own.__self__, nn.Module):
                    own = types.MethodType(own.__func__, module)  # the copy's own bound forward
                _set_forward(module, own)
        self._undo += self._attach(copy)


def _under(name: str, prefix: str) -> bool:
    """``name`` is the module ``prefix`` or inside it ("" is the root: everything)."""
    return not prefix or name == prefix or name.startswith(prefix + ".")


def _set_forward(module: nn.Module, forward: Any) -> None:
    """Give ``module`` the instance-level ``forward`` (None: its class's)."""
    if forward is None:
        module.__dict__.pop("forward", None)
    else:
        module.forward = forward
