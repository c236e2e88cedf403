"""The estimate's check (issue 41): the images an adaptive analysis says before its points against
those it evaluates, replayed on the 27 target rows every change to the estimate was judged on
(benchmarks/README.md, "The estimate's second pilot" and "The estimate's bisected pilots").

Each row set is a folder that ``adaptive_replay.py`` made (a base model, its full table and every
point's per-image scores); the set is copied to ``--work`` first (a replay rewrites the folder's
``adaptive-*.json`` files, which ``bound_levers.py --points`` reads) and replayed there with the
current code: the real adaptive analysis, its estimate printed before it. Printed per row: the
images said, those evaluated and the error; then over the rows: the mean and largest error, the
rows outside +-30 %, the mean signed error and the images evaluated (what more pilots cost).

    python benchmarks/eta_rows.py                    # every set under runs/ (4 min, one core)
    python benchmarks/eta_rows.py --only m12,r1k     # some of them
    python benchmarks/eta_rows.py --only r224_500,r224_2k_g4    # the 224 px sets (AT_224)
    python benchmarks/eta_rows.py --only none --extra "r224: --models mobilenetv3_large_100 \\
        --size 224 --groups 12 --targets loss=0.05,flops=0.2"    # another folder, its settings

Making the folders once (about 40 min of two cores; each command as ``ROW_SETS`` lists its
settings, with ``--out runs/<folder>``; ``--measure-only`` stops after the full table; the
224 px sets of ``AT_224``, replayed only when ``--only`` names them, about 35 min a model on
one core):

    python benchmarks/adaptive_replay.py --models resnet18 --val-images 2000 \\
        --train-images 20000 --base-epochs 8 --groups 12 --out runs/trained2k --measure-only
"""
from __future__ import annotations

import argparse
import contextlib
import io
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbour adaptive_replay

import adaptive_replay as replay  # noqa: E402

TRAINED = ["--models", "resnet18", "--train-images", "20000", "--base-epochs", "8",
           "--groups", "12", "--targets", "loss=0.05,flops=0.3,flops=0.5,flops=0.7,latency=0.4"]
R18 = ["--models", "resnet18", "--groups", "12", "--targets", "loss=0.05,flops=0.1,flops=0.3,"
       "flops=0.5"]
MNV3 = ["--models", "mobilenetv3_large_100", "--groups", "30", "--targets", "loss=0.05,"
        "flops=0.1,flops=0.3,flops=0.5"]
# (label, folder under --runs, adaptive_replay.py's settings): 26 rows of resnet18 trained 8
# epochs on 20,000 images (2,000 and 10,000 val images), resnet18 and mobilenetv3_large_100
# trained 3 epochs on 4,000 (1,000 and 2,000 val images), and the 27th: mobilenetv3's first 12
# groups at -20 % FLOPs, the benchmark's one ETA outside +-30 % in session 79
ROW_SETS = [
    ("resnet18 8 epochs, 2,000", "trained2k", [*TRAINED, "--val-images", "2000"]),
    ("resnet18 8 epochs, 10,000", "trained10k", [*TRAINED, "--val-images", "10000"]),
    ("resnet18 3 epochs, 1,000", "r1k", [*R18, "--val-images", "1000"]),
    ("mobilenetv3 3 epochs, 1,000", "r1k", [*MNV3, "--val-images", "1000"]),
    ("resnet18 3 epochs, 2,000", "r2k", [*R18, "--val-images", "2000"]),
    ("mobilenetv3 3 epochs, 2,000", "r2k", [*MNV3, "--val-images", "2000"]),
    ("mobilenetv3 12 groups, 1,000", "m12", ["--models", "mobilenetv3_large_100", "--groups",
                                             "12", "--val-images", "1000", "--targets",
                                             "flops=0.2"]),
]

# at 224 px, on this CPU (sessions 80-81): resnet18's 12 groups on 500 images, and the first 4
# groups of resnet18 and mobilenetv3_large_100 on 2,000 (the input size and set size;
# where the estimate misses most: benchmarks/README.md, "At 224 px on this CPU" and "The same
# 4-group tables again"). Named with --only, as they take longer to make
R224_2K = ["--size", "224", "--val-images", "2000", "--groups", "4", "--targets",
           "loss=0.05,flops=0.1,flops=0.2"]
