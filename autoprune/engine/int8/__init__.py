"""INT8 in the deploy runtime: static post-training quantization by the runtime's own quantizer
(ONNX Runtime's ``quantize_static``, QDQ, per-channel int8 weights; OpenVINO through NNCF), and
mixed precision chosen by measurement.

cpu.py (the CPU's INT8 features), settings.py (precisions, :class:`QuantizeSettings` and its
record), calibration.py (the caller's batches as a calibration reader), quantizer.py
(:class:`Int8Quantizer`: calibrate once, reuse ranges; :func:`write_int8`), accuracy.py (layers
kept in FP32 by measured sensitivity), speed.py (blocks kept in FP32 by timing; the verdict when
INT8 does not pay), openvino.py (NNCF). The public names are re-exported by
:mod:`autoprune.engine.quantize`.
"""
