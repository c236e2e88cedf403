"""``autoprune show``: a sensitivity file as a table (how it was measured; the points an
adaptive analysis decided early marked), a run's report tables, or a checkpoint's metadata.
Everything printed from a file goes through :func:`shown` (a file is a stranger's input)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..engine.checkpoint import read_pruned_metadata
from ..engine.outputs import file_kind
from ..engine.store import read_record
from ..flow.report import (analysis_line, analysis_summary, printable, start_line, to_console,
                           whole_number)


def shown(text: object) -> str:
    """``text`` safe to print on a terminal (:func:`autoprune.flow.report.printable`)."""
    return printable(text)


def say(text: object) -> None:
    """Print a line that holds what a file says (:func:`shown`)."""
    print(shown(text))


def show(args: argparse.Namespace) -> None:
    """Print ``args.file``: a checkpoint's metadata, a run's report tables or a sensitivity
    table."""
    if file_kind(args.file) == "a checkpoint":
        show_checkpoint(args.file)
        return
    report = _run_report(args.file)
    if report is not None:  # a run's report.json: its tables (the INT8 one included)
        for line in to_console(report).splitlines():
            say(line)
        return
    rec = read_record(args.file)
    say(f"arch: {rec.model.get('arch')}  fingerprint: {rec.model.get('fingerprint')}  "
        f"criterion: {rec.criterion}")
    say(f"metric: {rec.metric.get('name')}  baseline: {rec.metric.get('baseline')}  "
        f"higher_is_better: {rec.metric.get('higher_is_better')}")
    analysis = analysis_line(analysis_summary(rec.extra))
    if analysis:
        say(f"analysis: {analysis}")
    ratios = sorted({r for pts in rec.sensitivities.values() for r in pts})
    width = 9 if rec.intervals else 8  # room for the mark of a point decided early
    say("group".ljust(32) + "".join(f"{r:>{width}.2f}" for r in ratios))
    for group, pts in rec.sensitivities.items():
        marks = ["*" if rec.is_interval(group, r) else " " if rec.intervals else "" for r in ratios]
        cells = "".join(f"{pts[r]:>8.4f}{mark}" if r in pts else f"{'-':>8}{mark and ' '}"
                        for r, mark in zip(ratios, marks))
        say(shown(group)[:31].ljust(32) + cells)
    if rec.intervals:
        say(decided_early_note(rec.intervals))


def decided_early_note(intervals: dict) -> str:
    """The table's footnote for points an adaptive analysis decided on part of the images."""
    seen = [(info.get("images"), info.get("of")) for points in intervals.values()
            for info in points.values() if isinstance(info, dict)]
    used = sorted(n for n, _ in seen if whole_number(n))
    of = {m for _, m in seen if whole_number(m)}
    span = (f" on {used[0]:,}-{used[-1]:,}" if used and used[0] != used[-1] else
            f" on {used[0]:,}" if used else "")
    total = f" of {next(iter(of)):,} images" if len(of) == 1 and span else ""
    return (f"* decided early{span}{total}: the upper end of its loss interval (as allocations "
            "read it)")


def _run_report(path: str) -> dict | None:
    """The content of a run's ``report.json`` (None for another kind of file)."""
    import json

    if not str(path).endswith(".json") or file_kind(path) == "a sensitivity file":
        return None
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if isinstance(report, dict) and all(isinstance(report.get(k), dict) and
                                        isinstance(report[k].get("metrics"), dict)
                                        for k in ("baseline", "pruned")):
        return report
    return None


def show_checkpoint(path: str) -> None:
    """A checkpoint's metadata: task, architecture, build arguments, input size, whether it is
    pruned (and how many groups), where its starting weights came from, its metrics."""
    meta = read_pruned_metadata(path)
    build = ", ".join(f"{k}={v}" for k, v in (meta.get("build") or {}).items())
    say(f"task: {meta.get('task')}  arch: {meta.get('arch') or '(custom model)'}  "
        f"build: {build or '-'}  input_size: {meta.get('input_size')}")
    plan = meta.get("plan") or {}
    say(f"pruned: {'yes, ' + str(len(plan)) + ' groups' if meta.get('pruned') else 'no'}  "
        f"epoch: {meta.get('epoch', '-')}")
    start = start_line(meta)
    say(f"starting weights: {start or 'random initialisation (or not recorded)'}")
    if isinstance(meta.get("data"), dict) and meta["data"]:
        say("data settings: " + ", ".join(f"{k}={v}" for k, v in meta["data"].items()))
    metrics = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    if metrics:
        say("metrics: " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()
                                    if isinstance(v, (int, float))))
