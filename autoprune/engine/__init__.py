"""The engine: works on any ``nn.Module`` plus an evaluation function; imports no flow, task,
profile or CLI module.

groups.py (prunable groups on torch-pruning's graph), sensitivity.py with points.py, masking.py
and prefix_cache.py (how the sensitivity points are evaluated), store.py (the sensitivity file),
allocate.py (ratios from a loss or a FLOPs target), prune.py, checkpoint.py, attributes.py
(channel attributes kept true), measure.py (params, FLOPs, size, latency), data.py (loaders),
distributed.py (torchrun helpers).
"""
