"""The rest of the Ultralytics zoo (issue 42): YOLOv9c / YOLOv9e (ADown's halves kept equal and
matched, CBLinear's parts split into convs), the P2 / P6 heads, YOLO classification models
through the classification task, and the refusal of an input size a model's forward cannot
take. Each model: pruned 0.3 per group, forward, FLOPs down, reloaded in a fresh process equal,
ONNX run by ONNX Runtime. Untrained models, 32-64 px; YOLOv9c's mechanism is tested on an
eighth-width copy (the full model is in the module fixture at 32 px, yolov9e in
benchmarks/zoo.py)."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

import autoprune
from autoprune.tasks import get_adapter
from autoprune.tasks.detection import models as yolo
from autoprune.tasks.detection.names import resolve_arch
from autoprune.tasks.detection.native import to_native

from conftest import assert_one_line, child_pythonpath, needs_fmnist, randomize_norms

ROOT = Path(__file__).resolve().parents[1]


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


def _first(out):
    """The prediction tensor of a YOLO / classifier output."""
    while isinstance(out, (list, tuple)):
        out = out[0]
    return out


def small_yolov9c(nc: int = 3) -> torch.nn.Module:
    """yolov9c at an eighth of its width and a third of its depth, untrained."""
    cfg = yaml.safe_load((Path(yolo.ultralytics.__file__).parent / "cfg" / "models" / "v9" /
                          "yolov9c.yaml").read_text())
    cfg.update(depth_multiple=0.33, width_multiple=0.125)
    torch.manual_seed(0)
    with yolo.quiet():
        return randomize_norms(yolo.DetectionModel(cfg, nc=nc, verbose=False)).eval()


# -- YOLOv9: ADown and CBLinear ------------------------------------------------------------------
@pytest.mark.parametrize("family", ["yolov9c", "yolov9e"])
def test_yolov9_twins_are_exact_and_write_back_as_ultralytics_blocks(family):
    with yolo.quiet():
        original = small_yolov9c() if family == "yolov9c" else randomize_norms(
            yolo.DetectionModel(copy.deepcopy(MINI_V9E), verbose=False)).eval()
    patched = yolo.patch_model(copy.deepcopy(original))
    assert yolo.is_patched(patched) and not yolo.is_patched(original)
    assert any(isinstance(m, yolo.ADownMatched) for m in patched.modules())
    assert (family == "yolov9e") == any(isinstance(m, yolo.CBLinearSplitFree)
                                        for m in patched.modules())
    assert all(hasattr(m, "f") and hasattr(m, "i") for m in patched.model)
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = _first(original(x))
        assert _rel_diff(_first(patched(x)), want) <= 1e-5
        with torch.enable_grad():  # the traced forward (halves coupled) computes the same
            assert _rel_diff(_first(patched(x)), want) <= 1e-5
    native = copy.deepcopy(patched)
    assert to_native(native) == []
    kinds = {type(m) for m in native.modules()}
    assert yolo.ADownMatched not in kinds and yolo.CBLinearSplitFree not in kinds
    with torch.no_grad():
        assert _rel_diff(_first(native(x)), want) <= 1e-5


# a yolov9e in miniature: ADown after a plain Conv and after a CBFuse, CBLinear parts fused into
# two stages, a concat of an ADown with another branch (Ultralytics' yolov9e takes minutes to
# analyse here; it is swept by benchmarks/zoo.py)
MINI_V9E = {"nc": 3, "backbone": [
    [-1, 1, "nn.Identity", []], [-1, 1, "Conv", [16, 3, 2]], [-1, 1, "Conv", [32, 3, 2]],
    [-1, 1, "ADown", [32]], [2, 1, "CBLinear", [[16, 32]]], [0, 1, "Conv", [16, 3, 2]],
    [[4, -1], 1, "CBFuse", [[0]]], [-1, 1, "Conv", [32, 3, 2]], [[4, -1], 1, "CBFuse", [[1]]],
    [-1, 1, "ADown", [64]], [[-1, 3], 1, "Concat", [1]], [-1, 1, "Conv", [64, 3, 2]],
    [-1, 1, "Conv", [64, 3, 2]]], "head": [[[10, 11, 12], 1, "Detect", ["nc"]]]}


def _adown_producers(model: torch.nn.Module) -> list[str]:
    """The names of the convs whose outputs an ADown splits (each ADown reads the layer
    before it; one that reads a sum, a CBFuse, is left out here)."""
    names = []
    for layer in model.model:
        if isinstance(layer, yolo.ADownMatched) and layer.f == -1:
            convs = [n for n, m in model.model[layer.i - 1].named_modules()
                     if isinstance(m, torch.nn.Conv2d)]
            names += [f"model.{layer.i - 1}.{convs[-1]}"] if convs else []
    return names


def check_halves(model: torch.nn.Module, plan: dict) -> None:
    """Each ADown's halves have one width, and its producer lost the same positions from both
    halves; each CBLinear's part widths are its convs'."""
    producers = _adown_producers(model)
    assert producers and set(producers) <= set(plan)  # the groups ADown reads were pruned
    for name in producers:
        half = plan[name]["channels"] // 2
        removed = set(plan[name]["removed"])
        assert removed and {i for i in removed if i < half} == {i - half for i in removed
                                                                if i >= half}
    for m in model.modules():
        if isinstance(m, yolo.ADownMatched):
            assert m.cv1.conv.in_channels == m.cv2.conv.in_channels
        if isinstance(m, yolo.CBLinearSplitFree):
            assert m.c2s == [c.out_channels for c in m.convs]


def test_cblinear_parts_and_adown_halves_prune_in_a_yolov9e_like_model():
    """Every group prunes (none left whole: the ADown producers' groups used to break the
    forward), the halves stay equal and matched, the CBLinear parts follow their stages, and
    the pruned model writes back as Ultralytics' blocks with the same outputs."""
    torch.manual_seed(0)
    with yolo.quiet():
        model = yolo.patch_model(randomize_norms(yolo.DetectionModel(
            copy.deepcopy(MINI_V9E), verbose=False)).eval())
    assert any(isinstance(m, yolo.CBLinearSplitFree) for m in model.modules())
    adapter = get_adapter("detection", nc=3, input_size=64)
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no group left whole
        names = [g.name for g in autoprune.prunable_groups(model, x, ignored)]
    assert "model.4.convs.0" in names and "model.4.convs.1" in names
    result = autoprune.prune(model, x, {n: 0.3 for n in names}, ignored_layers=ignored)
    assert result.flops_after < 0.7 * result.flops_before
    check_halves(model, result.plan)
    model.train()(torch.rand(2, 3, 64, 64))
    model.eval()
    with torch.no_grad():
        y = _first(model(x))
        native = copy.deepcopy(model)
        assert to_native(native) == []
        assert _rel_diff(_first(native(x)), y) <= 1e-5


