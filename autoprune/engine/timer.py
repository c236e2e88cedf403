"""Paired timing and the setting it is recorded with: :class:`PairedTimer` times models against
an unpruned one in alternating rounds, :func:`latency_setting` says where and how (device, threads,
batch, input, clock, processor, runtime, precision).

A point is never timed alone: :class:`PairedTimer` alternates rounds of the unpruned model and the
pruned one (warm-up first, the fastest of a few runs per round) and keeps the median of the
per-round ratios ``pruned / unpruned``. Load that rises or falls during a run slows both sides of
a round alike, so the ratio stays put; a point's milliseconds are that ratio x the run's baseline
median. With one CPU thread the thread's CPU time is timed instead of wall time: on a shared
machine the waits for other processes then drop out too (measured on two busy cores: a point's
spread fell from about 10 % to about 1 % of the latency).

Timings are taken in a *runtime* (:mod:`autoprune.engine.runtimes`): ``"torch"`` (eager, the
default), ``"onnxruntime"`` or ``"openvino"``; for the latter two each model is exported to ONNX
as ``autoprune export`` would and run by the runtime (the unpruned model is exported once per
timer), as FP32 or, with ``precision="int8"``, as the runtime's static INT8 quantization. The
runtime and the precision are part of the recorded setting: a table timed in another runtime or
precision is refused like one timed on another device (a table recorded before they existed counts
as torch's, FP32).
"""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.nn as nn

from ..errors import ConfigError
from .measure import flush_denormals, timed_runs, to_device, warm_allocator
from .fast_copy import fast_deepcopy
from .runtimes import ExportCache, Runner, compile_model, onnx_model, runtime_setting
from .timing import check_latency_options, check_precision

_clock = time.perf_counter      # wall time (a test drives these two)
_cpu_clock = time.thread_time   # this thread's CPU time: one CPU thread on a shared machine
# what must match between the table and the allocation (torch's version may differ)
SAME_SETTING = ("device", "threads", "batch", "input_size", "hardware", "runtime", "precision")
# what a setting recorded before the field existed means
SETTING_DEFAULTS = {"runtime": "torch", "precision": "fp32"}


def timed_inputs(example_inputs: Any, batch: int) -> Any:
    """``example_inputs`` with every tensor's first sample repeated ``batch`` times."""
    if isinstance(example_inputs, torch.Tensor):
        first = example_inputs[:1]
        return first.repeat(batch, *([1] * (first.dim() - 1))) if first.dim() else example_inputs
    if isinstance(example_inputs, Mapping):
        return {k: timed_inputs(v, batch) for k, v in example_inputs.items()}
    if isinstance(example_inputs, (tuple, list)):
        return type(example_inputs)(timed_inputs(v, batch) for v in example_inputs)
    return example_inputs


