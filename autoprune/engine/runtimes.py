"""Deploy runtimes for latency: a model timed as ONNX Runtime (or OpenVINO) runs it, not only in
PyTorch eager.
(over 400 lines: ONNX Runtime and OpenVINO behind one interface, each small.)

A runtime is named by a string: ``"torch"`` (eager, the default), ``"onnxruntime"`` (the CPU
execution provider; TensorRT / CUDA providers first when they are installed and the latency device
is ``cuda``) or ``"openvino"`` (its CPU plugin; optional, imported only when asked). For a runtime
other than torch the model is exported to ONNX in memory with the settings of
:func:`autoprune.engine.checkpoint.export_onnx` (what ``autoprune export`` writes: opset 17, a
dynamic batch axis, inputs ``input``/``input0``..., outputs ``output``/``output0``..., the
outputs' shapes declared), on the timed batch, and loaded into the runtime with its session
options recorded (:func:`runtime_setting`).

Clocks (measured on the 2-core VM, 2026-11-25): with ``intra_op_num_threads=1`` ONNX Runtime makes
no thread of its own and runs every kernel on the calling thread (thread CPU time = wall time =
process CPU time per pass); OpenVINO with ``INFERENCE_NUM_THREADS=1`` also computes on the calling
thread (its two helper threads stay idle). So, as in eager, one thread is timed by the thread's
CPU time and more threads by wall time (``clock`` in the setting).

Precision: ``precision="int8"`` runs the model as the runtime's static INT8 quantization of that
export (:mod:`autoprune.engine.int8`: ONNX Runtime's quantizer, QDQ, per-channel int8 weights;
OpenVINO through NNCF), calibrated by the ``quantizer`` given (one :class:`~autoprune.engine.int8.
Int8Quantizer` for many models: it calibrates the first and reuses its ranges) or, without one, on
the timed input itself (the scales do not change which kernels run, so the timing holds; the
accuracy of such a model is not the shipped one's).
"""
from __future__ import annotations

import functools
import importlib
import io
import re
import warnings
from typing import Any, Callable

import torch
import torch.nn as nn

from ..errors import ConfigError
from .checkpoint import declare_output_shapes, io_names
from .data import tensors_in

RUNTIMES = ("torch", "onnxruntime", "openvino")
OPSET = 17  # autoprune.engine.checkpoint.export_onnx's default
_PACKAGES = {"onnxruntime": "onnxruntime", "openvino": "openvino"}
_GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
_FIX = "time it with latency_runtime='torch'"


def _module(name: str) -> Any:
    """The runtime's Python package, or a one-line ConfigError naming the pip command."""
    try:
        if name == "openvino":  # with Intel's usage telemetry declined
            from .int8.openvino import import_without_telemetry

            return import_without_telemetry(_PACKAGES[name])
        return importlib.import_module(_PACKAGES[name])
    except ImportError:
        extra = " (onnxruntime-gpu for CUDA)" if name == "onnxruntime" else ""
        raise ConfigError(f"latency_runtime={name!r} needs the {_PACKAGES[name]} package, which "
                          f"is not installed: pip install {_PACKAGES[name]}{extra}, or pass "
                          f"latency_runtime='torch'") from None


def check_runtime(name: Any, device: Any = "cpu") -> str:
    """Refuse an unknown runtime, one whose package is missing, or one that cannot time on
    ``device`` (one-line ConfigError); returns the runtime's name."""
    if not isinstance(name, str) or name not in RUNTIMES:
        raise ConfigError(f"latency_runtime={name!r} is not a runtime: pick from "
                          f"{', '.join(repr(r) for r in RUNTIMES)}")
    if name == "torch":
        return name
    module = _module(name)
    cuda = torch.device(device).type == "cuda"
    if name == "onnxruntime" and cuda and not _ort_gpu_providers(module):
        raise ConfigError(f"latency_runtime='onnxruntime' with latency_device={str(device)!r} "
                          f"needs ONNX Runtime's CUDA or TensorRT provider (this install has "
                          f"{', '.join(module.get_available_providers())}): pip install "
                          f"onnxruntime-gpu, or pass latency_device='cpu'")
    if name == "openvino" and cuda:
        raise ConfigError("latency_runtime='openvino' times on the CPU only: pass "
                          "latency_device='cpu'")
    return name


def _ort_gpu_providers(ort: Any) -> list[str]:
    available = set(ort.get_available_providers())
    return [p for p in _GPU_PROVIDERS if p in available]


