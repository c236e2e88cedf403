"""The before/after figures of a model (size, FLOPs, metrics, latency) and their tables (console,
Markdown, CSV, JSON)."""
from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn as nn

from ..engine.adaptive import TARGETS
from ..engine.fast_copy import fast_deepcopy
from ..engine.files import write_text_atomic
from ..engine.latency import describe, paired_reduction
from ..engine.measure import count_flops, count_params, size_mb, to_device
from ..engine.points import EVALUATIONS
from ..engine.progress import counted
from ..engine.timer import report_runtimes
from ..errors import ConfigError
from .contract import TaskAdapter
from .precision import int8_label


def compare_sides(adapter: TaskAdapter, baseline: nn.Module, pruned: nn.Module,
                  base_metrics: dict[str, float], pruned_metrics: dict[str, float]
                  ) -> dict[str, Any]:
    """The two sides of a report (params, FLOPs, file size, metrics, CPU and GPU latency) on the
    adapter's timing batch. The two models' latencies are timed together, in alternating rounds
    (:func:`~autoprune.engine.latency.paired_reduction`), on the CPU with torch's threads and on
    the GPU when there is one: ``{"baseline", "pruned", "latency_paired": {"cpu", "gpu"}}``."""
    inputs = adapter.timing_inputs(baseline)
    on_cpu = to_device(inputs, "cpu")
    batch = int(on_cpu.shape[0]) if torch.is_tensor(on_cpu) and on_cpu.dim() else 1
    models = {"baseline": fast_deepcopy(baseline).cpu(), "pruned": fast_deepcopy(pruned).cpu()}
    out: dict[str, Any] = {
        side: {"params": count_params(m), "flops": count_flops(m, on_cpu), "size_mb": size_mb(m),
               "metrics": metrics}
        for (side, m), metrics in zip(models.items(), (base_metrics, pruned_metrics))}
    paired = {"cpu": paired_reduction(models["baseline"], models["pruned"], on_cpu,
                                      device="cpu", batch=batch), "gpu": None,
              "onnxruntime": deploy_runtime_latency(adapter, models, on_cpu, batch)}
    if torch.cuda.is_available():
        paired["gpu"] = paired_reduction(baseline, pruned, inputs, device="cuda", batch=batch)
    for kind in ("cpu", "gpu", "onnxruntime"):
        timed = paired[kind]
        ok = bool(timed) and "error" not in timed
        out["baseline"][f"latency_{kind}_ms"] = timed["baseline_ms"] if ok else None
        out["pruned"][f"latency_{kind}_ms"] = timed["pruned_ms"] if ok else None
        if ok:
            timed.update(timed.pop("setting"))
    out["latency_paired"] = paired
    return out


def deploy_runtime_latency(adapter: TaskAdapter, models: Mapping[str, nn.Module], inputs: Any,
                           batch: int) -> dict[str, Any] | None:
    """The two models timed in pairs in ONNX Runtime on the CPU (with torch's threads), as the
    task deploys them, when onnxruntime is installed and ``$AUTOPRUNE_REPORT_RUNTIMES`` does not
    leave it out (None otherwise); a model it cannot run gives ``{"error": <the one line>}``
    instead of stopping the report."""
    if importlib.util.find_spec("onnxruntime") is None or "onnxruntime" not in report_runtimes():
        return None
    try:
        return paired_reduction(adapter.deploy_module(models["baseline"]),
                                adapter.deploy_module(models["pruned"]), inputs, device="cpu",
                                batch=batch, runtime="onnxruntime")
    except ConfigError as e:
        return {"error": str(e)}


_ROWS = (("params", "Params", lambda v: f"{v / 1e6:.3f} M"),
         ("flops", "FLOPs (MACs)", lambda v: f"{v / 1e6:.1f} M"),
         ("size_mb", "Size", lambda v: f"{v:.2f} MB"),
         ("latency_cpu_ms", "CPU latency", lambda v: f"{v:.2f} ms"),
         ("latency_onnxruntime_ms", "CPU latency, ONNX Runtime", lambda v: f"{v:.2f} ms"),
         ("latency_gpu_ms", "GPU latency", lambda v: f"{v:.2f} ms"))


