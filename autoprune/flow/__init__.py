"""The task-agnostic flow: train -> sensitivities -> ratios -> prune -> retrain -> report.

run.py (the journey), analysis_step.py (step 2 alone), sensitivities.py (the table of a
run), checkpoints.py (load, prune, export and compare checkpoints), options.py (argument
checks), defaults.py (DEFAULT profile lookup), training.py (the supervised training loop),
report.py and plots.py. It reaches a task only through the
:class:`~autoprune.flow.contract.TaskAdapter` contract.
"""
