"""The main job: the one-call classification flow on Fashion-MNIST, sized for a CPU (a few minutes).

Trains a model on a Fashion-MNIST subset at 32 px, measures the sensitivities of its groups on
test images, prunes with ``eval_metric_loss``, retrains, and prints the before/after table.
"""
from __future__ import annotations

from pathlib import Path

from ..tasks.classification import api as classification
from ..errors import ConfigError, ResumeMismatchError
from ..flow.contract import TrainResult


def run_demo(save_dir: str | Path = "runs/demo", *, arch: str = "resnet18", epochs: int = 2,
             pretrain_epochs: int = 3, train_limit: int = 12000, eval_limit: int = 1000,
             input_size: int = 32, eval_metric_loss: float = 0.05, seed: int = 0,
             device: str = "auto") -> TrainResult:
    """Run the whole flow into ``save_dir``. It always resumes: run again after an interruption,
    finished epochs and measured sensitivity points are kept (another ``save_dir`` starts over)."""
    save_dir = Path(save_dir)
    try:
        return _train(save_dir, arch, epochs, pretrain_epochs, train_limit, eval_limit,
                      input_size, eval_metric_loss, seed, device)
    except ResumeMismatchError as e:
        raise ConfigError(f"{save_dir} holds a demo run of other settings ({e}): pass another "
                          f"--save-dir to run this one") from None


def _train(save_dir: Path, arch: str, epochs: int, pretrain_epochs: int, train_limit: int,
           eval_limit: int, input_size: int, eval_metric_loss: float, seed: int,
           device: str) -> TrainResult:
    return classification.train(
        arch, "fashion-mnist", epochs=epochs, pretrain_epochs=pretrain_epochs, batch_size=128,
        lr=0.05, input_size=input_size, train_limit=train_limit, eval_limit=eval_limit,
        sensitivities_file=save_dir / "sensitivities.json", eval_metric_loss=eval_metric_loss,
        save_dir=save_dir, seed=seed, device=device, resume=True)
