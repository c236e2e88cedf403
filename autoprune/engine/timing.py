"""The timing setting (:class:`Timing`): where and how latency is timed. Kept free of torch so
that the command line can build its ``--latency-<field>`` flags from it without loading torch
(the checks import torch and the runtimes when they run)."""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Mapping

from ..errors import ConfigError
from .int8.settings import PRECISIONS  # noqa: F401 - what a model is timed as (torch-free)


def _timing_field(default: Any, help: str, kind: str) -> Any:
    """A :class:`Timing` field with its help text and type in words: the flow spells it
    ``latency_<name>`` (keyword, YAML key, ``--latency-<name>`` flag) from this one field."""
    return dataclasses.field(default=default, metadata={"help": help, "kind": kind})


@dataclasses.dataclass(frozen=True)
class Timing:
    """Where and how latency is timed: on ``device`` ("cpu", "cuda", "cuda:1") with ``threads``
    CPU threads (None: torch's current number), on ``batch`` copies of the first example, in
    ``runtime`` ("torch" eager, "onnxruntime", "openvino": the exported model), as ``precision``
    ("fp32", or "int8": the exported model statically quantized by the runtime's own quantizer).

    The one definition of the timing settings: the flow holds one Timing (``FlowSettings.latency``)
    whose fields are spelled ``latency_<field>`` as keywords, YAML keys and CLI flags; their
    defaults are these. A field added here reaches all of them."""

    device: str = _timing_field("cpu", "where latency is timed: cpu or cuda", "str")
    threads: int | None = _timing_field(None, "CPU threads while timing (default: torch's)",
                                        "int")
    batch: int = _timing_field(1, "batch size timed", "int")
    runtime: str = _timing_field("torch", "where latency is timed and targeted: torch (eager), "
                                 "onnxruntime (as `autoprune export` deploys it), openvino",
                                 "str")
    precision: str = _timing_field("fp32", "the precision timed and targeted: fp32, or int8 (the "
                                   "model quantized statically by the runtime; onnxruntime or "
                                   "openvino)", "str")

    def check(self) -> str:
        """The device as a string; a one-line ConfigError for a bad field (see
        :func:`check_latency_options`)."""
        return check_latency_options(**self.kwargs())

    def kwargs(self) -> dict[str, Any]:
        """The fields as keywords (``device=, threads=, batch=, runtime=, precision=``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def changed(self) -> dict[str, Any]:
        """The fields that differ from their defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default}

    @classmethod
    def of(cls, value: Any, **changes: Any) -> "Timing":
        """``value`` as a Timing: a Timing, a mapping of its fields, or True / None (the
        defaults); ``changes`` on top. A field it does not have is a one-line ConfigError."""
        if value is None or value is True:
            value = cls()
        if isinstance(value, Mapping):
            known = [f.name for f in dataclasses.fields(cls)]
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise ConfigError(f"unknown latency setting {unknown[0]!r}: use "
                                  f"{', '.join(known[:-1])} or {known[-1]}")
            value = cls(**value)
        if not isinstance(value, cls):
            raise ConfigError(f"latency={value!r:.60} is not a timing setting: pass True, "
                              f"autoprune.Timing(threads=1, ...) or a dict of its fields")
        return dataclasses.replace(value, **changes) if changes else value


def check_latency_options(device: Any = "cpu", threads: Any = None, batch: Any = 1,
                          runtime: Any = "torch", precision: Any = "fp32", **more: Any) -> str:
    """Refuse a bad latency device, thread count, batch, runtime or precision (one-line
    ConfigError: an unknown runtime, or one whose package is missing; int8 outside a deploy
    runtime); returns the device as a string (``"cpu"``, ``"cuda"``, ``"cuda:1"``). ``more``:
    fields a :class:`Timing` subclass adds (checked by it)."""
    import torch

    from .runtimes import check_runtime

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"latency_device={device!r} is not a device: pass 'cpu' or "
                          f"'cuda'") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"latency_device={device!r} is not supported: pass 'cpu' or 'cuda'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"latency_device={device!r} was asked but CUDA is not available on "
                          f"this machine: pass latency_device='cpu'")
    for name, value in (("latency_threads", threads), ("latency_batch", batch)):
        if value is None and name == "latency_threads":
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a positive whole number such as 1")
    check_runtime(runtime, dev)
    check_precision(precision, runtime)
    return str(dev)


def check_precision(precision: Any, runtime: Any = "onnxruntime") -> str:
    """``precision`` in lower case, or a one-line ConfigError (``"int4"``; INT8 in torch eager;
    INT8 in OpenVINO without NNCF): :func:`autoprune.engine.int8.settings.check_precision`."""
    from .int8.settings import check_precision as check

    return check(precision, runtime)
