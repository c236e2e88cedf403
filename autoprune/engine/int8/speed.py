"""Mixed precision for speed, by timing in ONNX Runtime: where quantizing a block makes the model
slower, keep it in FP32; and say when INT8 as a whole does not pay on this CPU.

1. ONNX Runtime's per-node profiler runs the FP32 and the INT8 model (one thread); each node's
   kernel time is attributed to a *block*: the module path of a layer (``/blocks/blocks.5/
   blocks.5.0`` for its ``conv_pw``, ``conv_dw``, ``se``... and their QuantizeLinear /
   DequantizeLinear and activations; a node without a path, such as the QDQ pair ORT adds around
   a hard-swish, goes to the block of the node that feeds it).
2. Blocks whose INT8 kernels take longer than their FP32 ones are candidates, costliest first.
3. The whole model is timed, in alternating rounds against FP32 (thread CPU time on one thread),
   all-INT8 and with the top candidates (all, half, a quarter of them) kept in FP32; the fastest
   INT8 form wins. The profiler only orders the candidates: the choice rests on the paired timing.
   If even that form is not faster than FP32, the verdict says so, with the operators that cost
   most.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .quantizer import Int8Quantizer, layer_nodes, load


@dataclasses.dataclass(frozen=True)
class SpeedChoice:
    """What :func:`exclude_for_speed` found: the nodes kept in FP32 for speed (``excluded``), the
    paired-timed milliseconds of FP32, all-INT8 and the chosen form (``int8_ms``), whether that
    form is faster than FP32 (``int8_faster``), the profiled costliest INT8 operators
    (``costly_ops``: op type -> ms per pass), the profiled INT8 - FP32 ms per block
    (``blocks``), each form tried (``trials``) and a one-line ``message``."""

    excluded: tuple[str, ...]
    fp32_ms: float
    all_int8_ms: float
    int8_ms: float
    int8_faster: bool
    costly_ops: dict[str, float]
    blocks: dict[str, float]
    trials: list[dict[str, Any]]
    message: str


def block_of(name: str) -> str:
    """A node's block from its ONNX name (``/layer1/layer1.0/conv1/Conv`` -> ``/layer1/layer1.0``;
    ``/conv1/Conv`` -> ``/conv1``); ``""`` for a name without a module path."""
    parts = [p for p in name.split("/")[1:-1] if p] if name.startswith("/") else []
    if not parts:
        return ""
    return "/" + "/".join(parts[:-1] if len(parts) > 1 else parts)


def _within(block: str, owners: Sequence[str]) -> str:
    """The longest of ``owners`` that is ``block`` or a module path above it ("" if none)."""
    best = ""
    for owner in owners:
        if (block == owner or block.startswith(owner + "/")) and len(owner) > len(best):
            best = owner
    return best


def _session(data: bytes, threads: int, profile: str | None = None,
             optimized: str | None = None) -> Any:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    if optimized:
        options.optimized_model_filepath = optimized
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def profile_nodes(data: bytes, feeds: dict[str, np.ndarray], *, threads: int = 1,
                  runs: int = 10) -> tuple[dict[str, tuple[str, float]], Any]:
    """ONNX Runtime's profile of ``data`` over ``runs`` passes after a warm-up one: ``{node:
    (op type, ms per pass)}`` of the graph it runs (after its optimisations), and that graph (a
    ModelProto)."""
    import onnx
    with tempfile.TemporaryDirectory(prefix="autoprune-int8-") as folder:
        optimized = str(Path(folder, "optimized.onnx"))
        session = _session(data, threads, str(Path(folder, "profile")), optimized)
        for _ in range(runs + 1):
            session.run(None, feeds)
        times = _node_times(session.end_profiling())
        graph = onnx.load(optimized, load_external_data=False)
    return times, graph


def _node_times(path: str) -> dict[str, tuple[str, float]]:
    """``{node: (op type, mean ms)}`` of a profile, each node's first (warm-up) run left out."""
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    os.unlink(path)
    runs: dict[str, list[float]] = collections.defaultdict(list)
    ops: dict[str, str] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            ops[node] = e.get("args", {}).get("op_name", "?")
            runs[node].append(e.get("dur", 0) / 1000.0)
    return {n: (ops[n], statistics.fmean(t[1:] or t)) for n, t in runs.items()}


