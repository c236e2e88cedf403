"""An exported model run by ONNX Runtime, dressed as an ``nn.Module``: a task's own evaluation
code (top-1, mIoU...) then measures the model *in the runtime* (an INT8 graph included) exactly as
it measures the torch model, on the same batches.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from ..errors import ConfigError


class OnnxModule(nn.Module):
    """``onnx`` (bytes or a file) run by an ONNX Runtime CPU session with ``threads`` intra-op
    threads (None: ONNX Runtime's default); ``forward(*inputs)`` feeds the tensors to the model's
    inputs in order and returns its output as a CPU tensor (a tuple of them for several outputs).
    ``to()``, ``eval()`` and ``train()`` are accepted and change nothing: the graph is fixed (the
    outputs come back on the inputs' device)."""

    def __init__(self, onnx: bytes | str | os.PathLike, threads: int | None = None):
        super().__init__()
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = int(threads)
        options.inter_op_num_threads = 1
        source = onnx if isinstance(onnx, (bytes, bytearray)) else str(Path(onnx))
        try:
            self.session = ort.InferenceSession(source, options,
                                                providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types
            what = "the model" if isinstance(onnx, (bytes, bytearray)) else str(onnx)
            first = (str(e).splitlines() or [type(e).__name__])[0][:200]
            raise ConfigError(f"ONNX Runtime cannot load {what} ({first}): export it again "
                              f"with autoprune export") from None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.register_buffer("_device_marker", torch.zeros(0), persistent=False)

    def forward(self, *inputs: torch.Tensor) -> Any:
        feeds = {name: np.ascontiguousarray(x.detach().cpu().float().numpy())
                 for name, x in zip(self.input_names, inputs)}
        # where the caller's labels are
        device = inputs[0].device if inputs else torch.device("cpu")
        outputs = [torch.from_numpy(np.asarray(o)).to(device)
                   for o in self.session.run(None, feeds)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def to(self, *args: Any, **kwargs: Any) -> "OnnxModule":  # the session runs on the CPU
        return self


class OpenVinoModule(nn.Module):
    """An exported model (ONNX bytes or file, or an ``openvino.Model`` such as NNCF's INT8 one)
    compiled by OpenVINO for its CPU plugin (``threads`` inference threads; None: OpenVINO's
    default), dressed as a module like :class:`OnnxModule`."""

    def __init__(self, model: Any, threads: int | None = None):
        super().__init__()
        from .runtimes import _module, runtime_error

        ov = _module("openvino")
        core = ov.Core()
        try:
            if isinstance(model, (bytes, bytearray, str, os.PathLike)):
                model = core.read_model(model if isinstance(model, (bytes, bytearray))
                                        else str(model))
            config = {"INFERENCE_NUM_THREADS": int(threads)} if threads else {}
            self.compiled = core.compile_model(model, "CPU", config)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - OpenVINO's own exception types
            raise runtime_error(e, "openvino") from None
        self.register_buffer("_device_marker", torch.zeros(0), persistent=False)

    def forward(self, *inputs: torch.Tensor) -> Any:
        device = inputs[0].device if inputs else torch.device("cpu")
        feeds = {i: np.ascontiguousarray(x.detach().cpu().float().numpy())
                 for i, x in enumerate(inputs)}
        result = self.compiled(feeds)
        outputs = [torch.from_numpy(np.asarray(result[o])).to(device)
                   for o in self.compiled.outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def to(self, *args: Any, **kwargs: Any) -> "OpenVinoModule":  # runs on the CPU
        return self


def deployed_module(model: Any, runtime: str = "onnxruntime",
                    threads: int | None = None) -> nn.Module:
    """``model`` (ONNX bytes or file; for OpenVINO also an ``openvino.Model``) run by
    ``runtime`` (``"onnxruntime"`` or ``"openvino"``), as a module."""
    if runtime == "openvino":
        return OpenVinoModule(model, threads)
    if runtime != "onnxruntime":
        raise ConfigError(f"runtime {runtime!r} does not run exported models: use "
                          f"'onnxruntime' or 'openvino'")
    return OnnxModule(model, threads)
