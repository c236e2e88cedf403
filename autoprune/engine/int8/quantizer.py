"""Static INT8 quantization by ONNX Runtime's own quantizer (``quant_pre_process`` then
``quantize_static``, QDQ format, int8 per-channel weights), calibrating once and reusing the
activation ranges for pruned variants; and the INT8 file written atomically.
(over 400 lines: calibration, range reuse and the atomic INT8 write share one state.)

Range reuse: ``quantize_static`` takes a calibration cache (``calibration_cache_path``: the
activation ranges by tensor name). The first model a quantizer sees is calibrated on the
caller's images and its ranges kept; a pruned variant of it, exported the same way, names its
tensors alike, so it can be quantized from those ranges without running the calibration again
(a variant with a tensor the ranges lack is calibrated afresh). Activations are quantized per
tensor (one range per tensor, whatever its channel count), so a pruned variant needs no slicing of
them; weight scales are per output channel and the quantizer computes them from the (pruned)
weights themselves, so they need no slicing either.

How close that is (ToyNet 32 px, resnet18 and mobilenetv3_large_100 64 px, random BN statistics,
40 % of every group pruned, 16 probe images): the reused-range INT8 graph has the same nodes as a
freshly calibrated one; its outputs differ from the FP32 model's by 8.5 % of the output range on
resnet18 (fresh: 2.6 %; top-1 agreement 100 % both) but by 86 % on mobilenetv3 (fresh: 3.1 %;
top-1 agreement 81 % against 100 %): pruning moves a hard-swish / squeeze-excite network's
activation ranges. So reused ranges serve *timing* (the scales do not change which kernels run);
every model whose metric counts (the accuracy search, the shipped file) is calibrated on its own
(``fresh=True``), once per model: its ranges are kept by the model's hash and serve its other
quantizations (other layers kept in FP32) without calibrating again.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ...errors import ConfigError
from ..files import atomic_write
from .calibration import calibration_batches, image_count, reader
from .cpu import cpu_features
from .settings import OPSET_MIN, QuantizeSettings

LAYER_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # the layers mixed precision weighs
_FIX = "pass quantize=None to keep the model in FP32"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """ONNX Runtime's quantization tools log warnings and progress on the root logger; silence
    them (errors still raise)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        root.setLevel(level)


def _one_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    text = (lines[0] if lines else type(e).__name__).replace("[ONNXRuntimeError] : ", "")
    return text if len(text) <= 200 else text[:197] + "..."


def quantize_error(e: BaseException, step: str) -> ConfigError:
    """A one-line ConfigError for a model ONNX Runtime could not ``step`` (prepare, calibrate,
    quantize), naming the operator where it said which."""
    text = str(e)
    found = re.search(r"implementation for (\w+)\((-?\d+)\) node with name '([^']*)'", text)
    if found:
        why = f"it has no kernel for the operator {found.group(1)} (node {found.group(3)!r})"
    elif (found := re.search(r"(\S+?)(?:\((-?\d+)\))? is not a registered function/op", text)) \
            or (found := re.search(r"No Op registered for (\w+)", text)):
        why = f"it does not know the operator {found.group(1)}"
    elif found := re.search(r"Unsupported model IR version: (\d+), max supported IR version: "
                            r"(\d+)", text):  # onnx newer than onnxruntime (seen: 1.30 reads 13)
        from onnxruntime import __version__ as ort_version
        return ConfigError(f"ONNX Runtime {ort_version} cannot {step} this model for INT8: its "
                           f"ONNX IR version {found.group(1)} is newer than it reads (up to "
                           f"{found.group(2)}): upgrade onnxruntime (pip install -U onnxruntime), "
                           f"or save the model with ir_version <= {found.group(2)}")
    else:
        why = f"{type(e).__name__}: {_one_line(e)}"
    return ConfigError(f"ONNX Runtime cannot {step} this model for INT8 ({why}): replace the "
                       f"operator or {_FIX}")