def owner_of(model: Any, owners: Sequence[str]) -> Callable[[str], str]:
    """A function from a node of ``model`` to its block among ``owners`` (``""``: none): the
    owner its name's path lies in, else the owner of the node that feeds it (followed up the
    graph a few steps)."""
    producer = {o: n.name for n in model.graph.node for o in n.output}
    inputs = {n.name: list(n.input) for n in model.graph.node}
    known = set(owners)

    def owner(node: str) -> str:
        frontier = [node]
        for _ in range(6):
            found = next((o for o in ((n if n in known else _within(block_of(n), owners))
                                      for n in frontier) if o), "")
            if found:
                return found
            frontier = [producer[i] for n in frontier for i in inputs.get(n, []) if i in producer]
            if not frontier:
                break
        return ""

    return owner


def block_times(times: dict[str, tuple[str, float]], model: Any,
                owners: Sequence[str]) -> dict[str, float]:
    """Profiled ms per pass by block of ``owners`` (``""``: not attributed; see
    :func:`owner_of`) of the nodes ONNX Runtime ran (``model``: the graph it ran)."""
    owner = owner_of(model, owners)
    out: dict[str, float] = collections.defaultdict(float)
    for node, (_, ms) in times.items():
        out[owner(node)] += ms
    return dict(out)