def test_adown_halves_stay_equal_and_matched_in_yolov9c(zoo):
    check_halves(zoo["yolov9c"]["model"], zoo["yolov9c"]["result"].plan)


# -- names -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, key", [
    ("yolov9c.yaml", "yolov9c"), ("yolov9e.pt", "yolov9e"), ("yolov8s-p2.yaml", "yolov8s-p2"),
    ("YOLO26n-P6.yaml", "yolo26n-p6"), ("yolov8x-p6", "yolov8x-p6"),
])
def test_new_detection_names_resolve(name, key):
    assert resolve_arch(name) == key


def test_head_size_variants_of_sub_tasks_resolve():
    from autoprune.tasks.instance_segmentation.names import NAMES as SEG
    from autoprune.tasks.pose.names import NAMES as POSE

    assert SEG.resolve("yolov8s-seg-p6.yaml") == "yolov8s-seg-p6"
    assert POSE.resolve("yolov8n-pose-p6") == "yolov8n-pose-p6"
    assert "yolov8n/s/m/l/x-seg-p6" in SEG.families
    for bad in ("yolo11n-seg-p6", "yolov8n-seg-p2"):
        with pytest.raises(autoprune.ConfigError) as e:
            SEG.resolve(bad)
        assert_one_line(e)


@pytest.mark.parametrize("name, reason", [
    ("yolo11n-p2.yaml", "P2 heads only for yolov8, yolo26"),
    ("yolov8n-rtdetr.yaml", "autoprune.rtdetr prunes rtdetr-l / rtdetr-x"),
    ("yolov9q.yaml", "unknown model name"),
])
def test_other_variants_are_refused_by_name(name, reason):
    with pytest.raises(autoprune.ConfigError, match=re.escape(reason)) as e:
        resolve_arch(name)
    assert_one_line(e)


# -- the done-means checks, one fixture for every small model -------------------------------------
# (task, name, input size): pruned 0.3 per group, saved; the tests below read the results
ZOO = [("detection", "yolov9c", 32), ("detection", "yolov8n-p2", 64),
       ("detection", "yolo26n-p6", 64), ("instance_segmentation", "yolov8n-seg-p6", 64),
       ("classification", "yolov8n-cls", 32), ("classification", "yolo11n-cls", 32),
       ("classification", "yolo26n-cls", 32)]
IDS = [name for _, name, _ in ZOO]