def model_opset(model: Any) -> int:
    """The default-domain opset of an ``onnx.ModelProto``."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def load(data: bytes) -> Any:
    """ONNX bytes as a ModelProto (a one-line ConfigError for bytes that are not a model)."""
    import onnx
    try:
        return onnx.load_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise ConfigError(f"the model to quantize is not ONNX ({_one_line(e)}): export it with "
                          f"autoprune export first") from None


def layer_nodes(model: Any) -> list[str]:
    """The names of the nodes mixed precision may keep in FP32: Conv, ConvTranspose, Gemm and
    MatMul, in graph order."""
    return [n.name for n in model.graph.node if n.op_type in LAYER_OPS and n.name]


def output_tail(model: Any) -> list[str]:
    """The nodes between the last layers (Conv / ConvTranspose / Gemm / MatMul) and the graph's
    outputs: what a model does after its last weights (activations, box decoding, the
    concatenation of differently scaled outputs), in graph order."""
    producer = {o: n for n in model.graph.node for o in n.output}
    seen: set[str] = set()
    frontier = [producer[o.name] for o in model.graph.output if o.name in producer]
    while frontier:
        node = frontier.pop()
        if node.name in seen or node.op_type in LAYER_OPS:
            continue
        seen.add(node.name)
        frontier += [producer[i] for i in node.input if i in producer]
    return [n.name for n in model.graph.node if n.name in seen]


def needed_ranges(model: Any) -> set[str]:
    """The activation tensors ONNX Runtime's calibrator would calibrate in ``model`` (a
    preprocessed ModelProto): the float inputs and outputs of every node of a type it quantizes
    (what ``CalibraterBase.select_tensors_to_calibrate`` selects)."""
    from onnx import TensorProto
    ops = quantized_op_types()
    infos = {v.name: v for v in list(model.graph.value_info) + list(model.graph.input)
             + list(model.graph.output)}
    weights = {i.name for i in model.graph.initializer}
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16)
    return {t for n in model.graph.node if n.op_type in ops for t in list(n.input) + list(n.output)
            if t in infos and t not in weights and infos[t].type.HasField("tensor_type")
            and infos[t].type.tensor_type.elem_type in floats}


def quantized_op_types() -> set[str]:
    """The op types ONNX Runtime's static quantizer quantizes (its QDQ and QLinear registries);
    any other stays in float."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry
    return set(QDQRegistry) | set(QLinearOpsRegistry)