def _ort_providers(ort: Any, device: str) -> list[str]:
    if torch.device(device).type == "cuda":
        return _ort_gpu_providers(ort) + ["CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


@functools.lru_cache(maxsize=1)
def _ov_core() -> Any:
    return _module("openvino").Core()


def _ov_config(threads: int | None) -> dict[str, Any]:
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    return config


def runtime_setting(name: str, threads: int | None, device: Any = "cpu",
                    precision: str = "fp32", quantize: Any = None) -> dict[str, Any]:
    """What is recorded with timings taken in runtime ``name`` (``extra.latency.runtime_setting``):
    the runtime and its version, and for ONNX Runtime the providers, graph optimisation level,
    execution mode, opset and intra/inter-op threads; for OpenVINO its device, threads, streams,
    performance hint and inference precision. ``precision="int8"`` adds ``precision`` and
    ``quantization``: the record of ``quantize`` (an ``Int8Quantizer``, ``QuantizeSettings`` or a
    record already made; None: the default settings) with the CPU's INT8 features."""
    name = check_runtime(name, device)
    setting = _runtime_setting(name, threads, device)
    if _precision(precision, name) == "int8":
        setting.update(precision="int8", quantization=quantization_record(name, quantize))
    return setting


def _precision(precision: Any, runtime: str) -> str:
    from .int8.settings import check_precision
    return check_precision(precision, runtime)


def quantization_record(runtime: str, quantize: Any = None) -> dict[str, Any]:
    """The INT8 record of ``quantize`` (an ``Int8Quantizer``, ``QuantizeSettings``, a record
    mapping, or None: the default settings) for ``runtime``."""
    from .int8.quantizer import Int8Quantizer
    from .int8.settings import QuantizeSettings
    if isinstance(quantize, dict):
        return dict(quantize)
    if runtime == "openvino":
        from .int8.openvino import openvino_record
        if not isinstance(quantize, Int8Quantizer):
            quantize = Int8Quantizer(None, quantize)
        return openvino_record(quantize)
    if isinstance(quantize, Int8Quantizer):
        return quantize.record()
    return (quantize or QuantizeSettings()).record()


def _runtime_setting(name: str, threads: int | None, device: Any) -> dict[str, Any]:
    if name == "torch":
        return {"runtime": "torch", "version": torch.__version__, "threads": threads}
    device = str(device)
    if name == "onnxruntime":
        ort = _module(name)
        return {"runtime": name, "version": ort.__version__,
                "providers": _ort_providers(ort, device), "graph_optimization": "ORT_ENABLE_ALL",
                "execution_mode": "sequential", "opset": OPSET,
                "intra_op_threads": threads or 0, "inter_op_threads": 1,
                "inputs": "numpy arrays prepared once; session.run(None, feeds)"}
    ov = _module(name)
    core = _ov_core()
    try:
        precision = str(core.get_property("CPU", "INFERENCE_PRECISION_HINT"))
        precision = (re.findall(r"'(\w+)'", precision) or [precision])[0]  # "<Type: 'f32'>"
    except Exception:  # noqa: BLE001 - an older OpenVINO without the property
        precision = "unknown"
    return {"runtime": name, "version": ov.__version__, "device": "CPU", "opset": OPSET,
            **{k.lower(): v for k, v in _ov_config(threads).items()},
            "inference_precision": precision}


# ---- export ------------------------------------------------------------------------------------

def _positional(example_inputs: Any, runtime: str) -> tuple:
    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) \
        else (example_inputs,)
    if not args or not all(torch.is_tensor(a) for a in args):
        raise ConfigError(f"latency_runtime={runtime!r} needs the example inputs as a tensor or "
                          f"a tuple of tensors (the model's positional inputs), not "
                          f"{type(example_inputs).__name__}: {_FIX}")
    return args


def _one_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    text = lines[0] if lines else type(e).__name__
    return text if len(text) <= 240 else text[:237] + "..."


def export_error(e: BaseException, runtime: str = "onnxruntime",
                 opset: int = OPSET) -> ConfigError:
    """A one-line ConfigError for an export that failed, naming the operator when the exporter
    said which."""
    text = str(e)
    op = re.search(r"operator '([^']+)'", text)
    if op:
        why = f"the operator {op.group(1)} does not export to ONNX (opset {opset})"
    else:
        why = f"the ONNX export failed ({type(e).__name__}: {_one_line(e)})"
    return ConfigError(f"latency_runtime={runtime!r} cannot time this model: {why}; {_FIX}")


