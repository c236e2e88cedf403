"""The engine: works on any ``nn.Module`` plus an evaluation function; imports no flow, task,
profile or CLI module.

groups.py (prunable groups on torch-pruning's graph; tp_patches.py: its fixes to torch-pruning's
search; probe.py: groups whose removal breaks a forward pass), sensitivity.py with points.py, masking.py and prefix_cache.py (how the sensitivity points
are evaluated), store.py (the sensitivity file), allocate.py (ratios from a loss or a FLOPs
target), latency.py, latency_alloc.py and latency_target.py (timed points, allocations on a timed
table, ratios for a measured latency target), prune.py,
removal.py, padding.py, checkpoint.py, attributes.py (channel attributes kept true), measure.py
(params, FLOPs, size, latency), data.py (loaders), distributed.py (torchrun helpers),
progress.py, outputs.py, paddleslim.py.
"""