AT_224 = [
    ("resnet18 3 epochs, 500, 224 px", "r224_500",
     ["--models", "resnet18", "--size", "224", "--val-images", "500", "--groups", "12",
      "--targets", "loss=0.05,flops=0.3,flops=0.5"]),
    ("resnet18 2 epochs, 2,000, 224 px", "r224_2k_g4",
     ["--models", "resnet18", "--train-images", "2000", "--base-epochs", "2", *R224_2K]),
    ("mobilenetv3 3 epochs, 2,000, 224 px", "r224_2k_g4",
     ["--models", "mobilenetv3_large_100", "--train-images", "4000", "--base-epochs", "3",
      *R224_2K]),
]


def replayed(label: str, folder: Path, settings: list[str], work: Path) -> list[dict[str, Any]]:
    """The rows of one set: ``folder`` copied into ``work`` and replayed there with
    ``settings``; each row's label, target, images said and evaluated."""
    copy = work / folder.name
    if not copy.exists():
        shutil.copytree(folder, copy)
    with contextlib.redirect_stdout(io.StringIO()):  # its own table: the summary is ours
        rows = replay.main([*settings, "--out", str(copy)])
    return [{"set": label, "model": r["model"], "target": r["target"],
             "said": r["said_images"], "evaluated": r["adaptive_images"]} for r in rows]


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Over ``rows``: the mean and largest error of the images said (a share of those
    evaluated), the rows outside +-30 %, the mean signed error, the images evaluated."""
    errors = [r["said"] / r["evaluated"] - 1 for r in rows]
    return {"rows": len(rows), "mean": sum(map(abs, errors)) / max(1, len(errors)),
            "largest": max(map(abs, errors), default=0.0),
            "outside": sum(abs(e) > 0.3 for e in errors),
            "signed": sum(errors) / max(1, len(errors)),
            "evaluated": sum(r["evaluated"] for r in rows)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="runs", help="where adaptive_replay.py's folders are")
    p.add_argument("--work", default=None, help="where they are copied and replayed (default: "
                   "a temporary folder, removed after)")
    p.add_argument("--only", default="", help="the folders of ROW_SETS or AT_224 to replay "
                   "(default: every set of ROW_SETS; none: only --extra's)")
    p.add_argument("--extra", action="append", default=[], metavar="'FOLDER: SETTINGS'",
                   help="one more set: a folder under --runs and adaptive_replay.py's settings "
                   "for it (e.g. a GPU-measured 224 px table; repeatable)")
    p.add_argument("--quick", action="store_true", help="--runs is one folder that "
                   "adaptive_replay.py --quick made: its rows alone (what the test runs)")
    a = p.parse_args(argv)
    named = a.only.split(",") if a.only else []
    sets = [("quick", ".", ["--quick"])] if a.quick else \
        [s for s in ROW_SETS + AT_224 if s[1] in named or (not named and s in ROW_SETS)]
    for extra in a.extra:
        folder, _, settings = extra.partition(":")
        sets.append((folder.strip(), folder.strip(), shlex.split(settings)))
    missing = sorted({f for _, f, _ in sets if not (Path(a.runs) / f).is_dir()})
    if missing:
        raise SystemExit(f"no replay folder {', '.join(missing)} under {a.runs}: make it with "
                         f"adaptive_replay.py (see this script's docstring)")
    rows: list[dict[str, Any]] = []
    with (contextlib.nullcontext(a.work) if a.work else tempfile.TemporaryDirectory()) as work:
        Path(work).mkdir(parents=True, exist_ok=True)
        for label, folder, settings in sets:
            rows += replayed(label, (Path(a.runs) / folder).resolve(), settings, Path(work))
    print("| set (base model, val images) | model | target | images said | evaluated | error |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['set']} | {r['model']} | {r['target']} | {r['said']:,} | "
              f"{r['evaluated']:,} | {r['said'] / r['evaluated'] - 1:+.0%} |")
    s = summary(rows)
    print(f"{s['rows']} rows: mean error {s['mean']:.1%}, largest {s['largest']:.0%}, "
          f"{s['outside']} outside +-30 %, mean signed {s['signed']:+.1%}, "
          f"{s['evaluated']:,} images evaluated")
    return {"rows": rows, "summary": s}


if __name__ == "__main__":
    main()
