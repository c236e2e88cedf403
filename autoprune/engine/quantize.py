"""INT8 quantization in the deploy runtime: the public names of :mod:`autoprune.engine.int8`.

``Int8Quantizer(calibration, QuantizeSettings(...)).quantize(fp32_onnx_bytes)`` gives the INT8
graph (ONNX Runtime's ``quantize_static``: QDQ, int8 per-channel weights, activations int8 or
uint8 as the CPU runs fastest; the first model calibrated, pruned variants reusing its ranges);
``write_int8`` writes ``model_int8.onnx`` atomically; ``exclude_for_accuracy`` and
``exclude_for_speed`` choose the layers kept in FP32 by measurement; ``openvino_int8`` quantizes
for OpenVINO with NNCF.
"""
from __future__ import annotations

from .int8.accuracy import AccuracyChoice, exclude_for_accuracy, relative_loss
from .int8.calibration import calibration_batches
from .int8.cpu import cpu_features, parse_cpu_flags
from .int8.openvino import openvino_int8, openvino_record
from .int8.quantizer import (Int8File, Int8Quantizer, graph_summary, layer_nodes,
                             write_int8)
from .int8.settings import (ACTIVATIONS, CALIBRATION_METHODS, INT8_ROUND_TO, PRECISIONS,
                            QuantizeSettings, check_precision, cpu_choice)
from .int8.speed import SpeedChoice, exclude_for_speed

__all__ = ["ACTIVATIONS", "AccuracyChoice", "CALIBRATION_METHODS", "INT8_ROUND_TO", "Int8File",
           "Int8Quantizer", "PRECISIONS", "QuantizeSettings", "SpeedChoice",
           "calibration_batches", "check_precision", "cpu_choice", "cpu_features",
           "exclude_for_accuracy", "exclude_for_speed", "graph_summary", "layer_nodes",
           "openvino_int8", "openvino_record", "parse_cpu_flags", "relative_loss", "write_int8"]