def _rows(report: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    base, pruned = report["baseline"], report["pruned"]
    rows = []
    paired = report.get("latency_paired") or {}
    for key, label, fmt in _ROWS:
        b, p = base.get(key), pruned.get(key)
        if b is None or p is None:
            continue
        change = f"{(p / b - 1) * 100:+.1f} %" if b else "n/a"
        timed = paired.get(key.split("_")[1]) if key.startswith("latency_") else None
        if isinstance(timed, Mapping) and timed.get("reduction_range"):
            lo, hi = sorted(-100 * r for r in timed["reduction_range"])
            change += f" ({lo:+.1f} to {hi:+.1f})"  # the spread over the paired rounds
        rows.append((label, fmt(b), fmt(p), change))
    failed = paired.get("onnxruntime")
    if isinstance(failed, Mapping) and failed.get("error"):  # the model ORT could not run
        rows.append(("CPU latency, ONNX Runtime", "n/a", "n/a", str(failed["error"])[:60]))
    for name, b in base.get("metrics", {}).items():
        p = pruned.get("metrics", {}).get(name)
        if p is not None:
            rows.append((name, f"{b:.4f}", f"{p:.4f}", f"{p - b:+.4f}"))
    return rows


def int8_rows(report: Mapping[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """``(model, precision, size, latency, metric, speed-up)`` rows of a report's ``int8``
    section (FP32 / INT8 x base / pruned, timed together in the deploy runtime; the speed-up
    against the FP32 base model); none without one. An INT8 model whose every layer was kept in
    FP32 says so in its precision cell (:func:`~autoprune.flow.precision.int8_label`)."""
    section = report.get("int8")
    if not isinstance(section, Mapping):
        return []
    ms = (section.get("latency") or {}).get("ms") or {}
    base_ms = ms.get("baseline_fp32") or next(iter(ms.values()), None)
    metric = section.get("metric")
    rows = []
    for side in ("baseline", "pruned"):
        if side not in section:
            continue
        for key, precision, figures in (
                ("fp32", "FP32", (section.get("fp32") or {}).get(side) or {}),
                ("int8", int8_label(section[side]), section[side])):
            t = ms.get(f"{side}_{key}")
            value = (figures.get("metrics") or {}).get(metric) if metric else None
            rows.append((side, precision, f"{figures.get('size_mb', 0):.2f} MB",
                         "n/a" if t is None else f"{t:.2f} ms",
                         "n/a" if value is None else f"{value:.4f}",
                         "n/a" if t is None or not base_ms else f"{base_ms / t:.2f}x"))
    return rows


def int8_lines(report: Mapping[str, Any]) -> list[str]:
    """What the ``int8`` section says in words: where it was timed, the layers kept in FP32,
    the CPU and the verdicts."""
    section = report.get("int8")
    if not isinstance(section, Mapping):
        return []
    setting = (section.get("latency") or {}).get("setting") or {}
    quant = section.get("quantization") or {}
    how = [" ".join(str(quant[k]) for k in ("format", "types") if quant.get(k))]
    how += [f"{k.replace('_', '-')} {quant[k]}" for k in ("per_channel", "reduce_range", "preset")
            if quant.get(k) is not None]
    images = (quant.get("calibration") or {}).get("images")
    if images:
        how.append(f"{quant.get('method') or 'its'} calibration on {images} train images")
    lines = [f"INT8 timed in {describe(setting, with_input=False)}; {', '.join(how)}"]
    if quant.get("cpu_summary"):
        lines.append(f"CPU: {quant['cpu_summary']}")
    for side in ("baseline", "pruned"):
        kept = (section.get(side) or {}).get("excluded") or []
        if kept:
            lines.append(f"{side}: {len(kept)} node(s) kept in FP32: "
                         f"{', '.join(kept[:6])}{', ...' if len(kept) > 6 else ''}")
    lines += list(section.get("verdicts") or [])
    return lines


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


def recipe_line(report: Mapping[str, Any]) -> str:
    """How the pruned model was retrained (report ``recipe``), e.g. ``plain fine-tuning`` or
    ``distillation from the unpruned model (alpha 0.5, T 4), pruned in 3 steps``; empty for a
    report without a recipe."""
    recipe = report.get("recipe")
    if not isinstance(recipe, Mapping):
        return ""
    parts = []
    distill = recipe.get("distill")
    if isinstance(distill, Mapping) and distill.get("description"):  # a task's own method
        parts.append(str(distill["description"]))
    elif isinstance(distill, Mapping) and "alpha" not in distill:  # a report of before
        parts.append("distillation from the unpruned model (" + ", ".join(
            f"{k} {v}" for k, v in distill.items()) + ")")
    elif isinstance(distill, Mapping):
        parts.append(f"distillation from the unpruned model (alpha {distill.get('alpha'):g}, "
                     f"T {distill.get('temperature'):g})")
    steps = recipe.get("prune_steps") or 1
    if steps > 1:
        parts.append(f"pruned in {steps} steps")
    return ", ".join(parts) or "plain fine-tuning, pruned in one step"


def to_markdown(report: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table, then the target against what was achieved, then the
    retraining recipe."""
    lines = ["| | baseline | pruned | change |", "|---|---:|---:|---:|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _rows(report)]
    targets = target_rows(report)
    if targets:
        lines += ["", "| target | asked | achieved |", "|---|---:|---:|"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in targets]
    recipe = recipe_line(report)
    if recipe:
        lines += ["", f"Retraining: {recipe}."]
    start = start_line(report)
    if start:
        lines += ["", f"Starting weights: {start}."]
    analysis = analysis_line(report.get("sensitivity_analysis"))
    if analysis:
        lines += ["", f"Sensitivity analysis: {analysis}."]
    runtime = runtime_line(report)
    if runtime:
        lines += ["", f"Note: {runtime}."]
    data = report.get("data")
    if data:
        lines += ["", f"Data: {data}."]
    precision = int8_rows(report)
    if precision:
        lines += ["", "| model | precision | size | latency | metric | vs FP32 base |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += ["| " + " | ".join(r) + " |" for r in precision]
        lines += [""] + [f"- {line}" for line in int8_lines(report)]
    return "\n".join(lines) + "\n"


def runtime_line(report: Mapping[str, Any]) -> str:
    """Where a run's ONNX Runtime row says the pruned model ran slower than the unpruned one
    and the run did not round the channels (its ``round_to`` unset or 1; ``autoprune report``
    does not know, and says nothing): why, and the setting that fixes it (ONNX Runtime's fast
    convolutions want multiples of 8 channels: resnet18 at 32 px pruned to -30 % FLOPs ran
    +57 % slower there, 27 % faster with ``round_to=8``); empty otherwise."""
    timed = (report.get("latency_paired") or {}).get("onnxruntime")
    reduction = timed.get("reduction") if isinstance(timed, Mapping) else None
    if "round_to" not in report or report["round_to"] not in (None, 1) or \
            not isinstance(reduction, (int, float)) or isinstance(reduction, bool) or \
            reduction > -0.02:
        return ""
    return (f"ONNX Runtime ran the pruned model {-100 * reduction:.1f} % slower: its fast "
            f"convolutions want channel counts in multiples of 8, which this run did not "
            f"keep; prune with round_to=8 (CLI --round-to 8)")


def whole_number(value: Any) -> bool:
    """True for an int that is not a bool (what a count read from a file must be)."""
    return isinstance(value, int) and not isinstance(value, bool)


def analysis_summary(extra: Any) -> dict[str, Any] | None:
    """How a sensitivity file was measured, from its ``extra`` (a report keeps it as
    ``sensitivity_analysis``): the adaptive analysis's target (None: every point on every
    image), the evaluation mode, the images evaluated and the points decided early; None where
    the file does not say (a file from an older release, a converted one)."""
    evaluation = extra.get("evaluation") if isinstance(extra, Mapping) else None
    if not isinstance(evaluation, Mapping):
        return None

    def count(key: str) -> int | None:
        return evaluation.get(key) if whole_number(evaluation.get(key)) else None

    mode = evaluation.get("mode")
    mode = mode if mode in ("adaptive", *EVALUATIONS) else "prune"  # words autoprune writes
    adaptive = extra.get("adaptive")  # (kept by a full analysis that completed the file later)
    target = adaptive.get("target") if isinstance(adaptive, Mapping) else None
    adaptive_target = dict(target) if mode == "adaptive" and isinstance(target, Mapping) and \
        len(target) == 1 and all(k in TARGETS and isinstance(v, (int, float)) and
                                 not isinstance(v, bool) for k, v in target.items()) else None
    return {"adaptive_target": adaptive_target, "mode": mode,
            "images_evaluated": count("images_evaluated"),
            "points_decided_early": count("points_as_intervals")}


def analysis_line(summary: Any) -> str:
    """:func:`analysis_summary` in words, e.g. ``adaptive, for flops=0.4, 8,648 images
    evaluated, 13 points decided early``; empty where there is none."""
    if not isinstance(summary, Mapping):
        return ""
    target = summary.get("adaptive_target")
    if isinstance(target, Mapping) and len(target) == 1:
        (kind, value), = target.items()
        parts = [f"adaptive, for {kind}={value}"]
    elif summary.get("mode") == "adaptive":
        parts = ["adaptive"]
    else:
        parts = [f"every point on every image ({summary.get('mode', 'prune')} evaluation)"]
    for key, noun, words in (("images_evaluated", "image", "evaluated"),
                             ("points_decided_early", "point", "decided early")):
        value = summary.get(key)
        if whole_number(value) and value:
            parts.append(f"{counted(value, noun)} {words}")
    return ", ".join(parts)


def start_line(report: Mapping[str, Any]) -> str:
    """Where the base model's starting weights came from, in words (empty when it started from
    random weights or the report does not say)."""
    start = report.get("start_weights")
    if not isinstance(start, Mapping):
        return ""
    where = f" ({start['url']})" if start.get("url") else ""
    digest = f", sha256 {str(start['sha256'])[:12]}" if start.get("sha256") else ""
    return f"{start.get('source')} {start.get('id')}{where}: {start.get('file')}{digest}"


def printable(text: object) -> str:
    """``text`` safe to print on a terminal: every character that is not printable (escape
    sequences, other control characters, bidirectional overrides...) written as its Python
    escape (``\\x1b``, ``\\u202e``), so a file cannot drive the terminal it is shown on."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def to_console(report: Mapping[str, Any]) -> str:
    """The comparison as an aligned plain-text table (the target's rows last: what, asked,
    achieved), each line :func:`printable` (a report holds what data and checkpoint files
    say)."""
    return "\n".join(printable(line) for line in _console_lines(report))


def _console_lines(report: Mapping[str, Any]) -> list[str]:
    rows = [("", "baseline", "pruned", "change")] + _rows(report)
    targets = [(f"target: {a}", b, c, "") for a, b, c in target_rows(report)]
    widths = [max(len(r[i]) for r in rows + targets) for i in range(4)]
    fmt = lambda r: "  ".join([r[0].ljust(widths[0])]
                              + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
    lines = [fmt(rows[0]), "-" * (sum(widths) + 6)] + [fmt(r) for r in rows[1:]]
    if targets:
        lines += ["-" * (sum(widths) + 6), fmt(("", "asked", "achieved", ""))]
        lines += [fmt(r) for r in targets]
    recipe = recipe_line(report)
    if recipe:
        lines.append(f"retraining: {recipe}")
    start = start_line(report)
    if start:
        lines.append(f"starting weights: {start}")
    analysis = analysis_line(report.get("sensitivity_analysis"))
    if analysis:
        lines.append(f"sensitivity analysis: {analysis}")
    runtime = runtime_line(report)
    if runtime:
        lines.append(f"note: {runtime}")
    precision = int8_rows(report)
    if precision:
        head = ("model", "precision", "size", "latency", "metric", "vs FP32 base")
        widths = [max(len(r[i]) for r in [head] + precision) for i in range(6)]
        line = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(r, widths)))
        lines += ["-" * (sum(widths) + 10), line(head)] + [line(r) for r in precision]
        lines += int8_lines(report)
    return lines


def to_csv(report: Mapping[str, Any]) -> str:
    """The comparison as CSV (``metric,baseline,pruned,change``); a target's rows read
    ``target: <what>,<asked>,<achieved>,`` (asked in the baseline column)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["metric", "baseline", "pruned", "change"])
    writer.writerows(_rows(report))
    writer.writerows((f"target: {a}", b, c, "") for a, b, c in target_rows(report))
    for model, precision, size, latency, metric, speedup in int8_rows(report):
        writer.writerow([f"{model} {precision}: size, latency, metric, vs FP32 base", size,
                         latency, f"{metric} ({speedup})"])
    return buf.getvalue()


def write_reports(report: Mapping[str, Any], save_dir: str | Path) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``report.csv`` into ``save_dir``."""
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": save_dir / "report.json", "md": save_dir / "report.md",
             "csv": save_dir / "report.csv"}
    write_text_atomic(paths["json"], json.dumps(report, indent=2))  # a crash leaves whole files
    write_text_atomic(paths["md"], to_markdown(report))
    write_text_atomic(paths["csv"], to_csv(report))
    return paths
