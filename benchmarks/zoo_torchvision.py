"""Sweep the torchvision classification zoo: each model untrained (10 classes), 0.3 removed from
every prunable group, forward, save_pruned / load_model round trip with identical outputs. One model
per subprocess with a time limit; prints a line per model and a last line
``ok=<n> refused=<r> failed=<f> total=<t>``.

    python benchmarks/zoo_torchvision.py                      # the whole zoo (about 9 min, 2 cores)
    python benchmarks/zoo_torchvision.py resnet18 vit_b_16    # some models
    python benchmarks/zoo_torchvision.py --timeout 120 --jsonl zoo.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

# input sizes the model needs (the others run at 64 px)
NATIVE = {"maxvit_t": 224, "inception_v3": 96, "vit_b_16": 224, "vit_b_32": 224, "vit_l_16": 224,
          "vit_l_32": 224, "vit_h_14": 224}


def sweep_one(name: str, size: int) -> dict:
    """Prune, run and round-trip one torchvision model; its figures and stage times."""
    import torch

    from autoprune import prunable_groups, prune, save_pruned
    from autoprune.flow.checkpoints import load_model
    from autoprune.tasks.classification import ClassificationAdapter

    torch.set_num_threads(1)
    torch.manual_seed(0)
    start, times = time.time(), {}
    adapter = ClassificationAdapter(num_classes=10, input_size=size)
    arch = adapter.arch_key(f"torchvision/{name}")
    model = adapter.build(arch).eval()
    times["build"] = time.time() - start
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = prunable_groups(model, x, ignored)
    times["groups"] = time.time() - start
    result = prune(model, x, {g.name: 0.3 for g in groups}, ignored_layers=ignored)
    times["prune"] = time.time() - start
    with torch.no_grad():
        y = model(x)
    tmp = tempfile.TemporaryDirectory(prefix="autoprune-zoo-")
    path = Path(tmp.name) / "m.pt"
    save_pruned(model, path, task="classification", arch=arch, build=adapter.build_kwargs(model),
                input_size=size)
    with torch.no_grad():
        same = torch.equal(y, load_model(path, adapter)(x))
    tmp.cleanup()
    times["total"] = time.time() - start
    return {"status": "ok" if same else "failed", "groups": len(groups),
            "flops_red": round(result.flops_reduction, 3),
            **({} if same else {"error": "outputs differ after the round trip"}),
            "t": {k: round(v, 1) for k, v in times.items()}}


def _child(name: str, size: int) -> None:
    warnings.filterwarnings("ignore")
    try:
        res = sweep_one(name, size)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        where = traceback.extract_tb(e.__traceback__)[-1]
        res = {"status": "refused" if type(e).__name__ == "ConfigError" else "failed",
               "error": f"{type(e).__name__}: {str(e)[:200]}",
               "where": f"{where.filename.split('site-packages/')[-1]}:{where.lineno}"}
    print("RESULT " + json.dumps(res))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="models (default: the whole zoo)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per model (default 600)")
    p.add_argument("--jsonl", help="also append each result to this file")
    p.add_argument("--child", nargs=2, metavar=("NAME", "SIZE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return _child(args.child[0], int(args.child[1]))
    import torchvision

    names = args.names or torchvision.models.list_models(module=torchvision.models)
    out = open(args.jsonl, "a") if args.jsonl else None
    counts = {"ok": 0, "refused": 0, "failed": 0}
    for name in names:
        size, start = NATIVE.get(name, 64), time.time()
        try:
            run = subprocess.run([sys.executable, __file__, "--child", name, str(size)],
                                 capture_output=True, text=True, timeout=args.timeout,
                                 env={**os.environ, "PYTHONWARNINGS": "ignore"})
            lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
            res = json.loads(lines[-1][7:]) if lines else {"status": "failed",
                                                           "error": run.stderr[-300:]}
        except subprocess.TimeoutExpired:
            res = {"status": "failed", "error": f"no result within {args.timeout} s"}
        res.update(name=name, size=size, wall=round(time.time() - start, 1))
        counts[res["status"]] += 1
        detail = (f"{res['groups']} groups, FLOPs -{100 * res['flops_red']:.0f} %"
                  if res["status"] == "ok" else res.get("error", ""))
        print(f"{name:24s} {size:4d} px  {res['status']:8s} {detail}  ({res['wall']} s)",
              flush=True)
        if out:
            out.write(json.dumps(res) + "\n")
            out.flush()
    print(f"ok={counts['ok']} refused={counts['refused']} failed={counts['failed']} "
          f"total={sum(counts.values())}")


if __name__ == "__main__":
    main()
