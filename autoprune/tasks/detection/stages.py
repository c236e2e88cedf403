"""What a finished detection training stage leaves behind: autoprune's checkpoint loaded back into
the model, the EMA weights of Ultralytics' own checkpoints, and those checkpoints written back with
native Ultralytics blocks so that ``YOLO(path)`` loads them without autoprune."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from ...engine.checkpoint import read_state_dict
from ...engine.distributed import rank_and_world
from ...errors import CheckpointError
from . import models as yolo


def write_deployable(save_dir: Path) -> None:
    """Write the Ultralytics checkpoints of a finished training stage (``save_dir/ultralytics/
    weights/best.pt``, ``last.pt``) with native Ultralytics blocks, so that ``YOLO(path)`` loads
    them without autoprune (:func:`~.models.write_native`), and say so in one line (or where that
    could not be done). Rank 0 only; a file already written back is left as it is."""
    if rank_and_world()[0] != 0:
        return
    for name in ("best.pt", "last.pt"):
        path = save_dir / "ultralytics" / "weights" / name
        if not path.is_file():
            continue
        done = yolo.write_native(path)
        if done.left:
            print(f"[autoprune] note: {path} keeps autoprune's split-free form in "
                  f"{', '.join(done.left[:3])}{', ...' if len(done.left) > 3 else ''}: YOLO() "
                  f"loads it only where autoprune is installed; elsewhere deploy the ONNX export "
                  f"(autoprune export {save_dir / 'best.pt'} model.onnx)", flush=True)
        elif done.changed and name == "best.pt":
            extra = done.padded_params / max(done.params, 1) - 1
            print(f"[autoprune] {path} holds Ultralytics' own blocks: YOLO(path) loads it without "
                  f"autoprune (zero channels that even out split blocks add {extra:.1%} "
                  f"parameters; `autoprune export` writes the exact pruned model)", flush=True)


def load_checkpoint(model: nn.Module, path: Path) -> None:
    """``model`` loaded with the weights of autoprune's checkpoint ``path`` (weights-only)."""
    try:
        model.load_state_dict(read_state_dict(path))
    except RuntimeError:
        raise CheckpointError(f"{path} does not fit this model (another architecture or "
                              f"pruning?): resume with the same settings, or pass "
                              f"resume=False") from None


def ema_state(path: Path) -> dict[str, torch.Tensor]:
    """The (float) EMA weights of an Ultralytics checkpoint this run has written (split-free,
    or written back with native blocks: then split again, without the padding)."""
    net, _ = yolo.read_ultralytics(path)
    net = yolo.patch_model(net)
    return {k: v.float() if v.is_floating_point() else v for k, v in net.state_dict().items()}