def prune_and_save(task: str, name: str, size: int, out: Path) -> dict:
    """``name`` built untrained by ``task``'s adapter, pruned 0.3 per group and saved with its
    outputs on a fixed input (``out/<name>.pt``, ``out/<name>.io.pt``): ``{"path", "x", "y",
    "result", "adapter", "model", "groups"}``."""
    torch.manual_seed(0)
    extra = {"nc": 3} if task != "classification" else {"num_classes": 10}
    adapter = get_adapter(task, input_size=size, progress=False, **extra)
    arch = adapter.arch_key(name)
    model = adapter.build(arch).eval()
    adapter.check_model(model)
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = autoprune.prunable_groups(model, x, ignored)
    result = autoprune.prune(model, x, {g.name: 0.3 for g in groups}, ignored_layers=ignored)
    model.eval()
    with torch.no_grad():
        y = _first(model(x))
    path = autoprune.save_pruned(model, out / f"{name}.pt", task=task, arch=arch,
                                 build=adapter.build_kwargs(model), input_size=size, pruned=True)
    torch.save({"x": x, "y": y}, out / f"{name}.io.pt")
    return {"path": path, "x": x, "y": y, "result": result, "adapter": adapter, "model": model,
            "groups": len(groups)}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Each model of ZOO pruned and saved (:func:`prune_and_save`), by name."""
    out = tmp_path_factory.mktemp("zoo")
    return {name: prune_and_save(task, name, size, out) for task, name, size in ZOO}


def check_pruned(item: dict) -> None:
    """Enough groups, FLOPs down, finite outputs; the training forward runs (YOLO)."""
    assert item["groups"] >= 15
    assert item["result"].flops_after < 0.8 * item["result"].flops_before
    assert torch.isfinite(item["y"]).all()
    if item["adapter"].task == "classification":
        assert item["y"].shape == (1, 10)  # logits, not Ultralytics' (softmax, logits) pair
    else:
        size = item["x"].shape[-1]
        item["model"].train()(torch.rand(2, 3, size, size))
        item["model"].eval()


def reload_in_fresh_process(paths: list, tmp_path: Path) -> dict[str, float]:
    """Max |difference| of each checkpoint's outputs, loaded in one child process (weights-only,
    autoprune's loaders), from the parent's (``<path>.io.pt``)."""
    script = tmp_path / "reload.py"
    script.write_text(
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from autoprune.flow.checkpoints import adapter_for_checkpoint, load_model\n"
        "diffs = {}\n"
        "for path in sys.argv[1:]:\n"
        "    io = torch.load(path[:-3] + '.io.pt', weights_only=True)\n"
        "    model = load_model(path, adapter_for_checkpoint(path, progress=False)[0]).eval()\n"
        "    with torch.no_grad():\n"
        "        y = model(io['x'])\n"
        "    while isinstance(y, (list, tuple)):\n"
        "        y = y[0]\n"
        "    diffs[path] = (y - io['y']).abs().max().item()\n"
        "print('RESULT', json.dumps(diffs))\n")
    run = subprocess.run([sys.executable, str(script), *map(str, paths)], capture_output=True,
                         text=True, timeout=600, cwd=ROOT,
                         env={"PYTHONPATH": child_pythonpath(), "OMP_NUM_THREADS": "1",
                              "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.split("RESULT ", 1)[1])


def check_onnx(item: dict, tmp_path: Path, order_free: bool = False) -> None:
    """The ONNX export runs in ONNX Runtime (batch 2) and gives the deployed module's outputs
    (``order_free``: the same rows in any order, for outputs whose near-tied rows may come out in
    another order)."""
    ort = pytest.importorskip("onnxruntime")
    path = item["adapter"].export_onnx(item["model"], tmp_path / "model.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = item["x"].repeat(2, 1, 1, 1).numpy()
    (out, *_) = session.run(None, {session.get_inputs()[0].name: x})
    got = torch.from_numpy(out[:1])
    with torch.no_grad():
        want = _first(item["adapter"].deploy_module(item["model"])(item["x"]))
    assert out.shape[0] == 2 and got.shape == want.shape
    if order_free:
        assert_same_rows(got.numpy(), want.numpy())
    else:
        assert _rel_diff(got, want) <= 1e-3


def assert_same_rows(got, expected, atol: float = 2e-3) -> None:
    """Each image's rows (boxes, score, class) equal the other side's up to their order: a model
    that ranks its queries by score (RT-DETR) gives two queries of one score in either order in
    torch and ONNX Runtime."""
    import numpy as np

    for got_rows, wanted_rows in zip(got, expected):
        np.testing.assert_allclose(np.sort(got_rows[:, 4]), np.sort(wanted_rows[:, 4]), atol=atol)
        distance = np.abs(got_rows[:, None, :] - wanted_rows[None, :, :]).max(-1)
        assert distance.min(1).max() <= atol and distance.min(0).max() <= atol


@pytest.mark.parametrize("name", IDS)
def test_prunes_at_0_3_per_group_with_flops_down(zoo, name):
    check_pruned(zoo[name])


def test_every_model_reloads_equal_in_a_fresh_process(zoo, tmp_path):
    diffs = reload_in_fresh_process([zoo[name]["path"] for name in IDS], tmp_path)
    assert len(diffs) == len(IDS) and all(d <= 1e-4 for d in diffs.values()), diffs


@pytest.mark.parametrize("name", ["yolov8n-p2", "yolo26n-p6", "yolo11n-cls"])
def test_onnx_export_runs_in_onnxruntime(zoo, name, tmp_path):
    check_onnx(zoo[name], tmp_path)


def test_p6_model_refuses_an_input_size_its_stride_does_not_divide():
    adapter = get_adapter("detection", nc=3, input_size=96)
    model = adapter.build("yolov8n-p6")
    with pytest.raises(autoprune.ConfigError, match="multiple of 64") as e:
        adapter.check_model(model)
    assert_one_line(e)


# -- YOLO classification through the classification task ------------------------------------------
@needs_fmnist
def test_yolo_classification_one_call_flow_prunes_by_flops_and_reloads(tmp_path):
    from autoprune import classification as cls

    r = cls.train("yolo11n-cls.yaml", "fashion-mnist", save_dir=tmp_path / "run",
                  sensitivities_file=tmp_path / "sens.json", ratios=(0.3,), pruned_flops=0.3,
                  epochs=1, batch_size=32, input_size=32, train_limit=64, eval_limit=32,
                  progress=False)
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert rep["pruned_flops_target"] == 0.3 and set(rep["pruned"]["metrics"]) == {"top1", "top5"}
    assert 0.2 <= rep["flops_reduction"] <= 0.4
    meta = autoprune.read_pruned_metadata(r.pruned_path)
    assert meta["arch"] == "ultralytics/yolo11n-cls" and meta["plan"]
    model = cls.load_model(r.pruned_path)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_yolo_classification_weights_file_gives_the_start_weights_and_a_new_head(tmp_path):
    """A ``yolo11n-cls.pt`` (written here as Ultralytics publishes its ImageNet weights) is read
    through Ultralytics' allow-list; its head gets the data's 10 classes, the rest is kept."""
    from ultralytics.nn.tasks import ClassificationModel

    from autoprune.tasks.classification import ClassificationAdapter
    from autoprune.tasks.detection.pretrained import seed_ultralytics_weights

    torch.manual_seed(0)
    with yolo.quiet():
        source = ClassificationModel("yolo11n-cls.yaml", nc=1000, verbose=False)
    path = seed_ultralytics_weights(source, "yolo11n-cls.pt", tmp_path / "weights")
    adapter = ClassificationAdapter(num_classes=10, input_size=32)
    model, weights = adapter.prepare_model(str(path), None, tmp_path)
    assert weights is None and adapter.arch_key(model) == "ultralytics/yolo11n-cls"
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10) and not adapter.starts_trained()
    theirs = yolo.patch_model(copy.deepcopy(source).half().float()).state_dict()  # (twins)
    kept = [k for k, v in model.state_dict().items() if k in theirs and v.shape == theirs[k].shape
            and torch.equal(v, theirs[k])]
    assert len(kept) >= len(theirs) - 4  # all but the new linear layer (and its stats)
    assert adapter.start_weights()["sha256"]


@pytest.mark.parametrize("kwargs, words", [
    ({"model_name": "yolo12n-cls"}, "is not a YOLO classification model autoprune prunes"),
    ({"model_name": "yolov8-cls-resnet50.yaml"}, "use one of yolov8n/s/m/l/x-cls"),
    ({"model_name": "yolo11n-cls", "pretrained": True}, "pass model='yolo11n-cls.pt'"),
])
def test_yolo_classification_names_refused_in_one_line(kwargs, words):
    from autoprune.tasks.classification import ClassificationAdapter
    from autoprune.tasks.classification.adapter import resolve_arch

    with pytest.raises(autoprune.ConfigError, match=re.escape(words)) as e:
        if "pretrained" in kwargs:
            ClassificationAdapter(num_classes=10, input_size=32, **kwargs)
        else:
            resolve_arch(kwargs["model_name"])
    assert_one_line(e)

