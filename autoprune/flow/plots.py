"""Plots: one loss-vs-ratio curve per group (PaddleX's sensitivity visualisation, per group)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..engine.files import atomic_write


def plot_sensitivities(sens: Mapping[str, Mapping[float, float]], path: str | Path,
                       title: str = "Sensitivity per group", threshold: float | None = None
                       ) -> Path:
    """Write a PNG with one curve per group (loss against pruning ratio)."""
    # a Figure drawn by the Agg canvas directly: no pyplot, so the user's backend and open
    # figures are left alone (and no figure manager is set up and torn down)
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cmap = colormaps["tab20" if len(sens) <= 20 else "viridis"]
    n = 19 if len(sens) <= 20 else max(1, len(sens) - 1)
    for i, (name, points) in enumerate(sens.items()):
        ratios = sorted(points)
        ax.plot(ratios, [points[r] for r in ratios], marker="o", ms=3, lw=1.2,
                color=cmap(i / n), label=name)
    if threshold is not None:
        ax.axhline(threshold, color="red", ls="--", lw=1, label=f"eval_metric_loss={threshold}")
    ax.set_xlabel("pruning ratio of the group")
    ax.set_ylabel("relative metric loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(sens) <= 30:
        ax.legend(fontsize=6, ncol=2 if len(sens) > 12 else 1, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
    return path
