"""Prunable groups of a model: torch-pruning coupled groups with stable names, and their removal
(which channels go: :mod:`.channels`).

A *prunable group* is one torch-pruning (DepGraph) coupled group: every layer whose output channels
must be removed together (a residual stage is one group). Its stable name is the ``named_modules()``
name of the earliest module whose output channels the group removes.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch
import torch.nn as nn
import torch_pruning as tp

from .attributes import attribute_holders, sync_attributes
from .channels import ROOT_TYPES, channels_to_remove, grouped
from .input_fit import forward_refusal
from .probe import leave_out_unsafe, output_shape
from .tp_patches import OverBudget, walk_budget
from ..errors import ConfigError, NoPrunableGroupsError

@dataclass(frozen=True)
class PrunableGroup:
    """One coupled channel group.

    name: stable name (earliest module, in ``named_modules()`` order, whose outputs it cuts).
    members: names of every module whose output channels the group removes, in model order.
    channels: how many channels the group has now.
    root: the module torch-pruning roots the group at (used to re-create it).
    """

    name: str
    members: tuple[str, ...]
    channels: int
    root: str


def _resolve_ignored(model: nn.Module, ignored_layers: Iterable[Any]) -> list[nn.Module]:
    by_name = dict(model.named_modules())
    modules = []
    for item in ignored_layers or ():
        if isinstance(item, str):
            if item not in by_name:
                raise ConfigError(f"ignored layer {item!r} is not a module of this model: "
                                  f"use a name from model.named_modules()")
            modules.append(by_name[item])
        elif isinstance(item, nn.Module):
            modules.append(item)
        else:
            raise ConfigError(f"ignored_layers takes module names or modules, "
                              f"not {type(item).__name__}")
    return modules


class PruningGraph:
    """A model's dependency graph and its prunable groups; the object the core works on.

    Building it traces the model once with ``example_inputs``; the model's train/eval mode is kept.
    Groups that would change the model's output shape (the classifier, a detection head's last
    conv) are left out; so, with a warning, are groups whose grouped (non-depthwise) convolutions
    or GroupNorms see only part of their channels (a grouped conv that sees all of them loses the
    same positions from each of its conv groups: :meth:`channels_to_remove`), and (``probe``)
    groups whose removal breaks the model (:mod:`autoprune.engine.probe`).
    """

    def __init__(self, model: nn.Module, example_inputs: Any, ignored_layers: Iterable[Any] = (),
                 unwrapped_parameters: Sequence[tuple[nn.Parameter, int]] | None = None,
                 probe: bool = True):
        self.model = model
        self.ignored = _resolve_ignored(model, ignored_layers)
        was_training = model.training
        try:
            with torch.enable_grad():
                # ignored layers are traced (their coupling matters) and only skipped as roots
                self.dg = tp.DependencyGraph()
                self.dg._autoprune_mapping_fresh = False  # marks the graph as a PruningGraph's
                self.dg.build_dependency(model, example_inputs=example_inputs,
                                         unwrapped_parameters=unwrapped_parameters, verbose=False)
        except Exception:
            refusal = forward_refusal(model, example_inputs)  # the model's own forward fails?
            if refusal is None:
                raise
            raise ConfigError(f"{refusal}; pass example inputs of a size it takes") from None
        finally:
            model.train(was_training)
        self.names = {m: n for n, m in model.named_modules()}
        self._order = {n: i for i, n in enumerate(self.names.values())}
        self.modules = dict(model.named_modules())
        self._attribute_holders = attribute_holders(model)  # synced after each removal
        self.example_inputs = example_inputs
        self._parts: dict[tuple[str, int], int] = {}  # packed parts of a group's root
        self.over_budget: list[str] = []  # roots whose group's walk went over its budget
        self.unmappable: list[str] = []  # roots whose walk torch-pruning could not map
        self.groups = self._list_groups()
        for roots, why in ((self.over_budget, "are too entangled for the dependency search "
                                              "(channels folded into other axes, e.g. by attention "
                                              "or channel-attention reshapes)"),
                           (self.unmappable, "cannot be mapped by the dependency search"),
                           (self.unfit, "reach a grouped conv or GroupNorm through a "
                                        "concatenation (equal cuts per conv/norm group cannot be "
                                        "guaranteed there)")):
            if roots:
                names = ", ".join(roots[:4]) + (", ..." if len(roots) > 4 else "")
                warnings.warn(f"{len(roots)} channel group(s) of {type(model).__name__} {why} "
                              f"and are left whole: {names}", stacklevel=2)
        if probe:
            self.groups = leave_out_unsafe(self, self.groups)
        if not self.groups:
            raise NoPrunableGroupsError(
                f"{type(model).__name__} has no prunable channel group (no Conv/Linear whose "
                f"outputs can be cut without changing the model output): nothing to prune")
        self.by_name = {g.name: g for g in self.groups}

    # -- listing -----------------------------------------------------------------------------
    def _cuts_output(self, dep) -> bool:
        """True if this dependency changes a tensor the model returns."""
        node = dep.target
        if node.outputs:
            return False
        module = node.module
        if isinstance(module, ROOT_TYPES) and self.dg.is_in_channel_pruning_fn(dep.handler) \
                and tp.ops.module2type(module) != tp.ops.OPTYPE.DEPTHWISE_CONV:
            return False  # cutting the inputs of the last layer leaves the output as it is
        return True

    def _all_groups(self) -> Iterator[Any]:
        """torch-pruning's ``get_all_groups`` (each coupled group once, from its first root; no
        group that cuts an ignored layer's outputs), with a budget on each group's walk: a root
        whose group goes over it (or whose walk torch-pruning cannot map) is left whole and listed
        in :attr:`over_budget` (:attr:`unmappable`), and so are the layers its walk reached: they
        are not tried as roots (the walk would run away again) and no other group may cut them
        (it would be a fragment of the group that could not be formed, e.g. a one-channel group
        from an ECA-ResNet's Conv1d)."""
        visited: set[int] = set()  # ids: a target may be an unwrapped parameter (a tensor)
        entangled: set[int] = set()  # layers reached by a walk that failed
        ignored = {id(m) for m in self.ignored + list(self.dg.IGNORED_LAYERS_IN_TRACING)}
        key = (type(self.model).__module__, type(self.model).__qualname__,
               str(output_shape(self.example_inputs)), _tensor_shapes(self.model),
               tuple(sorted(self.names.get(m, "") for m in self.ignored)))
        known = _FAILED_WALKS.get(key)  # this architecture's failed walks, from an earlier graph
        failed: dict[str, tuple[str, list[str]]] = {}
        by_name = {**dict(self.model.named_parameters()), **self.modules}
        for module in list(self.dg.module2node):
            if id(module) in ignored or id(module) in visited or \
                    not isinstance(module, ROOT_TYPES):
                continue
            pruner = self.dg.get_pruner_of_module(module)
            if pruner is None or pruner.get_out_channels(module) is None:
                continue
            name = self.names.get(module, type(module).__name__)
            channels = list(range(pruner.get_out_channels(module)))
            if known is None:
                group, reason, reached = self._walk(module, pruner.prune_out_channels, channels)
            elif name in known:
                group, (reason, reached) = None, known[name]
            else:  # walked before, within the budget
                group, reason, reached = self.dg.get_pruning_group(
                    module, pruner.prune_out_channels, channels), "", []
            if reason:
                (self.over_budget if reason == "budget" else self.unmappable).append(name)
                entangled |= {id(module)} | {id(by_name[n]) for n in reached if n in by_name}
                visited |= entangled
                failed[name] = (reason, reached)
                continue
            prunable = True
            for dep, _ in group:
                if self.dg.is_out_channel_pruning_fn(dep.handler):
                    visited.add(id(dep.target.module))
                    prunable = prunable and id(dep.target.module) not in ignored \
                        and id(dep.target.module) not in entangled
            if prunable:
                yield group
        _FAILED_WALKS[key] = failed

    def _walk(self, module: nn.Module, pruning_fn: Any, idxs: list[int]
              ) -> tuple[Any, str, list[str]]:
        """Form ``module``'s group within the walk budget: ``(group, "", [])``, or ``(None,
        "budget" or "unmappable", names of the layers and parameters whose outputs the walk
        reached)`` when it goes over the budget or torch-pruning fails inside it (EfficientViM's
        concat offsets)."""
        with walk_budget() as budget:
            try:
                return self.dg.get_pruning_group(module, pruning_fn, idxs), "", []
            except Exception as e:  # noqa: BLE001 - over budget, or torch-pruning's own error
                names = {**{id(m): n for m, n in self.names.items()},
                         **{id(p): n for p, n in self.dg._param_to_name.items()}}
                reached = {names[id(dep.target.module)] for dep in budget.reached
                           if self.dg.is_out_channel_pruning_fn(dep.handler)
                           and id(dep.target.module) in names}
                return (None, "budget" if isinstance(e, OverBudget) else "unmappable",
                        sorted(reached))

    def _list_groups(self) -> list[PrunableGroup]:
        groups, unfit = [], []  # unfit: roots of groups a grouped conv or GroupNorm cannot take
        for group in self._all_groups():
            if any(self._cuts_output(dep) or _gathers_channels(dep.target) or _unmapped(dep.target)
                   for dep, _ in group):
                continue
            members = []
            for dep, _ in group:
                module = dep.target.module
                if self.dg.is_out_channel_pruning_fn(dep.handler) and module in self.names:
                    members.append(self.names[module])
            if not members:
                continue
            members = sorted(set(members), key=self._order.__getitem__)
            if not self._norms_fit(group) or not self._grouped_convs_fit(group):
                unfit.append(members[0])
                continue
            root = self.names[group[0].dep.target.module]
            groups.append(PrunableGroup(members[0], tuple(members), len(group[0].idxs), root))
        self.unfit = sorted(unfit, key=self._order.__getitem__)
        groups.sort(key=lambda g: self._order[g.name])
        return groups

    def _grouped_convs_fit(self, group) -> bool:
        """False when a grouped (not depthwise) conv sees a share of the group's channels other
        than all of them (a concatenation), or the group's width does not divide into its conv
        groups: the same positions of every conv group cannot be removed there."""
        channels = len(group[0].idxs)
        for dep, _ in group:
            module = dep.target.module
            if grouped(module):
                width = module.out_channels if self.dg.is_out_channel_pruning_fn(dep.handler) \
                    else module.in_channels
                if width != channels or channels % module.groups:
                    return False
        return True

    @staticmethod
    def _norms_fit(group) -> bool:
        """False when a multi-group GroupNorm sees a share of the group's channels other than all
        of them (a concatenation): equal cuts per norm group cannot be guaranteed there."""
        channels = len(group[0].idxs)
        for dep, idxs in group:
            module = dep.target.module
            if isinstance(module, nn.GroupNorm) and module.num_groups > 1 and (
                    module.num_channels != channels or channels % module.num_groups):
                return False
        return True

    @property
    def fingerprint(self) -> str:
        """A short hash of the group structure (names, members, channel counts)."""
        return group_fingerprint(self.groups)

    def group(self, name: str) -> PrunableGroup:
        """The group called ``name``; a ConfigError lists the valid names otherwise."""
        try:
            return self.by_name[name]
        except KeyError:
            raise ConfigError(unknown_groups_message([name], self.groups)) from None

    def check_names(self, names: Iterable[str]) -> None:
        """Raise a ConfigError if any of ``names`` is not a group of this model."""
        unknown = [n for n in names if n not in self.by_name]
        if unknown:
            raise ConfigError(unknown_groups_message(unknown, self.groups))

    # -- pruning -----------------------------------------------------------------------------
    def tp_group(self, group: PrunableGroup, idxs: Sequence[int] | None = None):
        """The torch-pruning group for ``group`` (all current channels, or ``idxs``)."""
        root = self.modules[group.root]
        pruner = self.dg.get_pruner_of_module(root)
        if idxs is None:
            idxs = list(range(pruner.get_out_channels(root)))
        return self.dg.get_pruning_group(root, pruner.prune_out_channels, list(idxs))

    def channels_to_remove(self, group: PrunableGroup, ratio: float, criterion: str = "l1_norm",
                           round_to: int | None = None) -> list[int]:
        """Indices of the least important channels that pruning ``ratio`` of ``group`` removes
        (see :func:`autoprune.engine.channels.channels_to_remove`)."""
        return channels_to_remove(self, group, ratio, criterion, round_to)

    def touched_modules(self, group: PrunableGroup) -> list[nn.Module]:
        """Every module (or unwrapped parameter's owner) that pruning ``group`` modifies."""
        touched = []
        for dep, _ in self.tp_group(group):
            module = dep.target.module
            if isinstance(module, nn.Parameter):
                name = self.dg._param_to_name[module]
                module = self.modules[name.rsplit(".", 1)[0]] if "." in name else self.model
            if isinstance(module, nn.Module) and module in self.names and module not in touched:
                touched.append(module)  # (torch-pruning's own op nodes are not model modules)
        return touched

    def remove(self, group: PrunableGroup, idxs: Sequence[int]) -> None:
        """Physically remove channels ``idxs`` of ``group`` from the model (in place); model
        attributes that repeat a channel count follow (:mod:`autoprune.attributes`)."""
        if idxs:
            tp_group = self.tp_group(group, idxs)
            extra = self._extra_channel_parameters(tp_group)
            tp_group.prune()
            for module, name, removed in extra:
                if _out_channels(module) < module._parameters[name].shape[0]:
                    _drop_rows(module, name, removed)
            self.resized()
            sync_attributes(self.model, self._attribute_holders)

    def _extra_channel_parameters(self, tp_group) -> list[tuple[nn.Module, str, list[int]]]:
        """``(layer, parameter name, output channels removed)`` for each parameter of a
        conv/linear subclass other than ``weight``/``bias`` that holds one row per output channel
        (timm's weight-standardised ``ScaledStdConv2d.gain``): torch-pruning slices only
        ``weight`` and ``bias``, so these follow the outputs here (a depthwise conv's input cut
        removes the same outputs)."""
        extra = []
        for dep, idxs in tp_group:
            module = dep.target.module
            if not isinstance(module, ROOT_TYPES) or type(module) in ROOT_TYPES or not idxs:
                continue
            depthwise = getattr(module, "groups", 1) > 1 and \
                module.groups == module.in_channels == module.out_channels
            if not (self.dg.is_out_channel_pruning_fn(dep.handler) or depthwise):
                continue
            for name, param in module._parameters.items():
                if name not in ("weight", "bias") and param is not None and param.dim() \
                        and param.shape[0] == _out_channels(module):
                    extra.append((module, name, list(idxs)))
        return extra

    def resized(self) -> None:
        """Tell the graph that channel counts changed (a removal, or one undone): torch-pruning's
        index mapping is computed again before the next group is formed."""
        self.dg._autoprune_mapping_fresh = False


# the roots whose walk failed, per (architecture, input, tensor shapes, ignored layers): {root:
# ("budget" or "unmappable", names of the layers its walk reached)}; a later graph of the same
# model (prune after prunable_groups, the sensitivity analysis) skips those walks (~1 s each)
_FAILED_WALKS: dict[tuple, dict[str, tuple[str, list[str]]]] = {}


def _tensor_shapes(model: nn.Module) -> tuple:
    return tuple((k, tuple(v.shape)) for k, v in model.state_dict().items())


def _out_channels(module: nn.Module) -> int:
    return module.out_features if isinstance(module, nn.Linear) else module.out_channels


def _drop_rows(module: nn.Module, name: str, removed: Sequence[int]) -> None:
    """Remove rows ``removed`` (dim 0) of ``module``'s parameter ``name``."""
    param = module._parameters[name]
    gone = set(removed)
    keep = torch.tensor([i for i in range(param.shape[0]) if i not in gone], dtype=torch.long,
                        device=param.device)
    module._parameters[name] = nn.Parameter(param.data.index_select(0, keep).clone(),
                                            requires_grad=param.requires_grad)


def _gathers_channels(node) -> bool:
    """True for a channel gather (``index_select`` on dim 1, e.g. a channel shuffle written as
    one): torch-pruning maps channels through it one to one, which is wrong for a permutation, so
    a group that crosses it is left out."""
    fn = getattr(node, "grad_fn", None)
    name = fn.name() if fn is not None and hasattr(fn, "name") else ""
    return name.startswith("IndexSelectBackward") and getattr(fn, "_saved_dim", 1) == 1


def _unmapped(node) -> bool:
    """True for a concat whose channel mapping torch-pruning could not work out."""
    return getattr(node, "autoprune_unmapped", False)


def group_fingerprint(groups: Sequence[PrunableGroup],
                      channels: Mapping[str, int] | None = None) -> str:
    """sha256 (16 hex digits) of the groups' names, members and channel counts (``channels``:
    counts to hash instead of some groups' own, by name)."""
    channels = channels or {}
    data = json.dumps([[g.name, int(channels.get(g.name, g.channels)), list(g.members)]
                       for g in groups])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def unknown_groups_message(unknown: Sequence[str], groups: Sequence[PrunableGroup]) -> str:
    known = ", ".join(g.name for g in groups[:12]) + (", ..." if len(groups) > 12 else "")
    shown = ", ".join(repr(n) for n in list(unknown)[:5]) + (" ..." if len(unknown) > 5 else "")
    return (f"unknown group name(s) {shown}: this model's groups are {known} "
            f"(was the profile made for another architecture?)")


def prunable_groups(model: nn.Module, example_inputs: Any,
                    ignored_layers: Iterable[Any] = ()) -> list[PrunableGroup]:
    """List the prunable channel groups of ``model``, in model order.

    ``example_inputs`` is a batch the model accepts (traced once); ``ignored_layers`` takes module
    names or modules whose output channels must be kept. Layers that produce the model's outputs are
    always kept. Raises NoPrunableGroupsError when nothing can be pruned.
    """
    return PruningGraph(model, example_inputs, ignored_layers).groups
