"""Sweep the model zoos autoprune builds: timm (the smallest member of every family), torchvision
classifiers, segmentation-models-pytorch architectures x the four documented encoders, and the
Ultralytics zoo (the smallest scale of each YOLO detection family, plus yolov9c / yolov9e, the
P2 / P6 heads, a P6 segmentation head, RT-DETR and the YOLO classification models). Each model
untrained, 0.3 removed from every prunable group, forward, save_pruned / load_model round trip with
identical outputs. One model per child process (forked from a server that imported the libraries
once) with a time limit; prints a line per model (name, input size, status, groups, FLOPs removed,
seconds), a markdown table of the results by source (timm split into convolutional families and
those with token-mixing layers: :func:`timm_kind`) and a last line
``ok=<n> refused=<r> failed=<f> total=<t>``.

    python benchmarks/zoo.py --quick                          # 8 models, four sources (~25 s)
    python benchmarks/zoo.py --only timm --jsonl zoo.jsonl    # one source (comma list allowed)
    python benchmarks/zoo.py timm/resnet18 smp/fpn/resnet34 yolov8n torchvision/alexnet
    python benchmarks/zoo.py                                  # all four sources (hours, 2 cores)
    python benchmarks/zoo.py --jsonl zoo.jsonl --resume       # the same, in pieces: skips the
                                                              # models zoo.jsonl already holds

Status: ``ok`` (pruned, runs, reloads to identical outputs), ``refused`` (autoprune refuses the
name with a ConfigError at ``arch_key`` / ``build``: one line with the reason), ``failed``
(any other exception, outputs that differ after the round trip, or no result within
``--timeout`` seconds). A ``--jsonl`` line holds the result, the stage reached, the seconds each
stage took (``t``) and the model's wall time (``wall``).

``--resume`` (with ``--jsonl FILE``) skips the models that already have a line in FILE (whatever
their status: delete a model's line to sweep it again) and prints the totals of the whole file,
so a sweep interrupted, or run in shards (``--only timm``, ``--only smp``...) over several
sessions, ends with the totals of all of it.

Which models:

- timm: ``timm.list_models()`` grouped into families. A family is the name up to its first ``_``
  or digit, a version tag ``v<digits>`` included (``resnet18d`` -> resnet, ``mobilenetv3_small_100``
  -> mobilenetv3, ``vit_tiny_patch16_224`` -> vit); the modifier prefixes ``tf_``, ``nf_``, ``dm_``,
  ``gc_``, ``eca_`` and ``legacy_`` join the next part (``tf_efficientnet``, ``eca_nfnet``), and
  timm's ``test_*`` miniatures are left out. Each family is represented by its member with the
  fewest parameters, counted on the meta device (no memory, no weights; ties: the name first in
  alphabetical order). A member that cannot be built on the meta device counts as the largest.
- torchvision: ``torchvision.models.list_models(module=torchvision.models)`` (the classifiers,
  as ``benchmarks/zoo_torchvision.py``), at that script's sizes.
- smp: every ``segmentation_models_pytorch`` architecture x resnet18, resnet34, mobilenet_v2,
  efficientnet-b0 (the encoders README.md names), 64 px (PAN: 128 px, the least it takes).
- yolo: the smallest scale of every family of ``autoprune.tasks.detection.names.YOLO_FAMILIES``
  and :data:`ULTRALYTICS_MORE` (yolov9c / yolov9e, P2 / P6 heads, yolov8n-seg-p6, rtdetr-l / x,
  yolov8n / yolo11n / yolo26n-cls), 64 px (RT-DETR: 128 px, the least it takes); each name goes
  to the task that prunes it (``task_of``: detection, instance segmentation, RT-DETR,
  classification), an unknown one to detection (whose refusal says why).

``--flow`` runs instead, per model, the one-call flow on small data (``pruned_flops=0.3`` with
a sensitivity analysis at ratio 0.3: Fashion-MNIST for a classifier, scenes whose val split is
the training images for the YOLO tasks and RT-DETR, a few epochs), then exports the pruned
checkpoint to ONNX and runs it in ONNX Runtime, and reloads it in a fresh process (outputs
equal to 1e-4): the checks too slow for the test suite on the large models (yolov9e, rtdetr-x).

    python benchmarks/zoo.py --flow yolo/yolov9e yolo/rtdetr-x --timeout 7200

Input size: 64 px; a classifier whose unpruned forward fails at 64 px runs at the least multiple
of its patch size above 64 px (a ViT whose patch does not divide 64), else at its native size,
timm's ``pretrained_cfg["input_size"]`` (a fixed position embedding, a window size).
Explicit names: ``timm/<name>``, ``torchvision/<name>``, ``smp/<arch>/<encoder>``, a YOLO name
(``yolov8n``, ``yolo/yolo26n``); a bare name goes to the classification task (timm first).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

SOURCES = ("timm", "torchvision", "smp", "yolo")
SMALL = 64
SMP_ENCODERS = ("resnet18", "resnet34", "mobilenet_v2", "efficientnet-b0")
TIMM_MODIFIERS = ("tf", "nf", "dm", "gc", "eca", "legacy")
# a fixed sample across the four sources: models that prune today (a CSP stage, an attention
# model), plus two refused by name
QUICK = ["timm/mobilenetv3_small_050", "timm/cs3darknet_focus_s", "timm/edgenext_xx_small",
         "timm/dpn48b", "torchvision/squeezenet1_1", "smp/unet/resnet18", "yolo/yolov8n",
         "yolo/yolo11n-p2"]
# the rest of the Ultralytics zoo, beside the smallest scale of each YOLO detection family
ULTRALYTICS_MORE = ["yolov9c", "yolov9e", "yolov8n-p2", "yolo26n-p2", "yolov8n-p6", "yolo26n-p6",
                    "yolov8n-seg-p6", "rtdetr-l", "rtdetr-x", "yolov8n-cls", "yolo11n-cls",
                    "yolo26n-cls"]
SMP_NATIVE = {"pan": 128}  # PAN's pyramid pooling needs 128 px


# -- the per-model worker (runs in a child process) ----------------------------------------------
def sweep_one(name: str, state: dict | None = None) -> dict:
    """Build, prune 0.3 of every group, run and round-trip one model; its figures and stage times.
    ``state`` gets the input size and the stage reached (build, groups, prune, forward, reload),
    so a failure says where it happened.

    Every autoprune import is here (the adapters, the core, the checkpoint reader), so a move of
    an import path is one edit."""
    import torch

    from autoprune import prunable_groups, prune, save_pruned
    from autoprune.flow.checkpoints import load_model
    from autoprune.tasks import get_adapter

    torch.set_num_threads(1)
    torch.manual_seed(0)
    source, bare = split_name(name)
    start, times = time.time(), {}
    state = {} if state is None else state

    def reach(stage: str) -> None:  # also printed: a timed-out child says where it was
        state["stage"] = stage
        print("STAGE " + json.dumps(state), flush=True)

    reach("build")

    task = yolo_task(bare) if source == "yolo" else None

    def adapter_for(size: int):
        if source == "smp":
            return get_adapter("segmentation", num_classes=3, input_size=size)
        if source == "yolo" and task != "classification":
            return get_adapter(task, nc=3, input_size=size)
        return get_adapter("classification", num_classes=10, input_size=size)

    size = TORCHVISION_NATIVE.get(bare, SMALL) if source == "torchvision" else \
        SMP_NATIVE.get(bare.split("/")[0].lower(), SMALL) if source == "smp" else \
        least_size(task) if source == "yolo" else SMALL
    state["size"] = size
    adapter = adapter_for(size)
    arch = adapter.arch_key(bare if source in ("smp", "yolo") else name)
    model = adapter.build(arch).eval()
    adapter.check_model(model)  # e.g. an input size the model cannot take: a one-line refusal
    if source in ("timm", "torchvision"):  # a size the model takes where 64 px does not run
        for retry in [*retry_sizes(model, size), None]:
            try:
                with torch.no_grad():
                    model(adapter.example_inputs(model))
                break
            except Exception:  # noqa: BLE001 - retried at a patch multiple, then its own size
                if retry is None:
                    raise
                size, adapter = retry, adapter_for(retry)
                state["size"] = size
    times["build"] = time.time() - start
    reach("groups")
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = prunable_groups(model, x, ignored)
    state["groups"] = len(groups)
    times["groups"] = time.time() - start
    reach("prune")
    result = prune(model, x, {g.name: 0.3 for g in groups}, ignored_layers=ignored)
    times["prune"] = time.time() - start
    reach("forward")
    model.eval()
    with torch.no_grad():
        y = _tensors(model(x))
    reach("reload")
    tmp = tempfile.TemporaryDirectory(prefix="autoprune-zoo-")
    path = Path(tmp.name) / "m.pt"
    save_pruned(model, path, task=adapter.task, arch=arch, build=adapter.build_kwargs(model),
                input_size=size, pruned=True)
    with torch.no_grad():
        z = _tensors(load_model(path, adapter).eval()(x))
    tmp.cleanup()  # a large timm model's checkpoint is GBs; hundreds of them would fill the disk
    same = len(y) == len(z) and all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(y, z))
    finite = all(torch.isfinite(a).all() for a in y if a.is_floating_point())
    times["total"] = time.time() - start
    error = None if same and finite else ("outputs differ after the round trip" if not same
                                          else "non-finite outputs after pruning")
    return {"status": "failed" if error else "ok", "size": size, "groups": len(groups),
            "flops_red": round(result.flops_reduction, 3), **({"error": error} if error else {}),
            "t": {k: round(v, 1) for k, v in times.items()}}


def yolo_task(name: str) -> str:
    """The task that prunes the Ultralytics model ``name`` (detection, instance segmentation,
    RT-DETR, classification); detection for a name no task takes (its refusal says why)."""
    from autoprune.errors import ConfigError
    from autoprune.flow.registry import task_of

    try:
        return task_of(name)
    except ConfigError:
        return "detection"


def least_size(task: str) -> int:
    """64 px, or the least input size the task's models take (RT-DETR: 128)."""
    from autoprune.flow.registry import get_task

    return max(SMALL, getattr(get_task(task).adapter_class(), "least_input_size", SMALL))


