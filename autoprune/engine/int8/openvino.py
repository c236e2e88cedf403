"""INT8 in OpenVINO: the model (read from the same ONNX bytes) quantized by NNCF's
``nncf.quantize``, the post-training quantizer made for OpenVINO, on the same calibration images.
Optional: ``openvino`` and ``nncf`` are imported only when asked (a missing one is a one-line
ConfigError naming ``pip install openvino nncf``). NNCF calibrates each model itself (no range
reuse across pruned variants)."""
from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import sys
from typing import Any, Iterator, Sequence

from ...errors import ConfigError
from .quantizer import Int8Quantizer, load, quiet

@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_FIX = "pip install openvino nncf, or pass latency_runtime='onnxruntime'"


def import_without_telemetry(name: str) -> Any:
    """``name`` (``openvino``, ``nncf``) imported with Intel's usage telemetry declined: on
    import they write a client id under ``~/intel`` and send usage data to Google Analytics
    unless their consent check declines, which it does where ``CI=true`` (it has no other
    switch). So ``CI=true`` is set while the package is first imported, and only then: nothing
    leaves the machine unless the user asks for it."""
    if name in sys.modules:
        return sys.modules[name]
    with _environment(CI="true"):
        return importlib.import_module(name)


def _package(name: str) -> Any:
    try:
        return import_without_telemetry(name)
    except ImportError:
        raise ConfigError(f"INT8 in OpenVINO quantizes with NNCF, and {name} is not installed: "
                          f"{_FIX}") from None


def openvino_int8(quantizer: Int8Quantizer, fp32_onnx: bytes, *,
                  exclude: Sequence[str] = ()) -> Any:
    """``fp32_onnx`` read by OpenVINO and quantized by ``nncf.quantize`` (symmetric
    "performance" preset, at most ``settings.calibration_images`` images of ``quantizer``'s
    calibration data; ``exclude``: ONNX node names kept in FP32, through NNCF's ignored scope):
    an ``openvino.Model`` to compile. Errors are one-line ConfigErrors."""
    ov = _package("openvino")
    nncf = _package("nncf")
    model = load(fp32_onnx)
    weights = {w.name for w in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in weights]
    items = []  # one image per item: NNCF's subset_size counts items
    for batch in quantizer.batches(names):
        for i in range(next(iter(batch.values())).shape[0]):
            one = [batch[n][i:i + 1] for n in names]
            items.append(one[0] if len(one) == 1 else tuple(one))
    excluded = list(dict.fromkeys(tuple(quantizer.settings.exclude) + tuple(exclude)))
    nncf.set_log_level(logging.ERROR)  # its notes
    try:
        with quiet(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):  # NNCF's progress bars
            ov_model = ov.Core().read_model(fp32_onnx)
            return nncf.quantize(
                ov_model, nncf.Dataset(items), preset=nncf.QuantizationPreset.PERFORMANCE,
                subset_size=len(items), fast_bias_correction=True,
                ignored_scope=nncf.IgnoredScope(names=excluded, validate=False)
                if excluded else None)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - OpenVINO's and NNCF's own exception types
        lines = [s.strip() for s in str(e).splitlines() if s.strip()]
        why = (lines[0] if lines else type(e).__name__)[:200]
        raise ConfigError(f"NNCF cannot quantize this model for OpenVINO ({why}): pass "
                          f"latency_runtime='onnxruntime' or quantize=None") from None


def openvino_record(quantizer: Int8Quantizer) -> dict[str, Any]:
    """What is recorded for an OpenVINO INT8 model: the quantizer (NNCF, its version), preset,
    calibration images and the CPU's features."""
    nncf = _package("nncf")
    record = quantizer.record()
    return {"format": "OpenVINO FakeQuantize (NNCF)", "quantizer": "nncf.quantize",
            "nncf": nncf.__version__, "preset": "performance (symmetric)",
            "calibration_images": quantizer.settings.calibration_images,
            "exclude": record["exclude"], "calibration": record["calibration"],
            "cpu": record["cpu"], "cpu_summary": record["cpu_summary"]}