def graph_summary(data: bytes, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """What an INT8 graph holds: QuantizeLinear / DequantizeLinear counts, int8 weight tensors,
    and the op types left in float (``float_ops``: types the quantizer does not handle, and the
    nodes of ``exclude``), with their counts."""
    from onnx import TensorProto
    model = load(data)
    nodes = model.graph.node
    handled, kept = quantized_op_types(), set(exclude)
    eight = (TensorProto.INT8, TensorProto.UINT8)
    float_ops = collections.Counter(n.op_type for n in nodes
                                    if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
                                    and (n.op_type not in handled or n.name in kept))
    return {"quantize_linear": sum(n.op_type == "QuantizeLinear" for n in nodes),
            "dequantize_linear": sum(n.op_type == "DequantizeLinear" for n in nodes),
            "int8_weights": sum(i.data_type in eight and len(i.dims) > 1
                                for i in model.graph.initializer),
            "float_ops": dict(sorted(float_ops.items()))}


@contextlib.contextmanager
def _working_folder(folder: str) -> Iterator[None]:
    """Run in ``folder`` (a private temp folder): what a library writes into the working folder
    lands there, not in the user's."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Lru(collections.OrderedDict):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> Any:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
        return value

    def fetch(self, key: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None


class Int8Quantizer:
    """Quantizes ONNX models (bytes) statically with ONNX Runtime, as ``settings`` say, on the
    ``calibration`` images (a tensor, or an iterable of batches: see
    :func:`~autoprune.engine.int8.calibration.calibration_batches`; read on first use, at most
    ``settings.calibration_images`` images, kept in memory).

    The first model is calibrated and its activation ranges kept (``ranges``); later models
    (pruned variants) reuse them (:meth:`quantize`; ``fresh=True``: that model's own ranges,
    calibrated once per model). ``calibrations`` counts the calibrations run, ``reused`` the
    quantizations from the first model's ranges.
    ``source`` says in the record where the images came from."""

    def __init__(self, calibration: Any, settings: QuantizeSettings | None = None, *,
                 features: Mapping[str, Any] | None = None, source: str = "the given batches",
                 keep: int = 4):
        self.features = dict(features or cpu_features())
        self.asked = (settings or QuantizeSettings()).check()
        self.settings = self.asked.resolved(self.features)
        self.source = source
        self.ranges: Any = None  # ONNX Runtime's TensorsData of the first model
        self._own = _Lru(keep)  # each calibrated model's ranges, by its hash
        self.calibrations = self.reused = 0
        self._calibration = calibration
        self._batches: list[dict[str, Any]] | None = None
        self._prepared = _Lru(keep)
        self._done = _Lru(keep)

    # ---- calibration data ----------------------------------------------------------------

    def batches(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The calibration batches as feeds of the inputs ``names`` (read once)."""
        if self._batches is None:
            self._batches = calibration_batches(self._calibration, list(names),
                                                self.settings.calibration_images)
            self._calibration = None  # an iterator is spent; the batches are kept
        first = self._batches[0]
        if list(first) != list(names):  # another model's input names: the same inputs in order
            if len(first) != len(names):
                raise ConfigError(f"the calibration batches hold {len(first)} input(s) where "
                                  f"this model takes {len(names)}")
            return [dict(zip(names, b.values())) for b in self._batches]
        return self._batches

    @property
    def images(self) -> int:
        """How many calibration images were read (0 before the first calibration)."""
        return image_count(self._batches) if self._batches else 0

    # ---- quantizing ------------------------------------------------------------------------

    def prepare(self, fp32_onnx: bytes) -> bytes:
        """``fp32_onnx`` after ONNX Runtime's ``quant_pre_process`` (shape inference and its
        basic graph optimisations: the graph the quantizer and the node names of ``exclude``
        refer to)."""
        key = _sha(fp32_onnx)
        found = self._prepared.fetch(key)
        if found is not None:
            return found
        model = load(fp32_onnx)
        if model_opset(model) < OPSET_MIN:
            raise ConfigError(f"the model's opset {model_opset(model)} is too old for per-channel "
                              f"INT8 (QDQ needs opset {OPSET_MIN} or later): export it with "
                              f"opset_version={OPSET_MIN} or later")
        from onnxruntime.quantization import quant_pre_process
        with tempfile.TemporaryDirectory(prefix="autoprune-int8-") as folder, quiet(), \
                _working_folder(folder):  # ORT's symbolic shape inference, when it gives up,
            src, dst = Path(folder, "fp32.onnx"), Path(folder, "prepared.onnx")  # saves the
            src.write_bytes(fp32_onnx)  # model and a <uuid>.data file into the working folder
            try:
                quant_pre_process(str(src), str(dst))
            except Exception:  # noqa: BLE001 - symbolic shape inference refuses unknown ops
                try:
                    quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
                except Exception as e:  # noqa: BLE001
                    raise quantize_error(e, "prepare") from None
            return self._prepared.put(key, dst.read_bytes())

    def layer_nodes(self, fp32_onnx: bytes) -> list[str]:
        """The Conv / ConvTranspose / Gemm / MatMul node names of the prepared ``fp32_onnx``
        (what ``exclude`` may name), in graph order."""
        return layer_nodes(load(self.prepare(fp32_onnx)))

    def quantize(self, fp32_onnx: bytes, *, exclude: Sequence[str] = (),
                 fresh: bool = False) -> bytes:
        """``fp32_onnx`` quantized (INT8 ONNX bytes), the nodes of ``exclude`` (and the
        settings') kept in FP32. Its activation ranges: its own if it was calibrated before;
        else the first model's when ``fresh`` is False and they cover its tensors; else it is
        calibrated now (and its ranges kept). See the module."""
        sha = _sha(fp32_onnx)
        prepared = self.prepare(fp32_onnx)
        model = load(prepared)
        exclude = self.excluded(model, exclude)
        own = self._own.fetch(sha)
        first = (own is None and not fresh and self.ranges is not None
                 and needed_ranges(model) <= set(self.ranges.keys()))
        key = (sha, exclude, "first" if first else "own")
        found = self._done.fetch(key)
        if found is not None:
            return found
        unknown = sorted(set(exclude) - {n.name for n in model.graph.node})
        if unknown:
            raise ConfigError(f"no node {unknown[0]!r} in the model to keep in FP32: name nodes "
                              f"of the prepared graph (Int8Quantizer.layer_nodes lists them)")
        names = [i.name for i in model.graph.input
                 if i.name not in {w.name for w in model.graph.initializer}]
        data, calibrated = self._run(prepared, names, exclude, self.ranges if first else own)
        if first:
            self.reused += 1
        if calibrated is not None:
            self.calibrations += 1
            self._own.put(sha, calibrated)
            if self.ranges is None:
                self.ranges = calibrated
        return self._done.put(key, data)

    def excluded(self, model: Any, exclude: Sequence[str] = ()) -> tuple[str, ...]:
        """The nodes of the prepared ``model`` kept in FP32: the settings' and ``exclude``, and
        its output tail (:func:`output_tail`) when ``settings.tail_fp32``."""
        tail = output_tail(model) if self.settings.tail_fp32 else []
        return tuple(dict.fromkeys(tuple(self.settings.exclude) + tuple(exclude) + tuple(tail)))

    def _run(self, prepared: bytes, names: list[str], exclude: tuple[str, ...],
             ranges: Any) -> tuple[bytes, Any]:
        """The quantized bytes, and the ranges calibrated (None when ``ranges`` were given)."""
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.calibrate import load_tensors_data, save_tensors_data
        s = self.settings
        with tempfile.TemporaryDirectory(prefix="autoprune-int8-") as folder, quiet():
            src, dst, cache = (Path(folder, n) for n in ("prepared.onnx", "int8.onnx",
                                                         "ranges.json"))
            src.write_bytes(prepared)
            if ranges is not None:
                save_tensors_data(ranges, cache)
            data_reader = None if ranges is not None else reader(self.batches(names))
            try:
                quantize_static(
                    str(src), str(dst), data_reader, quant_format=QuantFormat.QDQ,
                    per_channel=s.per_channel, reduce_range=bool(s.reduce_range),
                    activation_type=QuantType.QInt8 if s.activations == "int8"
                    else QuantType.QUInt8, weight_type=QuantType.QInt8,
                    nodes_to_exclude=list(exclude), calibrate_method=s.ort_method(),
                    calibration_cache_path=str(cache))
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - onnxruntime raises many kinds
                raise quantize_error(e, "calibrate" if data_reader else "quantize") from None
            return dst.read_bytes(), None if ranges is not None else load_tensors_data(cache)

    def record(self) -> dict[str, Any]:
        """The settings' record (:meth:`QuantizeSettings.record`) and the calibration: its
        source, images read, calibrations run and quantizations from kept ranges."""
        return {**self.asked.record(self.features),
                "calibration": {"source": self.source, "images": self.images,
                                "calibrations": self.calibrations, "reused": self.reused,
                                "range_reuse": "for timing: the first model's activation "
                                               "ranges by tensor name; a model whose "
                                               "metric counts is calibrated on its own; "
                                               "weights' scales from the weights"}}


@dataclasses.dataclass(frozen=True)
class Int8File:
    """An INT8 model written by :func:`write_int8`: its ``path``, size, the nodes kept in FP32
    (``excluded``: asked, or chosen by measurement; ``tail``: the output tail, see
    :func:`output_tail`), the graph's facts (:func:`graph_summary`) and the quantization
    record."""

    path: Path
    size_mb: float
    excluded: tuple[str, ...]
    tail: tuple[str, ...]
    graph: dict[str, Any]
    record: dict[str, Any]


def _read_model(source: Any) -> bytes:
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    try:
        return Path(source).read_bytes()
    except (OSError, TypeError) as e:
        why = getattr(e, "strerror", None) or _one_line(e)
        raise ConfigError(f"cannot read the FP32 model {source} ({why}): export it first "
                          f"(autoprune export)") from None


def check_runs(data: bytes) -> None:
    """Refuse (one-line ConfigError) INT8 bytes that a plain ONNX Runtime session cannot load."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        raise quantize_error(e, "load the quantized form of") from None


def write_int8(fp32_onnx: Any, out_path: str | os.PathLike, calibration: Any = None,
               settings: QuantizeSettings | None = None, exclude: Sequence[str] = (), *,
               quantizer: Int8Quantizer | None = None, fresh: bool = True) -> Int8File:
    """Quantize ``fp32_onnx`` (bytes or a file) with ``quantizer`` (or a new one over
    ``calibration`` and ``settings``), keep ``exclude`` in FP32, check that a plain ONNX Runtime
    session loads it, and write it to ``out_path`` atomically (a temp file in the same folder,
    then renamed: nothing half-written on an error or Ctrl-C). ``fresh``: this model's own
    ranges (what a shipped model gets) rather than the quantizer's first model's. The file
    runs with plain ``onnxruntime``; autoprune is not needed to load it."""
    data = _read_model(fp32_onnx)
    if quantizer is None:
        quantizer = Int8Quantizer(calibration, settings)
    int8 = quantizer.quantize(data, exclude=exclude, fresh=fresh)
    check_runs(int8)
    out = Path(out_path)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(int8)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(out, write)
    model = load(quantizer.prepare(data))
    asked = tuple(dict.fromkeys(tuple(quantizer.settings.exclude) + tuple(exclude)))
    tail = tuple(n for n in quantizer.excluded(model, exclude) if n not in asked)
    return Int8File(out, len(int8) / 1e6, asked, tail, graph_summary(int8, asked + tail),
                    {**quantizer.record(), "exclude": list(asked), "tail": list(tail)})
