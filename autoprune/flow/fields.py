"""The settings' fields: :func:`setting` (a field with its help text, type in words and
whether a resumed run may change it) and settings *groups* (:func:`group`: one dataclass held as
one field, such as the engine's ``Timing``, whose own fields are spelled ``<prefix><field>``);
:func:`flat_fields`, :func:`from_flat` and :func:`to_flat` go between the grouped form and the
flat names users write as keywords, YAML keys and CLI flags."""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Callable, Mapping


def setting(default: Any = None, help: str = "", *, kind: str = "", free: bool = False,
            train_only: bool = False, analysis: bool = False,
            factory: Callable[[], Any] | None = None) -> Any:
    """A settings field: its default, help text and type in words (``kind``, for the CLI); a
    ``free`` setting may differ when a run is resumed (devices, progress bars, loader workers);
    a task's ``train_only`` one is not taken by ``analyze_sensitivity`` (learning rate,
    optimizer...); a flow setting is taken by it only when ``analysis``."""
    meta = {"help": help, "kind": kind, "free": free, "train_only": train_only,
            "analysis": analysis}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def group(cls: type, help: str, *, prefix: str = "") -> Any:
    """A settings group: one dataclass (the engine's :class:`~autoprune.engine.latency.Timing`,
    ...) held as one field, whose own fields are spelled ``<prefix><field>`` as keywords, YAML
    keys and CLI flags (``latency_threads``); each keeps its own default, help text and type, so
    a field added to the group's class reaches all of them."""
    return field(default_factory=cls, metadata={"help": help, "group": cls, "prefix": prefix})


class Flat:
    """One setting as users spell it: a plain field of a settings class, or a field of one of
    its groups (``group`` names the group field, ``None`` for a plain one)."""

    __slots__ = ("name", "field", "group")

    def __init__(self, name: str, field_: dataclasses.Field, group_: str | None = None):
        self.name, self.field, self.group = name, field_, group_

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.field.metadata

    @property
    def default(self) -> Any:
        f = self.field
        return f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING  # type: ignore
            else None)


def flat_fields(cls: type) -> list[Flat]:
    """The settings of ``cls`` as users spell them, in order: its plain fields, and for each
    group field (:func:`group`) the group's fields with the group's prefix."""
    out = []
    for f in dataclasses.fields(cls):
        inner = f.metadata.get("group")
        if inner is None:
            out.append(Flat(f.name, f))
        else:
            out += [Flat(f.metadata["prefix"] + g.name, g, f.name)
                    for g in dataclasses.fields(inner)]
    return out


def group_class(cls: type, name: str) -> type:
    """The class of the settings group ``name`` of ``cls`` (``group_class(FlowSettings,
    "latency")`` is :class:`~autoprune.engine.timing.Timing`): the one place that says which
    fields the group has."""
    for f in dataclasses.fields(cls):
        if f.name == name and f.metadata.get("group") is not None:
            return f.metadata["group"]
    raise KeyError(f"{cls.__name__} has no settings group {name!r}")


def from_flat(cls: type, values: Mapping[str, Any]) -> Any:
    """A ``cls`` from settings spelled flat (``latency_threads=1`` sets ``latency.threads``);
    names ``cls`` does not know are a TypeError, as the dataclass would give."""
    spelled = {s.name: s for s in flat_fields(cls)}
    unknown = sorted(set(values) - set(spelled))
    if unknown:
        raise TypeError(f"{cls.__name__} got an unexpected setting {unknown[0]!r}")
    plain_values: dict[str, Any] = {}
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        s = spelled[name]
        if s.group is None:
            plain_values[name] = value
        else:
            grouped.setdefault(s.group, {})[s.field.name] = value
    group_classes = {f.name: f.metadata.get("group") for f in dataclasses.fields(cls)}
    for name, inner in grouped.items():
        plain_values[name] = group_classes[name](**inner)
    return cls(**plain_values)


def to_flat(settings: Any) -> dict[str, Any]:
    """The settings of a dataclass instance spelled flat (the inverse of :func:`from_flat`)."""
    out = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.metadata.get("group") is not None and dataclasses.is_dataclass(value):
            prefix = f.metadata["prefix"]
            out.update({prefix + g.name: getattr(value, g.name)
                        for g in dataclasses.fields(value)})
        else:
            out[f.name] = value
    return out
