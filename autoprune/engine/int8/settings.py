"""The INT8 settings: which precisions exist, how a model is quantized (:class:`QuantizeSettings`)
and what is recorded with a latency table or a report about it."""
from __future__ import annotations

import dataclasses
import importlib.util
import numbers
from typing import Any, Mapping

from ...errors import ConfigError
from .cpu import cpu_features, is_x86, summary

PRECISIONS = ("fp32", "int8")  # what a model is timed and shipped as
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")  # ONNX Runtime's calibrators
ACTIVATIONS = ("int8", "uint8")  # the activations' type (weights are always int8)
# the channel multiple pruning keeps for an INT8 target in ONNX Runtime when none is given.
# Measured by benchmarks/int8_alignment.py (benchmarks/README.md, "INT8: channel alignment"; AMD
# EPYC, AVX2, no VNNI, ORT 1.32, one thread): only multiples of 16 never ran slower than the next
# multiple of 16 above them; multiples of 8 cost up to 15 % (3x3), 35 % (1x1), 52 % (depthwise)
# more than that larger count, multiples of 4 up to 59 / 100 / 123 %. (FP32 stays at 8.)
INT8_ROUND_TO = 16
OPSET_MIN = 13  # per-channel QDQ (QuantizeLinear's axis) needs opset 13
_ORT_METHOD = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def check_precision(precision: Any, runtime: Any = "onnxruntime", *,
                    name: str = "latency_precision") -> str:
    """``precision`` in lower case, or a one-line ConfigError: a precision autoprune cannot
    quantize to (``"int4"``), INT8 in torch eager (the INT8 model is the deploy runtime's
    quantized graph), or INT8 in OpenVINO without ``openvino`` and ``nncf`` installed. ``name``:
    the setting named in the message (``"quantize"`` for the flow's key)."""
    if not isinstance(precision, str) or precision.lower() not in PRECISIONS:
        raise ConfigError(f"{name}={precision!r} is not a precision autoprune quantizes to and "
                          f"times: pick {' or '.join(repr(p) for p in PRECISIONS)}")
    precision = precision.lower()
    if precision == "int8" and runtime == "torch":
        raise ConfigError(f"{name}='int8' times the model as the deploy runtime quantizes it: "
                          f"pass latency_runtime='onnxruntime' (or 'openvino')")
    if precision == "int8" and runtime == "openvino":
        missing = [p for p in ("openvino", "nncf") if importlib.util.find_spec(p) is None]
        if missing:
            raise ConfigError(f"{name}='int8' in OpenVINO quantizes with NNCF, and "
                              f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                              f"not installed: pip install openvino nncf, or pass "
                              f"latency_runtime='onnxruntime'")
    return precision