def retry_sizes(model, size: int) -> list[int]:
    """The input sizes to try, in order, when ``model`` does not run at ``size``: the least
    multiple of its patch size not below ``size`` (a ViT whose patch does not divide 64 px:
    DeepSeek-ViT's 14 px patches run at 70 px, not at its native 546 px, where a 412M-parameter
    model takes minutes on 2 cores), then its native size (a fixed position embedding, a
    window size)."""
    sizes = []
    patch = _patch_size(model)
    if patch and size % patch:
        sizes.append(-(-size // patch) * patch)
    native = _native_size(model)
    if native and native != size and native not in sizes:
        sizes.append(native)
    return sizes


def _patch_size(model) -> int | None:
    """The patch side of the first patch embedding of ``model`` (timm ``PatchEmbed``: a
    ``patch_size`` attribute, an int or a pair), or None."""
    for module in model.modules():
        patch = getattr(module, "patch_size", None)
        if isinstance(patch, (tuple, list)) and patch and all(isinstance(p, int) for p in patch):
            patch = max(patch)
        if isinstance(patch, int) and patch > 1:
            return patch
    return None


def _native_size(model) -> int | None:
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    size = cfg.get("input_size") if isinstance(cfg, dict) else None
    return int(size[-1]) if size else None


def _tensors(out) -> list:
    """Every tensor of a (nested) model output, in order."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def flow(name: str, state: dict | None = None) -> dict:
    """``--flow``: the one-call flow of ``name`` on small data, ONNX in ONNX Runtime and a
    fresh-process reload (:mod:`zoo_flow`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from zoo_flow import flow_one

    state = {} if state is None else state
    source, bare = split_name(name)
    if source == "smp":
        raise ValueError("--flow runs classifiers and the Ultralytics zoo, not smp models")
    task = yolo_task(bare) if source == "yolo" else "classification"
    model = bare if task == "classification" and source == "yolo" else \
        f"{bare}.yaml" if source == "yolo" else name
    state["size"] = least_size(task)

    def reach(stage: str) -> None:
        state["stage"] = stage
        print("STAGE " + json.dumps(state), flush=True)

    return flow_one(task, model, state["size"], reach)


def _child(name: str, run_flow: bool = False) -> None:
    warnings.filterwarnings("ignore")
    state: dict = {}
    try:
        res = flow(name, state) if run_flow else sweep_one(name, state)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        where = traceback.extract_tb(e.__traceback__)[-1]
        first = (str(e).strip().splitlines() or [""])[0]
        refused = type(e).__name__ == "ConfigError"
        res = {"status": "refused" if refused else "failed",
               "error": f"{'' if refused else type(e).__name__ + ': '}{first[:300]}",
               "where": f"{where.filename.split('site-packages/')[-1]}:{where.lineno}", **state}
    if split_name(name)[0] == "timm":  # here, where timm is imported already (see summary)
        res["kind"] = timm_kind(name)
    print("RESULT " + json.dumps(res), flush=True)


# -- which models --------------------------------------------------------------------------------
TORCHVISION_NATIVE = {"maxvit_t": 224, "inception_v3": 96, "vit_b_16": 224, "vit_b_32": 224,
                      "vit_l_16": 224, "vit_l_32": 224, "vit_h_14": 224}


def split_name(name: str) -> tuple[str, str]:
    """(source, name within the source) of ``timm/x``, ``torchvision/x``, ``smp/arch/enc``,
    ``yolo/x`` or a bare name (a YOLO name, else classification: timm first)."""
    head, _, rest = name.partition("/")
    if head in SOURCES and rest:
        return head, rest
    if re.match(r"yolo|rtdetr", name, re.I):
        return "yolo", name
    return "timm", name  # the classification adapter looks a bare name up (timm, then torchvision)


def timm_family(name: str) -> str:
    """``resnet18d`` -> resnet, ``mobilenetv3_small_100`` -> mobilenetv3, ``tf_efficientnet_b0``
    -> tf_efficientnet (see the module docstring)."""
    parts = name.split("_")
    if parts[0] in TIMM_MODIFIERS and len(parts) > 1:
        return parts[0] + "_" + timm_family("_".join(parts[1:]))
    m = re.match(r"[a-z]+?(?:v\d+)?(?=\d|_|$)", name)
    return m.group(0) if m else parts[0]


def timm_params(names: list[str]) -> dict[str, float]:
    """Parameter count of each model, built on the meta device (inf where that fails)."""
    import timm
    import torch

    counts = {}
    for n in names:
        try:
            with torch.device("meta"):
                model = timm.create_model(n, pretrained=False, num_classes=10)
            counts[n] = float(sum(p.numel() for p in model.parameters()))
        except Exception:  # noqa: BLE001 - counted as the largest of its family
            counts[n] = float("inf")
    return counts


# module classes that mix tokens (positions) with attention, an MLP across positions or an LSTM;
# channel attention inside a CNN (SE, ECA, CBAM, split and selective-kernel attention) does not
CHANNEL_ATTENTION = {"SplitAttn", "SelectiveKernelAttn", "ChannelAttn", "SpatialAttn",
                     "LightChannelAttn", "LightSpatialAttn"}
TOKEN_MIXING = re.compile(r"Attention|Attn$|^LambdaLayer$|^MlpMixer$|^LSTM")


def timm_kind(name: str) -> str:
    """``"cnn"`` when the timm model ``name`` (built on the meta device) has no token-mixing
    layer (self-attention, MLP across positions, LSTM; see ``TOKEN_MIXING``), else
    ``"attention/mlp"``; ``"unknown"`` when it cannot be built there."""
    import timm
    import torch

    try:
        with torch.device("meta"):
            model = timm.create_model(name.removeprefix("timm/"), pretrained=False, num_classes=10)
    except Exception:  # noqa: BLE001 - reported as unknown
        return "unknown"
    classes = {type(m).__name__ for m in model.modules()} - CHANNEL_ATTENTION
    return "attention/mlp" if any(TOKEN_MIXING.search(c) for c in classes) else "cnn"


def timm_names() -> list[str]:
    """The smallest member (by parameter count) of every timm family, by family name."""
    import timm

    families: dict[str, list[str]] = {}
    for n in timm.list_models():
        fam = timm_family(n)
        if fam != "test":
            families.setdefault(fam, []).append(n)
    counts = timm_params([n for members in families.values() for n in members])
    return [f"timm/{min(members, key=lambda n: (counts[n], n))}"
            for _, members in sorted(families.items())]


def torchvision_names() -> list[str]:
    import torchvision

    return [f"torchvision/{n}" for n in torchvision.models.list_models(module=torchvision.models)]


def smp_names() -> list[str]:
    import segmentation_models_pytorch as smp

    return [f"smp/{a}/{e}" for a in smp.MODEL_ARCHITECTURES_MAPPING for e in SMP_ENCODERS]


def yolo_names() -> list[str]:
    from autoprune.tasks.detection.names import YOLO_FAMILIES, resolve_arch

    return [f"yolo/{resolve_arch(fam + scales[:1])}" for fam, scales in YOLO_FAMILIES.items()] \
        + [f"yolo/{name}" for name in ULTRALYTICS_MORE]


LISTS = {"timm": timm_names, "torchvision": torchvision_names, "smp": smp_names,
         "yolo": yolo_names}


# -- the sweep -----------------------------------------------------------------------------------
# the libraries the children need, imported once by the fork server that forks them: a child
# then starts in a fraction of a second instead of the 6 s those imports take. Only the sources
# of the models a sweep runs are imported (a torchvision-only sweep does not import Ultralytics).
PRELOAD = {"*": ["torch", "autoprune", "onnxruntime"],
           "timm": ["timm", "autoprune.tasks.classification"],
           "torchvision": ["torchvision", "autoprune.tasks.classification"],
           "smp": ["segmentation_models_pytorch", "autoprune.tasks.segmentation"],
           "yolo": ["autoprune.tasks.detection", "autoprune.tasks.rtdetr",
                    "autoprune.tasks.classification"]}
_CHILD_ENV = {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
_forks = None


def preload(sources: set[str]) -> list[str]:
    """The modules the fork server imports for models of ``sources`` (:data:`PRELOAD`)."""
    modules = list(PRELOAD["*"])
    for source in sorted(sources):
        modules += [m for m in PRELOAD.get(source, ()) if m not in modules]
    return modules


def forks(sources: set[str] = frozenset(PRELOAD)):
    """The multiprocessing context whose fork server holds :func:`preload` of ``sources``
    (started on first use, with :data:`_CHILD_ENV`; a module it cannot import is skipped)."""
    global _forks
    if _forks is None:
        import multiprocessing

        os.environ.update(_CHILD_ENV)  # the server and its children read them at start
        _forks = multiprocessing.get_context("forkserver")
        _forks.set_forkserver_preload(preload(set(sources)))
    return _forks


def _forked_child(name: str, run_flow: bool, out: str) -> None:
    """A forked child's body: :func:`_child` with stdout and stderr in the file ``out``."""
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    _child(name, run_flow)


def run_one(name: str, timeout: int, run_flow: bool = False) -> dict:
    """Sweep ``name`` (``run_flow``: its one-call flow) in a child process forked from the fork
    server (:func:`forks`); its result, or a failure (a crash, a timeout)."""
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="autoprune-zoo-") as tmp:
        out = os.path.join(tmp, "output.txt")
        child = forks().Process(target=_forked_child, args=(name, run_flow, out), daemon=True)
        child.start()
        child.join(timeout)
        timed_out = child.is_alive()
        if timed_out:
            child.kill()
            child.join()
        stdout = Path(out).read_text(errors="replace") if os.path.exists(out) else ""
    results = _tagged(stdout, "RESULT ")
    if timed_out:
        res = {"status": "failed", "error": f"no result within {timeout} s"}
    elif results:
        res = results[-1]
    else:
        tail = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
        res = {"status": "failed", "error": f"exit code {child.exitcode}: "
                                            f"{(tail or ['no output'])[-1][:300]}"}
    stages = _tagged(stdout, "STAGE ")
    res = {**(stages[-1] if stages else {}), **res}
    res.update(name=name, source=split_name(name)[0], wall=round(time.time() - start, 1))
    return res


def _tagged(stdout: str, tag: str) -> list[dict]:
    return [json.loads(ln[len(tag):]) for ln in stdout.splitlines() if ln.startswith(tag)]


def line(res: dict) -> str:
    """``<name> <size> px  ok: <groups> groups, FLOPs -<x> %  (<s> s)``, ``refused: <reason>`` or
    ``failed (<stage>): <error>``."""
    size = f"{res['size']:4d} px" if res.get("size") else "   - px"
    if res["status"] == "ok":
        detail = f"ok: {res['groups']} groups, FLOPs -{100 * res['flops_red']:.0f} %"
    elif res["status"] == "refused":
        detail = f"refused: {res.get('error', '')}"
    else:
        stage = f" ({res['stage']})" if res.get("stage") else ""
        detail = f"failed{stage}: {res.get('error', '')}"
    if res.get("flow"):
        detail += "  flow: " + ", ".join(f"{k} {v}" for k, v in res["flow"].items())
    return f"{res['name']:44s} {size}  {detail}  ({res['wall']} s)"


def read_results(path: str) -> dict[str, dict]:
    """The last result per model name in the ``--jsonl`` file ``path`` (empty if there is none);
    a line that does not parse, or has no name or known status (cut short by a killed sweep),
    is skipped."""
    results: dict[str, dict] = {}
    if not os.path.exists(path):
        return results
    with open(path) as f:
        for ln in f:
            try:
                res = json.loads(ln)
            except json.JSONDecodeError:
                continue
            if isinstance(res, dict) and isinstance(res.get("name"), str) and \
                    res.get("status") in ("ok", "refused", "failed"):
                results[res["name"]] = res
    return results


def _open_for_append(path: str):
    """``path`` opened for appending, on a line of its own (a sweep killed mid-write leaves a
    last line without its newline)."""
    if os.path.exists(path) and os.path.getsize(path):
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            cut = f.read(1) != b"\n"
        if cut:
            with open(path, "a") as f:
                f.write("\n")
    return open(path, "a")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="models (default: every model of the sources)")
    p.add_argument("--quick", action="store_true", help=f"a fixed sample of {len(QUICK)} models")
    p.add_argument("--only", help="sources, comma-separated: " + ", ".join(SOURCES))
    p.add_argument("--timeout", type=int, default=120, help="seconds per model (default 120)")
    p.add_argument("--jsonl", help="also append each result to this file")
    p.add_argument("--resume", action="store_true",
                   help="with --jsonl: skip the models the file already holds; the totals count "
                        "the whole file")
    p.add_argument("--flow", action="store_true",
                   help="run each model's one-call flow on small data, ONNX Runtime and a "
                        "fresh-process reload instead of the prune-and-reload sweep")
    p.add_argument("--child", metavar="NAME", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, args.flow)
        return {}
    sources = [s.strip() for s in (args.only or ",".join(SOURCES)).split(",") if s.strip()]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        p.error(f"unknown source(s) {', '.join(unknown)}: choose from {', '.join(SOURCES)}")
    if args.resume and not args.jsonl:
        p.error("--resume needs --jsonl FILE: the results of the earlier runs to skip")
    if args.names:
        names = args.names
    elif args.quick:
        names = [n for n in QUICK if split_name(n)[0] in sources]
    else:
        names = [n for s in sources for n in LISTS[s]()]
    results = read_results(args.jsonl) if args.resume else {}
    todo = [n for n in names if n not in results]
    if args.resume:
        print(f"# {len(names) - len(todo)} of {len(names)} models already in {args.jsonl} "
              f"(skipped), {len(results)} in all", flush=True)
    out = _open_for_append(args.jsonl) if args.jsonl else None
    start = time.time()
    if todo:
        forks({split_name(n)[0] for n in todo})
    for name in todo:
        res = run_one(name, args.timeout, args.flow)
        results[name] = res
        print(line(res), flush=True)
        if out:
            out.write(json.dumps(res) + "\n")
            out.flush()
    if out:
        out.close()
    print(f"# {len(todo)} models in {time.time() - start:.0f} s", flush=True)
    counts = {"ok": 0, "refused": 0, "failed": 0}
    for res in results.values():  # this run's models; with --resume, the whole file's
        counts[res["status"]] += 1
    print(summary(results), flush=True)
    print(f"ok={counts['ok']} refused={counts['refused']} failed={counts['failed']} "
          f"total={sum(counts.values())}", flush=True)
    return counts


def summary(results: dict[str, dict]) -> str:
    """A markdown table of the results by source (timm split into convolutional families and
    those with token-mixing layers: the ``kind`` the child recorded, else :func:`timm_kind`,
    which imports timm) and status."""
    rows: dict[str, dict[str, int]] = {}
    for name, res in results.items():
        source = res.get("source") or split_name(name)[0]
        if source == "timm":
            source = f"timm ({res.get('kind') or timm_kind(name)})"
        row = rows.setdefault(source, {"ok": 0, "refused": 0, "failed": 0})
        row[res["status"]] += 1
    lines = ["| source | ok | refused | failed | ok share |", "|---|---:|---:|---:|---:|"]
    for source, row in sorted(rows.items()):
        total = sum(row.values())
        lines.append(f"| {source} | {row['ok']} | {row['refused']} | {row['failed']} | "
                     f"{row['ok'] / total:.0%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