def onnx_model(model: nn.Module, example_inputs: Any, *, opset: int = OPSET,
               dynamic_batch: bool = True, runtime: str = "onnxruntime") -> bytes:
    """``model`` (in eval mode; its mode is kept) as ONNX bytes, exported in memory the way
    :func:`autoprune.engine.checkpoint.export_onnx` writes a file: the same opset, names, dynamic
    batch axis and declared output shapes; the example's batch is the timed one. An export that
    fails is a one-line ConfigError naming the operator."""
    args = _positional(example_inputs, runtime)
    was_training = model.training
    model.eval()
    buffer = io.BytesIO()
    try:
        with torch.no_grad():
            shapes = [tuple(t.shape) for t in tensors_in(model(*args))]
            inputs, outputs = io_names("input", len(args)), io_names("output", len(shapes))
            axes = {n: {0: "batch"} for n in inputs + outputs} if dynamic_batch else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer warnings: the graph is the timed one
                torch.onnx.export(model, args, buffer, opset_version=opset, dynamo=False,
                                  input_names=inputs, output_names=outputs, dynamic_axes=axes)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the exporter raises many kinds
        raise export_error(e, runtime, opset) from None
    finally:
        model.train(was_training)
    return _declare_output_shapes(buffer.getvalue(), shapes, dynamic_batch)


def _declare_output_shapes(data: bytes, shapes: list[tuple[int, ...]],
                           dynamic_batch: bool) -> bytes:
    """export_onnx's output shapes declared on bytes (without the onnx package: as is)."""
    try:
        import onnx
    except ImportError:
        return data
    if len(data) > 1_900_000_000:
        return data
    return declare_output_shapes(onnx.load_from_string(data), shapes,
                                 dynamic_batch).SerializeToString()


# ---- running ----------------------------------------------------------------------------------

def runtime_error(e: BaseException, runtime: str) -> ConfigError:
    """A one-line ConfigError for a model the runtime refuses, naming the operator (and node)
    when the runtime said which."""
    text = str(e)
    found = re.search(r"implementation for (\w+)\((-?\d+)\) node with name '([^']*)'", text)
    if found:
        why = (f"it has no kernel for the operator {found.group(1)} (opset {found.group(2)}, "
               f"node {found.group(3)!r})")
    elif (found := re.search(r"(\S+?)(?:\((-?\d+)\))? is not a registered function/op", text)):
        why = f"it does not know the operator {found.group(1)}"
    elif (found := re.search(r"[Nn]o conversion rule found for operations?: ([^\n]+)", text)):
        why = f"it does not know the operator(s) {found.group(1).strip()}"
    else:
        why = _one_line(e).replace("[ONNXRuntimeError] : ", "")
    return ConfigError(f"latency_runtime={runtime!r} cannot run this model: {why}; {_FIX}")


class Runner:
    """A model as a runtime runs it, on inputs prepared once: ``runner()`` runs one forward pass
    and returns the outputs (numpy arrays). Built by :func:`compile_model`; ``onnx``: the graph
    run (for INT8 in ONNX Runtime the quantized one), ``precision``: ``"fp32"`` or ``"int8"``."""

    runtime: str
    onnx: bytes
    precision: str = "fp32"

    def __call__(self) -> list[Any]:
        raise NotImplementedError


