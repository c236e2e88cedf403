"""Model measurements: parameters, FLOPs (MACs), size of the saved weights, CPU/GPU latency."""
from __future__ import annotations

import io
import statistics
import time
from typing import Any, Callable

import torch
import torch.nn as nn

from .data import mapped
from .fast_copy import fast_copies_in


def flush_denormals() -> None:
    """Flush denormal floats to zero on CPU for this process.

    Trained, pruned or fine-tuned weights often hold denormals (values below ~1e-38), which can make
    CPU inference 10-50x slower and latency figures meaningless. Torch has no getter for this
    setting, so it is switched on and left on; only values below ~1e-38 are affected.
    """
    torch.set_flush_denormal(True)


_ALLOCATOR_WARM = False


def warm_allocator() -> None:
    """Put the C allocator in the state a long-running process is in before anything is timed.

    glibc's malloc serves a block above its *mmap threshold* (128 KiB at first) with fresh pages
    from the kernel and returns them on free, so every forward pass pays page faults for its large
    activations, until a block that size has been freed once: the threshold then rises to it (up
    to 32 MiB) for good. How far it has risen depends on the process's history. Measured on the
    2-core VM: the same pruned mobilenetv3 at 224 px read -57 % against its unpruned model in a
    fresh process and -40 % in one that had run for a while (the unpruned model's larger
    activations were still mapped and unmapped on every pass). Allocating and freeing one 32 MiB
    block (once per process) raises the threshold to its maximum at once; elsewhere it is a
    harmless allocation.
    """
    global _ALLOCATOR_WARM
    if not _ALLOCATOR_WARM:
        block = torch.empty((32 << 20) - (1 << 16), dtype=torch.uint8)
        block[:: 4096] = 1  # touch its pages: a real block, not one the kernel never backed
        del block
        _ALLOCATOR_WARM = True


def _call(model: nn.Module, inputs: Any):
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def to_device(inputs: Any, device: Any) -> Any:
    """``inputs`` (a tensor, or a dict/list/tuple of them) moved to ``device``."""
    return mapped(inputs, lambda t: t.to(device))


def count_params(model: nn.Module) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())


def count_flops(model: nn.Module, example_inputs: Any, layer_wise: bool = False):
    """MACs of one forward pass on ``example_inputs`` (torch-pruning's counter, on its own copy
    of the model made by :func:`~autoprune.engine.fast_copy.fast_deepcopy`: 3x less time per
    count than its ``copy.deepcopy`` on a YOLOv8n).

    With ``layer_wise`` returns ``(total, {leaf module: macs})``. The model's mode is kept.
    """
    # imported here: torch-pruning's counter imports timm, torchvision.ops and torch._dynamo
    # (4-5 s on these 2-core VMs), which a process that only times a model does not need
    from torch_pruning.utils import op_counter

    was_training = model.training
    try:
        with torch.no_grad(), fast_copies_in(op_counter):
            result = op_counter.count_ops_and_params(model, example_inputs, layer_wise=layer_wise)
    finally:
        model.train(was_training)
    if layer_wise:  # per-layer counts are for the whole batch, the total is per sample: rescale
        leaves = {m: (f or 0) for m, f in result[2].items() if next(m.children(), None) is None}
        scale = result[0] / max(1, sum(leaves.values()))
        return int(result[0]), {m: f * scale for m, f in leaves.items()}
    return int(result[0])


def size_mb(model: nn.Module) -> float:
    """Size in MB (10^6 bytes) of the model's state_dict as ``torch.save`` writes it."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell() / 1e6


def latency_ms(model: nn.Module, example_inputs: Any, *, device: str | torch.device = "cpu",
               warmup: int = 5, repeats: int = 30, runtime: str = "torch") -> float:
    """Median wall time in ms of one forward pass (eval mode, no grad), after ``warmup`` runs.

    On CUDA each run is synchronised; on CPU denormals are flushed (see :func:`flush_denormals`).
    The model is moved to ``device`` and back. ``runtime`` other than ``"torch"``
    (``"onnxruntime"``, ``"openvino"``): the model exported to ONNX and run by that runtime
    with torch's current number of threads (:mod:`autoprune.engine.runtimes`).
    """
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was asked but CUDA is not available on this machine")
    original = next(model.parameters()).device
    was_training = model.training
    inputs = to_device(example_inputs, device)
    model.to(device).eval()
    flush_denormals()
    warm_allocator()
    try:
        if runtime != "torch":
            from .runtimes import compile_model
            runner = compile_model(model, inputs, runtime=runtime, device=device,
                                   threads=torch.get_num_threads() if device.type == "cpu"
                                   else None)
            for _ in range(warmup):
                runner()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                runner()
                times.append((time.perf_counter() - start) * 1000.0)
            return statistics.median(times)
        with torch.inference_mode():
            timed_runs(model, inputs, warmup, device=device)
            times = timed_runs(model, inputs, repeats, device=device)
    finally:
        model.to(original).train(was_training)
    return statistics.median(times)


def timed_runs(model: nn.Module, inputs: Any, runs: int, *, device: torch.device,
               clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Milliseconds each of ``runs`` forward passes of ``model`` on ``inputs`` (both already on
    ``device``) takes by ``clock``, synchronised on a GPU."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for _ in range(runs):
        sync()
        start = clock()
        _call(model, inputs)
        sync()
        times.append((clock() - start) * 1000.0)
    return times


def measure(model: nn.Module, example_inputs: Any, *, device: str | torch.device = "cpu",
            warmup: int = 5, repeats: int = 30) -> dict[str, Any]:
    """``{"params", "flops" (MACs), "size_mb", "latency_ms"}`` of ``model``
    on ``example_inputs``."""
    return {
        "params": count_params(model),
        "flops": count_flops(model, example_inputs),
        "size_mb": size_mb(model),
        "latency_ms": latency_ms(model, example_inputs, device=device, warmup=warmup,
                                 repeats=repeats),
    }
