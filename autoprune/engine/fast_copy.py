"""A deep copy of a model (or of a tree of tensors) several times faster than ``copy.deepcopy``.

``copy.deepcopy`` reconstructs each of a model's hundreds of modules through the generic pickle
protocol (``__reduce_ex__``, slot lookup, a deep copy of every dict): 0.06-0.13 s for a YOLOv8n,
more than the evaluation of a small validation batch. A sensitivity analysis copies the model
for each of its hundreds of evaluations (to fuse it), the timer for each candidate, Ultralytics
for each checkpoint it saves (the EMA model and the optimizer's state). :func:`fast_deepcopy`
copies modules, parameters, tensors, dicts, lists and tuples directly and hands every other object
to ``copy.deepcopy`` with the same memo, so the result is what ``copy.deepcopy`` gives (shared
sub-modules and tied weights stay shared, bound methods are bound to the copy), except that
tensors' gradients are not copied.
"""
from __future__ import annotations

import copy
import types
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator, TypeVar

import torch
import torch.nn as nn

T = TypeVar("T")
_ATOMS = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device)


def fast_deepcopy(value: T) -> T:
    """A deep copy of ``value``, a model or anything ``copy.deepcopy`` takes (see the module):
    its own modules, parameters and tensors (same ``requires_grad``, no ``.grad``), containers
    and other objects."""
    return _copy(value, {})


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    if isinstance(value, _ATOMS):
        return value
    if id(value) in memo:
        return memo[id(value)]
    if type(value) in _CONTAINERS and _atomic(value):  # a module's hook dicts, Ultralytics' f, i
        new = value if type(value) is tuple else type(value)(value)
    elif type(value) in (dict, OrderedDict):  # an optimizer's state, a model's yaml
        new = type(value)()
        memo[id(value)] = new
        for key, item in value.items():
            new[_copy(key, memo)] = _copy(item, memo)
        return new
    elif type(value) is list:
        new = []
        memo[id(value)] = new
        new.extend(_copy(item, memo) for item in value)
        return new
    elif type(value) is tuple:
        new = tuple(_copy(item, memo) for item in value)
    elif isinstance(value, nn.Parameter) and type(value) is nn.Parameter:
        new = nn.Parameter(value.detach().clone(), requires_grad=value.requires_grad)
        if value.__dict__:  # attributes a library tagged the parameter with
            new.__dict__.update(copy.deepcopy(value.__dict__, memo))
    elif type(value) is torch.Tensor and value.is_leaf:
        new = value.detach().clone().requires_grad_(value.requires_grad)
    elif isinstance(value, nn.Module) and _plainly_copied(type(value)):
        new = object.__new__(type(value))
        memo[id(value)] = new
        state = {}
        for key, item in value.__dict__.items():
            if isinstance(item, _ATOMS):
                state[key] = item
            elif type(item) in _CONTAINERS and not item:  # most of a module's hook dicts
                state[key] = type(item)()
            elif key in ("_parameters", "_buffers", "_modules"):
                state[key] = {k: _copy(v, memo) for k, v in item.items()}
            elif isinstance(item, types.MethodType) and item.__self__ is value:
                state[key] = types.MethodType(item.__func__, new)  # forward = forward_fuse
            else:
                state[key] = _copy(item, memo)
        new.__setstate__(state)  # as copy.deepcopy does (a class may repair old state there)
        return new
    else:
        return copy.deepcopy(value, memo)
    memo[id(value)] = new
    return new


_CONTAINERS = (dict, OrderedDict, list, tuple, set)


def _atomic(container: Any) -> bool:
    """True when a container holds atoms only (its shallow copy is a deep copy)."""
    items = container.items() if isinstance(container, dict) else ((v, None) for v in container)
    return all(isinstance(k, _ATOMS) and isinstance(v, _ATOMS) for k, v in items)


def _plainly_copied(cls: type) -> bool:
    """True for a module class that ``copy.deepcopy`` would copy through its ``__dict__`` alone:
    no ``__deepcopy__``, ``__getstate__``, ``__reduce__`` or slots of its own (``__setstate__``
    is called as ``copy.deepcopy`` calls it)."""
    for klass in cls.__mro__:
        if klass is nn.Module:
            return True
        own = vars(klass)
        if any(k in own for k in ("__deepcopy__", "__getstate__", "__reduce__", "__reduce_ex__",
                                  "__slots__")):
            return False
    return False


@contextmanager
def fast_copies_in(module: types.ModuleType) -> Iterator[None]:
    """The deep copies a library module makes are :func:`fast_deepcopy`'s for the duration of the
    block: its ``deepcopy`` (a name it imported from ``copy``), or else its ``copy`` (the module
    it imported) seen through a stand-in whose ``deepcopy`` is the fast one; a module with
    neither is left as it is. Restored on leaving, an error included."""
    name, stand_in = None, None
    if callable(getattr(module, "deepcopy", None)):
        name, stand_in = "deepcopy", lambda value, memo=None: fast_deepcopy(value)
    elif getattr(module, "copy", None) is copy:
        name, stand_in = "copy", _FastCopyModule()
    if name is None:
        yield
        return
    original = getattr(module, name)
    setattr(module, name, stand_in)
    try:
        yield
    finally:
        setattr(module, name, original)


class _FastCopyModule:
    """``copy`` as a module sees it, with :func:`fast_deepcopy` as its ``deepcopy``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        return fast_deepcopy(value)


__all__ = ["fast_copies_in", "fast_deepcopy"]