class OrtRunner(Runner):
    """An ``onnxruntime.InferenceSession`` (``intra_op_num_threads=threads``, one inter-op
    thread, ``ORT_ENABLE_ALL``, sequential execution) and its feeds."""

    runtime = "onnxruntime"

    def __init__(self, data: bytes, args: tuple, *, threads: int | None, device: str = "cpu"):
        ort = _module("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads or 0)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # errors only
        dev = torch.device(device)
        providers: list[Any] = _ort_providers(ort, device)
        if dev.type == "cuda":
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            providers = [(p, {"device_id": index}) if p in _GPU_PROVIDERS else p
                         for p in providers]
        self.onnx = data
        try:
            self.session = ort.InferenceSession(data, options, providers=providers)
            names = [i.name for i in self.session.get_inputs()]
            self.feeds = {n: a.detach().cpu().numpy() for n, a in zip(names, args)}
            self.session.run(None, self.feeds)  # a kernel that fails at run time, now
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types
            raise runtime_error(e, self.runtime) from None

    def __call__(self) -> list[Any]:
        return self.session.run(None, self.feeds)


class OpenVinoRunner(Runner):
    """An OpenVINO model compiled for its CPU plugin (``PERFORMANCE_HINT=LATENCY``, one stream,
    ``INFERENCE_NUM_THREADS=threads``) and an infer request. ``data``: ONNX bytes, or an
    ``openvino.Model`` (an INT8 one from NNCF)."""

    runtime = "openvino"

    def __init__(self, data: Any, args: tuple, *, threads: int | None, device: str = "cpu"):
        core = _ov_core()
        self.onnx = data if isinstance(data, (bytes, bytearray)) else b""
        try:
            model = core.read_model(data) if isinstance(data, (bytes, bytearray)) else data
            compiled = core.compile_model(model, "CPU", _ov_config(threads))
            self.request = compiled.create_infer_request()
            self.feeds = {i: a.detach().cpu().numpy() for i, a in enumerate(args)}
            self.request.infer(self.feeds)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - OpenVINO's own exception types
            raise runtime_error(e, self.runtime) from None

    def __call__(self) -> list[Any]:
        return list(self.request.infer(self.feeds).values())


class TorchRunner(Runner):
    """Eager PyTorch (no_grad) on the example inputs, for a uniform interface."""

    runtime = "torch"

    def __init__(self, model: nn.Module, args: Any):
        self.model, self.args = model, args
        self.onnx = b""

    def __call__(self) -> list[Any]:
        args = self.args
        with torch.no_grad():
            out = (self.model(**args) if isinstance(args, dict) else
                   self.model(*args) if isinstance(args, (tuple, list)) else self.model(args))
        return [t.detach().cpu().numpy() for t in tensors_in(out)]


def compile_model(model: nn.Module, example_inputs: Any, *, runtime: str = "onnxruntime",
                  device: Any = "cpu", threads: int | None = None,
                  onnx: bytes | None = None, precision: str = "fp32",
                  quantizer: Any = None) -> Runner:
    """``model`` on ``example_inputs`` as ``runtime`` runs it (exported by :func:`onnx_model`
    unless ``onnx`` bytes of it, in FP32, are given): a :class:`Runner`. ``precision="int8"``:
    the export quantized statically by the runtime's quantizer, calibrated by ``quantizer`` (an
    :class:`~autoprune.engine.int8.Int8Quantizer`; None: one calibrated on ``example_inputs``,
    for timing). A model the runtime cannot export, quantize or run is a one-line ConfigError
    naming the operator."""
    runtime = check_runtime(runtime, device)
    precision = _precision(precision, runtime)
    if runtime == "torch":
        return TorchRunner(model, example_inputs)
    args = _positional(example_inputs, runtime)
    data = onnx if onnx is not None else onnx_model(model, args, runtime=runtime)
    cls = OrtRunner if runtime == "onnxruntime" else OpenVinoRunner
    if precision == "fp32":
        return cls(data, args, threads=threads, device=str(device))
    from .int8.quantizer import Int8Quantizer
    if quantizer is None:
        quantizer = Int8Quantizer([args], source="the timed input (for timing: the scales do "
                                                 "not change which kernels run)")
    if runtime == "onnxruntime":
        runner = cls(quantizer.quantize(data), args, threads=threads, device=str(device))
    else:
        from .int8.openvino import openvino_int8
        runner = cls(openvino_int8(quantizer, data), args, threads=threads, device=str(device))
    runner.precision = "int8"
    return runner


def output_difference(model: nn.Module, example_inputs: Any, *, runtime: str = "onnxruntime",
                      device: Any = "cpu", runner: Runner | None = None) -> float:
    """The largest absolute difference between ``model``'s eager outputs and the runtime's on
    ``example_inputs`` (what ``autoprune export`` checks)."""
    runner = runner or compile_model(model, example_inputs, runtime=runtime, device=device)
    was_training = model.training
    try:
        eager = TorchRunner(model.eval(), example_inputs)()
    finally:
        model.train(was_training)
    got = runner()
    if len(got) != len(eager):
        raise ConfigError(f"latency_runtime={runtime!r} returned {len(got)} outputs where torch "
                          f"returns {len(eager)}")
    return max((float(abs(a.astype("float64") - b.astype("float64")).max()) if a.size else 0.0
                for a, b in zip(got, eager)), default=0.0)


def structure_key(model: nn.Module) -> tuple:
    """What decides a model's exported graph for timing: its class, its tensors' names and
    shapes, and a checksum of their values (copies pruned alike share it)."""
    with torch.no_grad():
        state = model.state_dict()
        total = sum(float(t.double().sum()) for t in state.values()
                    if torch.is_tensor(t) and t.is_floating_point())
    return (type(model).__qualname__, tuple((k, tuple(t.shape)) for k, t in state.items()
                                            if torch.is_tensor(t)), round(total, 6))


class ExportCache:
    """The last ``size`` exported graphs, by :func:`structure_key`: re-timing a model already
    exported (the confirmations of ``ratios_by_latency``) builds a new session from the same
    bytes instead of exporting again."""

    def __init__(self, size: int = 2):
        self.size, self.items, self.exports = size, {}, 0

    def get(self, model: nn.Module, make: Callable[[], bytes]) -> bytes:
        key = structure_key(model)
        if key in self.items:
            self.items[key] = self.items.pop(key)  # most recent last
            return self.items[key]
        data = make()
        self.exports += 1
        self.items[key] = data
        while len(self.items) > self.size:
            self.items.pop(next(iter(self.items)))
        return data
