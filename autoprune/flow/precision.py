"""The INT8 settings of a run (:class:`Int8Settings`, one group of
:class:`~autoprune.flow.config.FlowSettings`): kept free of torch, like the timing group, so the
command line reads them without loading it. Also what an INT8 entry of a report is called
(:func:`int8_label`): the report reads it without loading the quantizer."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..engine.int8.settings import CALIBRATION_METHODS, QuantizeSettings, check_precision
from ..engine.timing import Timing
from ..errors import ConfigError


def _field(default: Any, help: str, kind: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help, "kind": kind})


@dataclasses.dataclass(frozen=True)
class Int8Settings:
    """The INT8 settings of a run (keywords, YAML keys and CLI flags of the same names); their
    defaults are the quantizer's (:class:`~autoprune.engine.int8.settings.QuantizeSettings`)."""

    quantize: str | None = _field(None, "int8: quantize the base and pruned models statically in "
                                  "ONNX Runtime after retraining, measure their metric and "
                                  "latency there and write <stage>/model_int8.onnx", "str")
    calibration_images: int = _field(QuantizeSettings.calibration_images, "images of the train "
                                     "split the INT8 models are calibrated on", "int")
    calibration_method: str = _field(QuantizeSettings.method, "calibration: minmax, entropy or "
                                     "percentile (ONNX Runtime's calibrators)", "str")
    int8_metric_loss: float | None = _field(None, "tolerated relative metric loss of the INT8 "
                                            "model against the FP32 one; beyond it the fewest "
                                            "layers are kept in FP32 (by measured sensitivity)",
                                            "float")

    def wanted(self, timing: Timing | None = None) -> bool:
        """Whether the run quantizes: ``quantize="int8"``, or a latency target timed in INT8."""
        return self.quantize is not None and str(self.quantize).lower() == "int8" or (
            timing is not None and str(timing.precision).lower() == "int8")

    def check(self, timing: Timing | None = None) -> "Int8Settings":
        """These settings, checked (one-line ConfigErrors): ``quantize`` None, "fp32" (the same)
        or "int8"; a calibration method ONNX Runtime has; a positive image count; a tolerated
        loss in (0, 1); none of them given when nothing is quantized (``timing``: the run's, whose
        INT8 precision quantizes too)."""
        if self.quantize is not None:
            check_precision(self.quantize, "onnxruntime", name="quantize")
        if not self.wanted(timing):
            for f in dataclasses.fields(self):
                value = getattr(self, f.name)
                if f.name != "quantize" and value != f.default:
                    raise ConfigError(f"{f.name}={value!r} is given without quantize='int8': "
                                      f"set quantize: int8 or leave {f.name} out")
        if self.calibration_method not in CALIBRATION_METHODS:
            raise ConfigError(f"calibration_method={self.calibration_method!r} is not one of "
                              f"ONNX Runtime's: pick {', '.join(CALIBRATION_METHODS)}")
        self.quantizer_settings().check()
        loss = self.int8_metric_loss
        if loss is not None and (isinstance(loss, bool) or not isinstance(loss, (int, float))
                                 or not 0 < loss < 1):
            raise ConfigError(f"int8_metric_loss={loss!r} is outside (0, 1): pass the tolerated "
                              f"relative loss of the INT8 model, e.g. 0.01 for 1 %")
        return self

    def quantizer_settings(self) -> QuantizeSettings:
        """The quantizer's settings these spell."""
        return QuantizeSettings(method=self.calibration_method,
                                calibration_images=self.calibration_images)


# the precision cell of a report's INT8 row whose model holds no INT8 weight
ALL_KEPT_FP32 = "INT8 (all kept in FP32)"


def nothing_quantized(entry: Mapping[str, Any]) -> bool:
    """Whether an ONNX Runtime INT8 entry holds no INT8 weight: every layer was kept in FP32
    (for speed), so its model is the FP32 one and is never written or called INT8, whatever a
    timing within noise says."""
    return (entry.get("graph") or {}).get("int8_weights") == 0


def int8_label(entry: Mapping[str, Any]) -> str:
    """The precision a report shows for an INT8 entry: ``INT8``, or :data:`ALL_KEPT_FP32` where
    nothing in it is INT8 (its size and latency are the FP32 graph's)."""
    return ALL_KEPT_FP32 if nothing_quantized(entry) else "INT8"