def input_shape(inputs: Any) -> Any:
    """The shape(s) of the timed input: ``[1, 3, 64, 64]``, or a list / dict of them."""
    if isinstance(inputs, torch.Tensor):
        return list(inputs.shape)
    if isinstance(inputs, Mapping):
        return {str(k): input_shape(v) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return [input_shape(v) for v in inputs]
    return None


def hardware_name(device: str) -> str:
    """The processor (``device="cpu"``) or GPU the timings are taken on, in words."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def latency_setting(example_inputs: Any, *, device: Any = "cpu", threads: int | None = None,
                    batch: int = 1, runtime: str = "torch", precision: str = "fp32",
                    **more: Any) -> dict[str, Any]:
    """Where and how latency is timed (recorded with a table as ``extra.latency``): device,
    threads (CPU; None means torch's current number), batch, input_size (the timed input's
    shape), the clock, torch version, the processor's or GPU's name, the ``runtime``
    (``"torch"``, ``"onnxruntime"``, ``"openvino"``) and the runtime's own setting
    (``runtime_setting``: version, providers, graph optimisation, opset, threads...), the
    ``precision`` timed, and any field a :class:`Timing` subclass adds (``more``), as given."""
    device = check_latency_options(device, threads, batch, runtime, precision)
    cpu = device == "cpu"
    threads = (threads or torch.get_num_threads()) if cpu else None
    # one thread: ONNX Runtime (intra_op_num_threads=1) and OpenVINO run every kernel on the
    # calling thread too (measured: thread CPU time = wall = process CPU time), so the thread's
    # CPU time is valid for every runtime
    return {"device": device, "threads": threads, "batch": int(batch),
            "input_size": input_shape(timed_inputs(example_inputs, batch)),
            "clock": "thread cpu time" if threads == 1 else "wall",
            "torch": torch.__version__, "hardware": hardware_name(device),
            "runtime": runtime, "precision": check_precision(precision, runtime),
            "runtime_setting": runtime_setting(runtime, threads, device, precision=precision),
            **more}


def setting_value(setting: Mapping[str, Any] | None, key: str) -> Any:
    """``setting[key]``, a field missing from an older table read as its meaning then (a table
    without ``runtime`` was timed in torch eager)."""
    setting = setting or {}
    value = setting.get(key)
    return SETTING_DEFAULTS.get(key) if value is None else value


def setting_differences(stored: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> str:
    """What differs between a table's latency setting and the one asked for ("" if nothing)."""
    return ", ".join(f"{k} {setting_value(stored, k)!r} (asked: {setting_value(wanted, k)!r})"
                     for k in SAME_SETTING
                     if setting_value(stored, k) != setting_value(wanted, k))


def describe(setting: Mapping[str, Any], with_input: bool = True) -> str:
    """A setting in words: ``cpu, 1 thread, batch 1, input [1, 3, 64, 64]`` (``, onnxruntime``
    added when timed in another runtime than torch eager)."""
    threads = setting.get("threads")
    where = setting.get("device", "?") + (f", {threads} thread{'s' if threads != 1 else ''}"
                                          if threads else "")
    shape = f", input {setting.get('input_size')}" if with_input else ""
    runtime = setting_value(setting, "runtime")
    where_run = "" if runtime == "torch" else f", {runtime}"
    precision = setting_value(setting, "precision")
    as_ = "" if precision == "fp32" else f", {precision}"
    return f"{where}, batch {setting.get('batch')}{shape}{where_run}{as_}"


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class PairedTimer:
    """Times models against an unpruned ``model`` on one device, in alternating rounds.

    ``compare(candidate)`` returns ``candidate``'s latency over the unpruned model's. Each of
    ``rounds`` times both (the fastest of ``runs`` passes each: noise on a shared machine only ever
    slows a pass down), the order alternating from round
    to round; the ratio of two neighbouring rounds' sums (order AB BA: a steady drift of the load
    weighs on both alike) is taken for each neighbouring pair, and their median returned.
    ``baseline_ms`` is the median of every unpruned round. On a CPU with one thread the clock is
    the thread's CPU time (what a quiet machine's wall clock shows; time the process spends
    waiting while other processes run is not counted), else wall time (synchronised on a GPU).

    ``runtime`` other than ``"torch"``: both models are exported to ONNX and timed as the runtime
    runs them (:func:`~autoprune.engine.runtimes.compile_model`); the unpruned model is exported
    and loaded once, on the first comparison, and kept; a candidate's graph is reused while the
    same model is compared again (``exports`` counts the exports).
    """

    def __init__(self, model: nn.Module, example_inputs: Any, *, device: Any = "cpu",
                 threads: int | None = None, batch: int = 1, rounds: int = 5, runs: int = 3,
                 warmup: int = 3, runtime: str = "torch", precision: str = "fp32",
                 **more: Any):
        self.setting = latency_setting(example_inputs, device=device, threads=threads,
                                       batch=batch, runtime=runtime, precision=precision, **more)
        self.runtime = self.setting["runtime"]
        self.precision = self.setting["precision"]
        self.device = torch.device(self.setting["device"])
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.threads = self.setting["threads"]
        self.rounds, self.runs, self.warmup = rounds, runs, warmup
        self.inputs = to_device(timed_inputs(example_inputs, batch), self.device)
        self.base = fast_deepcopy(model).to(self.device).eval()
        self.base_rounds: list[float] = []
        self.last_ratios: list[float] = []
        self._base_runner: Runner | None = None  # the unpruned model in the runtime, once
        self._exports = ExportCache()
        self._quantizer: Any = None  # INT8: calibrated on the unpruned model, its ranges reused
        flush_denormals()
        warm_allocator()  # a fresh process times like one that has run for a while

    @property
    def exports(self) -> int:
        """How many models were exported to ONNX for the runtime (0 in torch eager)."""
        return self._exports.exports + (self._base_runner is not None)

    def _clock(self) -> Callable[[], float]:
        return _cpu_clock if self.setting["clock"] != "wall" else _clock

    def _time(self, model: nn.Module, n: int) -> float:
        # the fastest pass, not the median: on the 2-core VM one pruned mobilenetv3 at 224 px
        # measured -25 to -50 % with medians (a slow period corrupts a whole round), -25 to
        # -33 % with minima, over the same ten comparisons
        return min(timed_runs(model, self.inputs, n, device=self.device, clock=self._clock()))

    def _time_runner(self, runner: Runner, n: int) -> float:
        clock = self._clock()
        times = []
        for _ in range(n):
            start = clock()
            runner()
            times.append((clock() - start) * 1000.0)
        return min(times)

    def _runner(self, model: nn.Module) -> Runner:
        if self.precision == "int8" and self._quantizer is None:
            from .int8.quantizer import Int8Quantizer

            self._quantizer = Int8Quantizer(
                [_positional_inputs(self.inputs)],
                source="the timed input, ranges of the unpruned model reused (the scales do not "
                       "change which kernels run)")
        compile_ = lambda onnx=None: compile_model(model, self.inputs, runtime=self.runtime,
                                                   device=self.device, threads=self.threads,
                                                   onnx=onnx, precision=self.precision,
                                                   quantizer=self._quantizer)
        if model is self.base:
            if self._base_runner is None:
                self._base_runner = compile_()
            return self._base_runner
        data = self._exports.get(model, lambda: onnx_model(model, self.inputs,
                                                          runtime=self.runtime))
        return compile_(data)

    def _paired(self, time_base: Callable[[int], float], time_pruned: Callable[[int], float]
                ) -> tuple[list[float], list[float]]:
        base, pruned = [], []
        time_base(self.warmup)
        time_pruned(self.warmup)
        for i in range(self.rounds):
            first, second = (time_base, time_pruned) if i % 2 == 0 else (time_pruned, time_base)
            a, b = first(self.runs), second(self.runs)
            base.append(a if i % 2 == 0 else b)
            pruned.append(b if i % 2 == 0 else a)
        return base, pruned

    def compare(self, candidate: nn.Module) -> float:
        """``candidate``'s latency / the unpruned model's, timed in pairs (see the class)."""
        on_device = next(candidate.parameters(), torch.empty(0)).device == self.device
        model = candidate if on_device else fast_deepcopy(candidate).to(self.device)
        was_training = model.training
        model.eval()
        try:
            if self.runtime == "torch":
                # no_grad, not inference_mode: a layer that caches tensors in its forward (a
                # YOLO head's anchors) is timed in place and must stay usable for training
                with _threads(self.threads), torch.no_grad():
                    base, pruned = self._paired(lambda n: self._time(self.base, n),
                                                lambda n: self._time(model, n))
            else:
                with torch.no_grad():
                    base_runner = self._runner(self.base)
                    runner = base_runner if model is self.base else self._runner(model)
                base, pruned = self._paired(lambda n: self._time_runner(base_runner, n),
                                            lambda n: self._time_runner(runner, n))
                del runner  # its session's memory, now
        finally:
            model.train(was_training)
        self.base_rounds += base
        # two neighbouring rounds (unpruned-pruned, pruned-unpruned) see a steady drift alike
        pairs = range(len(base) - 1) if len(base) > 1 else [None]
        ratios = [pruned[0] / base[0] if i is None else
                  (pruned[i] + pruned[i + 1]) / (base[i] + base[i + 1]) for i in pairs]
        self.last_ratios = ratios  # the spread of the last comparison
        return statistics.median(ratios)

    @property
    def baseline_ms(self) -> float:
        """The median of every unpruned round timed so far (a few are timed if none were)."""
        if not self.base_rounds:
            self.compare(self.base)
        return statistics.median(self.base_rounds)


def _positional_inputs(inputs: Any) -> tuple:
    """The timed inputs as the positional tuple an exported model takes."""
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


REPORT_ROUNDS_ENV = "AUTOPRUNE_REPORT_ROUNDS"


def report_rounds(default: int = 15) -> int:
    """The paired rounds a report's before/after timing takes: ``default``, or the whole number
    in ``$AUTOPRUNE_REPORT_ROUNDS`` (fewer for a quick look, as the test suite does; more on a
    noisy machine). Timings that choose ratios (sensitivity points, candidate allocations) keep
    their own rounds. A value that is not a positive whole number is a one-line ConfigError."""
    value = os.environ.get(REPORT_ROUNDS_ENV, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{REPORT_ROUNDS_ENV}={value!r} must be a positive whole number such "
                          f"as 15: set it so or unset it")
    return int(value)


REPORT_RUNTIMES_ENV = "AUTOPRUNE_REPORT_RUNTIMES"
REPORT_RUNTIMES = ("torch", "onnxruntime")


def report_runtimes() -> tuple[str, ...]:
    """Where a report times the two models: eager torch, and ONNX Runtime as the task deploys
    the model when onnxruntime is installed (both by default); ``$AUTOPRUNE_REPORT_RUNTIMES=torch``
    leaves the ONNX Runtime row out (two exports and sessions less per run: a quick look, or the
    test suite). Another value is a one-line ConfigError."""
    value = os.environ.get(REPORT_RUNTIMES_ENV, "").strip()
    if not value:
        return REPORT_RUNTIMES
    named = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if "torch" not in named or not set(named) <= set(REPORT_RUNTIMES):
        raise ConfigError(f"{REPORT_RUNTIMES_ENV}={value!r} must be 'torch' or "
                          f"'torch,onnxruntime': set it so or unset it")
    return named


def paired_reduction(baseline: nn.Module, pruned: nn.Module, example_inputs: Any, *,
                     device: Any = "cpu", threads: int | None = None, batch: int = 1,
                     rounds: int | None = None, runtime: str = "torch", precision: str = "fp32",
                     **more: Any) -> dict[str, Any]:
    """How much faster ``pruned`` is than ``baseline`` (timed in ``rounds`` pairs, see
    :class:`PairedTimer`, in ``runtime``; None: :func:`report_rounds`, 15): ``{"reduction",
    "baseline_ms", "pruned_ms", "setting", "reduction_range", "rounds"}``, the range being the
    least and the most of the neighbouring round pairs' reductions."""
    rounds = report_rounds() if rounds is None else rounds
    timer = PairedTimer(baseline, example_inputs, device=device, threads=threads, batch=batch,
                        rounds=rounds, runtime=runtime, precision=precision, **more)
    relative = timer.compare(pruned)
    spread = timer.last_ratios or [relative]
    return {"reduction": 1.0 - relative, "baseline_ms": timer.baseline_ms,
            "pruned_ms": relative * timer.baseline_ms, "setting": timer.setting,
            "reduction_range": [1.0 - max(spread), 1.0 - min(spread)], "rounds": timer.rounds}