@dataclasses.dataclass(frozen=True)
class QuantizeSettings:
    """How a model is quantized statically by ONNX Runtime (QDQ format, int8 weights):
    ``method`` of calibration (``"minmax"``, ``"entropy"``, ``"percentile"``) on at most
    ``calibration_images`` images; per-channel weight scales (``per_channel``; depthwise layers
    need them); ``reduce_range`` (7-bit weights) and the ``activations``' type (``"int8"``:
    S8S8, ``"uint8"``: U8S8) decided from the CPU when None (:meth:`resolved`); ``exclude``: node
    names kept in FP32; ``tail_fp32``: the nodes after the last layers on the way to the outputs
    stay FP32 too (they hold no weights, so INT8 saves nothing there, and one 8-bit scale over a
    YOLO head's concatenated boxes, in pixels, and class scores, 0 to 1, zeroes the scores)."""

    method: str = "minmax"
    calibration_images: int = 128
    per_channel: bool = True
    reduce_range: bool | None = None
    activations: str | None = None
    exclude: tuple[str, ...] = ()
    tail_fp32: bool = True

    def check(self) -> "QuantizeSettings":
        """These settings, checked (a one-line ConfigError for a bad field)."""
        if self.method not in CALIBRATION_METHODS:
            raise ConfigError(f"calibration method {self.method!r} is not one ONNX Runtime has: "
                              f"pick {', '.join(repr(m) for m in CALIBRATION_METHODS)}")
        n = self.calibration_images
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ConfigError(f"calibration_images={n!r} must be a positive number of images "
                              f"such as 128")
        for key in ("per_channel", "reduce_range", "tail_fp32"):
            value = getattr(self, key)
            if not isinstance(value, bool) and not (key == "reduce_range" and value is None):
                raise ConfigError(f"{key}={value!r} must be True or False")
        if self.activations is not None and self.activations not in ACTIVATIONS:
            raise ConfigError(f"activations={self.activations!r} is not an 8-bit type: pick "
                              f"'int8' (S8S8), 'uint8' (U8S8) or None (decided from the CPU)")
        exclude = (self.exclude,) if isinstance(self.exclude, str) else self.exclude
        if not all(isinstance(e, str) for e in exclude):
            raise ConfigError(f"exclude={self.exclude!r} must be a list of node names")
        return dataclasses.replace(self, exclude=tuple(exclude))

    def resolved(self, features: Mapping[str, Any] | None = None) -> "QuantizeSettings":
        """These settings with ``reduce_range`` and ``activations`` decided for the CPU of
        ``features`` (this machine's by default): see :func:`cpu_choice`."""
        activations, reduce_range, _ = cpu_choice(features)
        return dataclasses.replace(
            self, activations=self.activations or activations,
            reduce_range=reduce_range if self.reduce_range is None else self.reduce_range)

    def record(self, features: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What is recorded with a latency table or a report: the format, types, per-channel,
        calibration method and size, reduce_range as decided and why, the excluded nodes, the
        quantizer's name and version, and the CPU's features."""
        features = dict(features or cpu_features())
        done = self.check().resolved(features)
        _, _, why = cpu_choice(features)
        asked = {k: getattr(self, k) for k in ("activations", "reduce_range")
                 if getattr(self, k) is not None}
        return {"format": "QDQ", "types": "S8S8" if done.activations == "int8" else "U8S8",
                "activations": done.activations, "weights": "int8",
                "per_channel": done.per_channel, "method": done.method,
                "calibration_images": done.calibration_images,
                "reduce_range": done.reduce_range,
                "why": why + (f"; set by the caller: {asked}" if asked else ""),
                "exclude": list(done.exclude), "tail_fp32": done.tail_fp32,
                "quantizer": "onnxruntime.quantization (quant_pre_process, quantize_static)",
                "onnxruntime": _ort_version(),
                "cpu": features, "cpu_summary": summary(features)}

    def ort_method(self) -> Any:
        """The method as ONNX Runtime's ``CalibrationMethod``."""
        from onnxruntime.quantization import CalibrationMethod
        return getattr(CalibrationMethod, _ORT_METHOD[self.method])


def cpu_choice(features: Mapping[str, Any] | None = None) -> tuple[str, bool, str]:
    """``(activations, reduce_range, why)`` for the CPU of ``features``. x86: U8S8, because ONNX
    Runtime fuses a QDQ convolution into its integer ``QLinearConv`` there only for uint8
    activations (S8S8 leaves each convolution in float between QDQ pairs, with or without
    VNNI); full range with VNNI / AMX (``vpdpbusd`` sums without saturating), 7-bit weights
    (``reduce_range``) without, where u8 x s8 pair sums saturate. Not x86 (ARM): S8S8, full
    range (its dot-product kernels)."""
    features = features or cpu_features()
    if not is_x86(dict(features)):
        return "int8", False, f"{summary(dict(features))}: S8S8, full range"
    if features.get("vnni") or features.get("amx"):
        return "uint8", False, (f"{summary(dict(features))}: U8S8, full range: ONNX Runtime "
                                f"fuses QDQ convolutions into integer kernels on x86 only for "
                                f"uint8 activations, and VNNI sums without saturating")
    return "uint8", True, (f"{summary(dict(features))}: U8S8 with reduce_range (7-bit weights): "
                           f"ONNX Runtime fuses QDQ convolutions into integer kernels on x86 only "
                           f"for uint8 activations, and without VNNI u8 x s8 pair sums saturate")


def _ort_version() -> str:
    try:
        import onnxruntime
        return onnxruntime.__version__
    except ImportError:
        return "not installed"
