"""The engine: works on any ``nn.Module`` plus an evaluation function; imports no flow, task,
profile or CLI module.

groups.py (prunable groups on torch-pruning's graph; tp_patches.py: its fixes to torch-pruning's
search; probe.py: groups whose removal breaks a forward pass; channels.py: which channels go),
sensitivity.py with analysis_file.py (its file opened, resumed, merged), points.py, masking.py,
prefix_cache.py and fused_eval.py (how the sensitivity points are evaluated; evaluated_copy.py
and in_force.py: they follow the copy an evaluation runs instead of the model) and the adaptive
analysis (adaptive.py, adaptive_run.py, bounds.py, incremental.py, cost.py), store.py (the
sensitivity file), files.py (atomic writes: every file autoprune writes), allocate.py (ratios
from a loss or a FLOPs target), timing.py (the Timing setting), timer.py (paired timing and its
recorded setting), latency.py, latency_alloc.py and latency_target.py (a table's points timed,
allocations on a timed table, ratios for a measured latency target), runtimes.py (torch, ONNX
Runtime, OpenVINO), int8/ (static INT8 by the runtime's own quantizer, mixed precision by
measurement; quantize.py re-exports it), onnx_module.py (an exported model run as a module),
prune.py, removal.py, padding.py, checkpoint.py, attributes.py (channel attributes kept true),
measure.py (params, FLOPs, size, latency), data.py (loaders), distributed.py (torchrun helpers),
paths.py (paths read from data files confined to their root), progress.py, outputs.py,
paddleslim.py.
"""
