"""Where the estimate said before an adaptive analysis misses, group by group (issue 41).

``adaptive_replay.py`` prints, per target, the images the estimate said before the analysis
beside those it evaluated. This script replays the same analyses on what it kept (each point's
per-image scores, ``<replay>/<model>/scores.pt``, and the full table) and prints, for each
group, the points and images the estimate predicted (its plays' mean) against the points the
analysis measured and the images each took, with the pilot's loss at the top ratio beside the
full table's and the group's whole curve: the rows to read before changing the estimate.

    python benchmarks/adaptive_replay.py --models resnet18 --val-images 2000 \\
        --targets loss=0.05 --out runs/r2k                                 # first
    python benchmarks/eta_groups.py --replay runs/r2k --models resnet18 --val-images 2000 \\
        --targets loss=0.05,flops=0.5
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbour adaptive_replay
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import adaptive_replay as replay  # noqa: E402
from autoprune.engine import adaptive_analysis  # noqa: E402
from autoprune.engine.adaptive_eta import expected_loss  # noqa: E402
from autoprune.flow.sensitivities import TaskEval  # noqa: E402


@contextlib.contextmanager
def kept_prediction() -> Iterator[dict[str, Any]]:
    """While inside, each adaptive analysis's prediction (``predicted_shares``' answer, its
    pilots copied before the analysis takes them) is kept in the dict yielded."""
    got: dict[str, Any] = {}
    real = adaptive_analysis.predicted_shares

    def keep(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        got.update(shares=out, pilots=dict((out or {}).get("pilots", {})))
        return out

    adaptive_analysis.predicted_shares = keep
    try:
        yield got
    finally:
        adaptive_analysis.predicted_shares = real


def group_rows(record: Any, got: dict[str, Any], full: dict[str, dict[str, float]],
               total: int) -> list[dict[str, Any]]:
    """Per group of ``full``: the predicted ``{ratio: images}``, the measured ones, the pilot's
    expected loss at the top ratio (None where there was none) and the full table's."""
    predicted = (got.get("shares") or {}).get("predicted", {})
    rows = []
    for group, curve in full.items():
        top = max(float(r) for r in curve)
        measured = {float(r): int(record.intervals.get(group, {}).get(r, {}).get("images", total))
                    for r in record.sensitivities.get(group, {})}
        pilot = got.get("pilots", {}).get((group, top))
        rows.append({"group": group, "curve": {float(r): v for r, v in curve.items()},
                     "predicted": {float(r): n for (g, r), n in predicted.items() if g == group},
                     "measured": measured, "top_true": curve[f"{top:.2f}"],
                     "top_pilot": expected_loss(pilot.counts) if hasattr(pilot, "counts")
                     else None})
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    replay.replay_arguments(p)
    p.add_argument("--targets", default="loss=0.05,flops=0.5")
    a = replay.quick_settings(p.parse_args(argv))
    out = []
    for name in a.models.split(","):
        work = Path(a.replay) / name
        if not (work / "full.json").is_file():
            raise SystemExit(f"{work / 'full.json'} is missing: run adaptive_replay.py with the "
                             f"same settings and --out {a.replay} first")
        full = json.loads((work / "full.json").read_text())["sensitivities"]
        adapter, model = replay.base_model(name, a, work)
        groups = [g for g in replay.cost.groups_of(model, adapter, 0) if g in full]
        evaluate = replay.ReplayEval(TaskEval(adapter), work / "scores.pt")
        for target in a.targets.split(","):
            with kept_prediction() as got:
                _, record, said = replay.analyze(adapter, model, evaluate, groups,
                                                 work / f"eta-{target}.json", adaptive=True,
                                                 target=target)
            real = int(record.extra["evaluation"]["images_evaluated"])
            rows = group_rows(record, got, {g: full[g] for g in groups}, evaluate.images)
            out.append({"model": name, "target": target, "said": said, "real": real,
                        "groups": rows})
            print(f"\n{name}, {target}: said {said:,} images, evaluated {real:,} "
                  f"({said / real - 1:+.0%})")
            n = evaluate.images
            for r in rows:
                pilot = "-" if r["top_pilot"] is None else f"{r['top_pilot']:.4f}"
                print(f"  {r['group']:28s} predicted {len(r['predicted']):4.1f} points "
                      f"{sum(r['predicted'].values()) / n:5.2f} sets, measured "
                      f"{len(r['measured'])} points {sum(r['measured'].values()) / n:5.2f} sets;"
                      f" top loss: pilot {pilot}, table {r['top_true']:.4f}")
                print("    curve:    " + " ".join(f"{v:+.4f}" for _, v in
                                                  sorted(r["curve"].items())))
                print("    measured: " + " ".join(f"{k:.1f}:{v / n:.2f}" for k, v in
                                                  sorted(r["measured"].items())))
                print("    predicted: " + " ".join(f"{k:.1f}:{v / n:.2f}" for k, v in
                                                   sorted(r["predicted"].items())))
    return out


if __name__ == "__main__":
    main()
