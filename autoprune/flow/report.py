"""The before/after figures of a model (size, FLOPs, metrics, latency) and their tables (console,
Markdown, CSV, JSON)."""
from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn as nn

from ..engine.latency import describe
from ..engine.measure import measure
from ..tasks.base import TaskAdapter

def figures(adapter: TaskAdapter, model: nn.Module, metrics: dict[str, float]) -> dict[str, Any]:
    """Params, FLOPs, file size and CPU (and GPU) latency of ``model`` on the adapter's timing
    batch, with ``metrics``: one side of a report."""
    inputs = adapter.timing_inputs(model)
    cpu = measure(copy.deepcopy(model).cpu(), inputs.cpu() if torch.is_tensor(inputs) else inputs)
    gpu = None
    if torch.cuda.is_available():
        gpu = measure(model, inputs, device="cuda")["latency_ms"]
    return {"params": cpu["params"], "flops": cpu["flops"], "size_mb": cpu["size_mb"],
            "metrics": metrics, "latency_cpu_ms": cpu["latency_ms"], "latency_gpu_ms": gpu}


_ROWS = (("params", "Params", lambda v: f"{v / 1e6:.3f} M"),
         ("flops", "FLOPs (MACs)", lambda v: f"{v / 1e6:.1f} M"),
         ("size_mb", "Size", lambda v: f"{v:.2f} MB"),
         ("latency_cpu_ms", "CPU latency", lambda v: f"{v:.2f} ms"),
         ("latency_gpu_ms", "GPU latency", lambda v: f"{v:.2f} ms"))


def _rows(report: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    base, pruned = report["baseline"], report["pruned"]
    rows = []
    for key, label, fmt in _ROWS:
        b, p = base.get(key), pruned.get(key)
        if b is None or p is None:
            continue
        change = f"{(p / b - 1) * 100:+.1f} %" if b else "n/a"
        rows.append((label, fmt(b), fmt(p), change))
    for name, b in base.get("metrics", {}).items():
        p = pruned.get("metrics", {}).get(name)
        if p is not None:
            rows.append((name, f"{b:.4f}", f"{p:.4f}", f"{p - b:+.4f}"))
    return rows


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def target_rows(report: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(what, asked, achieved)`` for the run's target (report ``target``): the latency
    reduction measured where the target named (CPU for a FLOPs or loss target) and, for a FLOPs
    target, the FLOPs reduction; none for a report without a target."""
    target = report.get("target")
    if not isinstance(target, Mapping):
        return []
    kind, value = target.get("kind"), target.get("value")
    where = describe(report.get("latency_measured") or target, with_input=False)
    rows = [(f"latency reduction ({where})", _pct(value) if kind == "latency" else "-",
             _pct(report.get("latency_reduction")))]
    if kind == "flops":
        rows.insert(0, ("FLOPs reduction", _pct(value), _pct(report.get("flops_reduction"))))
    elif kind == "loss":
        rows.insert(0, ("tolerated loss per group", _pct(value), "-"))
    elif target.get("max_loss_per_group") is not None:
        rows.append(("tolerated loss per group (cap)", _pct(target["max_loss_per_group"]), "-"))
    return rows


def to_markdown(report: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table, then the target against what was achieved."""
    lines = ["| | baseline | pruned | change |", "|---|---:|---:|---:|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _rows(report)]
    targets = target_rows(report)
    if targets:
        lines += ["", "| target | asked | achieved |", "|---|---:|---:|"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in targets]
    return "\n".join(lines) + "\n"


def to_console(report: Mapping[str, Any]) -> str:
    """The comparison as an aligned plain-text table (the target's rows last: what, asked,
    achieved)."""
    rows = [("", "baseline", "pruned", "change")] + _rows(report)
    targets = [(f"target: {a}", b, c, "") for a, b, c in target_rows(report)]
    widths = [max(len(r[i]) for r in rows + targets) for i in range(4)]
    fmt = lambda r: "  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
    lines = [fmt(rows[0]), "-" * (sum(widths) + 6)] + [fmt(r) for r in rows[1:]]
    if targets:
        lines += ["-" * (sum(widths) + 6), fmt(("", "asked", "achieved", ""))]
        lines += [fmt(r) for r in targets]
    return "\n".join(lines)


def to_csv(report: Mapping[str, Any]) -> str:
    """The comparison as CSV (``metric,baseline,pruned,change``); a target's rows read
    ``target: <what>,<asked>,<achieved>,`` (asked in the baseline column)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["metric", "baseline", "pruned", "change"])
    writer.writerows(_rows(report))
    writer.writerows((f"target: {a}", b, c, "") for a, b, c in target_rows(report))
    return buf.getvalue()


def write_reports(report: Mapping[str, Any], save_dir: str | Path) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``report.csv`` into ``save_dir``."""
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": save_dir / "report.json", "md": save_dir / "report.md",
             "csv": save_dir / "report.csv"}
    paths["json"].write_text(json.dumps(report, indent=2))
    paths["md"].write_text(to_markdown(report))
    paths["csv"].write_text(to_csv(report))
    return paths