def paired_ms(runs: Sequence[Callable[[], Any]], *, rounds: int = 7, passes: int = 3,
              warmup: int = 2, clock: Callable[[], float] = time.thread_time) -> list[float]:
    """The milliseconds of each of ``runs`` (the first being the reference), timed in
    alternating rounds (each round times every run, the fastest of ``passes`` passes, in an order
    rotated from round to round): the reference's median times each run's median ratio to it,
    so that load shifting during the timing weighs on all alike."""
    for run in runs:
        for _ in range(warmup):
            run()
    table = [[0.0] * rounds for _ in runs]
    for r in range(rounds):
        order = list(range(len(runs)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            best = math.inf
            for _ in range(passes):
                start = clock()
                runs[i]()
                best = min(best, (clock() - start) * 1000.0)
            table[i][r] = best
    base = statistics.median(table[0])
    return [base * statistics.median(t / max(b, 1e-9) for t, b in zip(row, table[0]))
            for row in table]


def _feeds(quantizer: Int8Quantizer, data: bytes, inputs: Any) -> dict[str, np.ndarray]:
    model = load(data)
    weights = {w.name for w in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in weights]
    if inputs is None:
        return {k: v[:1] for k, v in quantizer.batches(names)[0].items()}
    from .calibration import calibration_batches
    return calibration_batches([inputs], names, 1 << 30)[0]


def exclude_for_speed(quantizer: Int8Quantizer, fp32_onnx: bytes, inputs: Any = None, *,
                      threads: int = 1, rounds: int = 7, exclude: Sequence[str] = (),
                      clock: Callable[[], float] | None = None,
                      profile_runs: int = 10) -> SpeedChoice:
    """Keep in FP32 the blocks whose quantization makes ONNX Runtime slower, chosen by timing
    (see the module), on ``inputs`` (a batch: tensor, tuple or mapping; None: one calibration
    image) with ``threads`` threads (one thread: thread CPU time, else wall time unless
    ``clock``). ``exclude``: nodes kept in FP32 in every form (e.g. for accuracy)."""
    clock = clock or (time.thread_time if threads == 1 else time.perf_counter)
    prepared = quantizer.prepare(fp32_onnx)
    feeds = _feeds(quantizer, prepared, inputs)
    base = tuple(exclude)
    all_int8 = quantizer.quantize(fp32_onnx, exclude=base)
    model = load(prepared)
    layers = layer_nodes(model)
    owners = sorted({block_of(n) or n for n in layers})
    owner = owner_of(model, owners)
    every = [n.name for n in model.graph.node if n.name]
    fp32_times, fp32_graph = profile_nodes(prepared, feeds, threads=threads, runs=profile_runs)
    int8_times, int8_graph = profile_nodes(all_int8, feeds, threads=threads, runs=profile_runs)
    fp32_blocks = block_times(fp32_times, fp32_graph, owners)
    int8_blocks = block_times(int8_times, int8_graph, owners)
    delta = {b: int8_blocks.get(b, 0.0) - fp32_blocks.get(b, 0.0) for b in owners}
    slower = sorted((b for b in owners if delta[b] > 0), key=lambda b: -delta[b])
    forms: list[tuple[int, tuple[str, ...]]] = []
    for k in sorted({len(slower), math.ceil(len(slower) / 2), math.ceil(len(slower) / 4)},
                    reverse=True):
        if k:
            chosen = set(slower[:k])
            nodes = tuple(n for n in every if owner(n) in chosen and n not in base)
            if nodes and nodes not in [f[1] for f in forms]:
                forms.append((k, nodes))
    sessions = [_session(prepared, threads), _session(all_int8, threads)]
    sessions += [_session(quantizer.quantize(fp32_onnx, exclude=base + nodes), threads)
                 for _, nodes in forms]
    ms = paired_ms([lambda s=s: s.run(None, feeds) for s in sessions], rounds=rounds,
                   clock=clock)
    fp32_ms, all_ms = ms[0], ms[1]
    trials = [{"blocks_in_fp32": 0, "nodes_in_fp32": 0, "ms": all_ms}]
    trials += [{"blocks_in_fp32": k, "nodes_in_fp32": len(nodes), "ms": t}
               for (k, nodes), t in zip(forms, ms[2:])]
    best = min(range(len(trials)), key=lambda i: trials[i]["ms"])
    excluded = forms[best - 1][1] if best else ()
    int8_ms = trials[best]["ms"]
    ops: dict[str, float] = collections.defaultdict(float)
    for op, t in int8_times.values():
        ops[op] += t
    costly = dict(sorted(ops.items(), key=lambda kv: -kv[1])[:6])
    faster = int8_ms < fp32_ms
    return SpeedChoice(excluded, fp32_ms, all_ms, int8_ms, faster, costly,
                       {b: delta[b] for b in slower}, trials,
                       _message(excluded, fp32_ms, all_ms, int8_ms, faster, costly, quantizer))


def _message(excluded: tuple[str, ...], fp32_ms: float, all_ms: float, int8_ms: float,
             faster: bool, costly: dict[str, float], quantizer: Int8Quantizer) -> str:
    kind = "S8S8" if quantizer.settings.activations == "int8" else "U8S8"
    where = f"{kind}, {quantizer.record()['cpu_summary']}"
    if not faster:
        ops = ", ".join(f"{op} {t:.2f} ms" for op, t in list(costly.items())[:4])
        return (f"INT8 is slower than FP32 for this model on this CPU ({int8_ms:.2f} ms against "
                f"{fp32_ms:.2f} ms, {where}; costliest INT8 operators, profiled: {ops}): "
                f"ship the FP32 model")
    kept = (f", {len(excluded)} layer(s) kept in FP32 for speed (all-INT8 {all_ms:.2f} ms)"
            if excluded else "")
    return (f"INT8 runs in {int8_ms:.2f} ms against {fp32_ms:.2f} ms in FP32 "
            f"({fp32_ms / int8_ms:.2f}x, {where}){kept}")
