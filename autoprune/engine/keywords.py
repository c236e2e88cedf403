"""Keyword names the engine's public functions took before their settings were grouped
(``latency_threads=1`` → ``latency=Timing(threads=1)``, ``early_stop=0.5`` →
``options={"early_stop": 0.5}``): still accepted, with a FutureWarning naming the new spelling,
as timm keeps its deprecated model names working."""
from __future__ import annotations

import warnings
from typing import Any, Mapping


def regroup(function: str, given: Mapping[str, Any], table: Mapping[str, tuple[str, str]],
            warn: bool = True) -> dict[str, dict[str, Any]]:
    """``{group: {field: value}}`` of the former keywords in ``given`` (``table``: former name
    → (the argument that holds it now, its field there)), with a FutureWarning unless ``warn``
    is False (a spelling kept on purpose). A keyword ``table`` does not know is the TypeError
    Python gives for an unexpected keyword."""
    out: dict[str, dict[str, Any]] = {}
    for old, value in given.items():
        if old not in table:
            raise TypeError(f"{function}() got an unexpected keyword argument {old!r}")
        group, field = table[old]
        out.setdefault(group, {})[field] = value
    if out and warn:
        now = "; ".join(f"{group}=" + ("Timing(" + ", ".join(f"{f}=..." for f in fields) + ")"
                                       if group in ("latency", "timing") else
                                       "{" + ", ".join(f"{f!r}: ..." for f in fields) + "}")
                        for group, fields in out.items())
        old = ", ".join(f"{k}=..." for k in given)
        warnings.warn(f"{function}({old}) is deprecated: pass {now}",
                      FutureWarning, stacklevel=3)
    return out
