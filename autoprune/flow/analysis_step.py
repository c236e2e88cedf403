"""Step 2 of the flow alone (``<task>.analyze_sensitivity``): the sensitivities of a trained
model measured into a file, without training or pruning."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch.nn as nn

from ..engine.analysis_file import weights_sha256
from ..engine.distributed import init_from_env
from ..engine.sensitivity import DEFAULT_RATIOS, check_ratios
from ..engine.store import read_record
from ..errors import CheckpointError, ConfigError, SensitivityFileError
from .checkpoints import checkpoint_meta, load_model, load_weights
from .contract import TaskAdapter
from .options import names_a_missing_file
from .sensitivities import check_sensitivities_file, get_sensitivities


def analyze_sensitivity(adapter: TaskAdapter, model: str | nn.Module, save_file: str | os.PathLike,
                        *, pretrain_weights: str | os.PathLike | None = None,
                        criterion: str = "l1_norm", ratios: Iterable[float] = DEFAULT_RATIOS,
                        progress: bool = True,
                        sensitivity_options: Mapping[str, Any] | None = None
                        ) -> dict[str, dict[float, float]]:
    """Step 2 of the flow: measure the sensitivities of a trained model into ``save_file``.

    ``model`` is a checkpoint path written by autoprune, a model name (then pass
    ``pretrain_weights``) or a model object.
    """
    init_from_env(adapter.device)  # under torchrun: the points are shared out over the ranks
    arch = None
    if names_a_missing_file(model):
        raise CheckpointError(f"no checkpoint at {model}: check the path")
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file():
        arch = checkpoint_meta(model).get("arch")
        model = load_model(model, adapter)
    elif isinstance(model, str):
        arch = adapter.arch_key(model)
        model = adapter.build(arch)
        if pretrain_weights is None:
            raise ConfigError("a model name needs pretrain_weights=<checkpoint of the trained "
                              "model>: sensitivities of an untrained model mean nothing")
    if pretrain_weights is not None:
        load_weights(model, pretrain_weights)
    adapter.check_model(model)
    adapter.check_data(model)
    model.to(adapter.device)
    if Path(save_file).is_file():  # measuring this model: a table of other weights is no answer
        check_sensitivities_file(adapter, model, save_file, arch, criterion)  # the model first
        stored = read_record(save_file).model.get("weights_sha256")
        if stored and stored != weights_sha256(model):
            raise SensitivityFileError(f"{save_file} was measured on other weights of this model: "
                                       f"pass a new file path to measure these (or delete it)")
    record, _ = get_sensitivities(adapter, model, save_file, arch=arch, criterion=criterion,
                                  ratios=ratios, progress=progress, options=sensitivity_options)
    wanted = check_ratios(ratios)
    return {g: {r: points[r] for r in wanted if r in points}
            for g, points in record.sensitivities.items()}
