"""benchmarks/zoo.py --quick: a fixed sample of the four zoos (timm, torchvision, smp, YOLO) runs in
a subprocess, prints a line per model and the totals line. The sample holds models that prune
today (a CSP stage with its conv_exp ignored, an attention model with its head projections
ignored) and two refused by name (timm dpn48b, yolo11n-p2), about a minute on the 2-core machine.
``--resume`` skips the models its ``--jsonl`` file holds and counts the whole file."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_zoo_quick_prints_a_line_per_model_and_consistent_totals():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "zoo.py"), "--quick"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.rstrip().splitlines()
    m = re.fullmatch(r"ok=(\d+) refused=(\d+) failed=(\d+) total=(\d+)", lines[-1])
    assert m, lines[-1]
    ok, refused, failed, total = map(int, m.groups())
    assert ok + refused + failed == total and total >= 6
    assert failed == 0, run.stdout  # the sample is chosen from models that prune or are refused
    rows = [ln for ln in lines[:-1] if not ln.startswith(("#", "|"))]
    assert len(rows) == total
    for source in ("timm/", "torchvision/", "smp/", "yolo/"):
        assert any(ln.startswith(source) for ln in rows), source
    assert any(re.search(r" px  ok: \d+ groups, FLOPs -\d+ %  \([\d.]+ s\)$", ln) for ln in rows)
    assert any(ln.startswith("yolo/yolo11n-p2") and " refused: " in ln and "P2 heads only for"
               in ln for ln in rows)
    assert any(ln.startswith("timm/dpn48b") and " refused: timm model 'dpn48b' cannot be pruned"
               in ln for ln in rows)
    # a CSP model whose concatenations torch-pruning maps wrongly prunes its other groups
    assert any(ln.startswith("timm/cs3darknet_focus_s") and " ok: " in ln for ln in rows)
    assert any(ln.startswith("timm/edgenext_xx_small") and " ok: " in ln for ln in rows)
    # the summary by source: timm's CNN families apart from those with token-mixing layers
    table = {ln.split(" | ")[0].lstrip("| "): ln for ln in lines if ln.startswith("| ")}
    assert re.fullmatch(r"\| timm \(cnn\) \| \d \| 1 \| 0 \| \d+% \|", table["timm (cnn)"])
    assert "timm (attention/mlp)" in table and "yolo" in table


def test_timm_kind_tells_convolutional_families_from_token_mixing_ones():
    zoo = _zoo()
    kinds = {n: zoo.timm_kind(f"timm/{n}") for n in (
        "resnet18", "skresnet18", "resnest14d", "convmixer_768_32", "vit_tiny_patch16_224",
        "mixer_s16_224", "sequencer2d_s", "edgenext_xx_small", "lambda_resnet26t", "no_such")}
    assert kinds == {"resnet18": "cnn", "skresnet18": "cnn", "resnest14d": "cnn",
                     "convmixer_768_32": "cnn", "vit_tiny_patch16_224": "attention/mlp",
                     "mixer_s16_224": "attention/mlp", "sequencer2d_s": "attention/mlp",
                     "edgenext_xx_small": "attention/mlp", "lambda_resnet26t": "attention/mlp",
                     "no_such": "unknown"}


def test_the_flow_takes_p2_and_p6_heads_at_a_larger_size_and_longer():
    """zoo.py --flow: a P2 / P6 head variant trains at 128 px and longer (at the flow's 64 px and
    12 epochs they scored 0 and the sensitivities refuse a zero baseline); other names as before."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoo_flow", ROOT / "benchmarks" / "zoo_flow.py")
    flow = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flow)
    assert flow.head_recipe("yolov8n-p2.yaml") == {"size": 128, "pretrain_epochs": 30}
    assert flow.head_recipe("yolo26n-p6") == {"size": 128, "pretrain_epochs": 60}
    assert flow.head_recipe("yolov8n.yaml") == flow.head_recipe("yolov8n-p2-cls") == {}


def _zoo():
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoo", ROOT / "benchmarks" / "zoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_size_retry_tries_a_multiple_of_the_patch_size_before_the_native_size():
    import timm
    import torch

    zoo = _zoo()
    with torch.device("meta"):  # no memory, no weights: only the layout is read
        deepseek = timm.create_model("deepseek_vit_412m", num_classes=10)
        vit = timm.create_model("vit_tiny_patch16_224", num_classes=10)
        resnet = timm.create_model("resnet18", num_classes=10)
    assert zoo.retry_sizes(deepseek, 64) == [70, 546]  # 14 px patches; 546 px took minutes
    assert zoo.retry_sizes(vit, 64) == [224]  # 64 px is a patch multiple: its position embedding
    assert zoo.retry_sizes(resnet, 64) == [224]


def _sweep(*args: str) -> list[str]:
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "zoo.py"), *args],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.rstrip().splitlines()


def test_resume_skips_the_models_the_jsonl_holds_and_counts_the_whole_file(tmp_path):
    import json

    jsonl = tmp_path / "zoo.jsonl"
    earlier = {"name": "timm/mobilenetv3_small_050", "status": "failed", "source": "timm",
               "kind": "cnn", "error": "no result within 1 s", "wall": 1.0}  # no real run's
    # ... and a last line cut short by a killed sweep (no newline): skipped, not glued to
    jsonl.write_text(json.dumps(earlier) + "\n" + '{"name": "timm/resnet18", "sta')
    names = ["timm/mobilenetv3_small_050", "torchvision/not_a_model"]  # (a refusal is quick)
    lines = _sweep(*names, "--jsonl", str(jsonl), "--resume")
    rows = [ln for ln in lines[:-1] if not ln.startswith(("#", "|"))]
    assert len(rows) == 1 and rows[0].startswith("torchvision/not_a_model ") and \
        " refused: " in rows[0]
    assert lines[-1] == "ok=0 refused=1 failed=1 total=2"  # the earlier failure is counted
    results = [json.loads(ln) for ln in jsonl.read_text().splitlines() if ln.endswith("}")]
    assert [r["name"] for r in results] == names and results[0] == earlier
    assert results[1]["wall"] > 0

    # again, with one more model: only it runs, and the file's models are counted too
    lines = _sweep(*names, "torchvision/not_a_model_either", "--jsonl", str(jsonl), "--resume")
    rows = [ln for ln in lines[:-1] if not ln.startswith(("#", "|"))]
    assert len(rows) == 1 and rows[0].startswith("torchvision/not_a_model_either "), rows
    assert lines[-1] == "ok=0 refused=2 failed=1 total=3", lines


def test_a_child_past_its_time_limit_is_killed_and_the_sweep_goes_on():
    """Each model runs in a child forked from the fork server; one that runs past --timeout is
    killed and reported as failed, and the next model still runs."""
    lines = _sweep("yolo/yolov9c", "torchvision/not_a_model", "--timeout", "1")
    rows = [ln for ln in lines[:-1] if not ln.startswith(("#", "|"))]
    assert rows[0].startswith("yolo/yolov9c ") and \
        re.search(r" failed( \(\w+\))?: no result within 1 s ", rows[0]), rows[0]
    assert rows[1].startswith("torchvision/not_a_model ") and " refused: " in rows[1]
    assert lines[-1] == "ok=0 refused=1 failed=1 total=2"


def test_resume_needs_a_jsonl():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "zoo.py"), "--resume",
                          "yolov8n"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 2 and "--resume needs --jsonl FILE" in run.stderr


def test_the_ultralytics_zoo_lists_the_new_families_and_routes_them_to_their_tasks():
    zoo = _zoo()
    names = zoo.yolo_names()
    for name in ("yolo/yolov9c", "yolo/yolov9e", "yolo/yolov8n-p2", "yolo/yolo26n-p6",
                 "yolo/yolov8n-seg-p6", "yolo/rtdetr-l", "yolo/rtdetr-x", "yolo/yolo11n-cls"):
        assert name in names, name
    assert [zoo.yolo_task(n) for n in ("yolov9e", "yolov8n-seg-p6", "rtdetr-x", "yolo26n-cls",
                                       "yolo11n-p2")] == \
        ["detection", "instance_segmentation", "rtdetr", "classification", "detection"]
    assert zoo.least_size("rtdetr") == 128 and zoo.least_size("detection") == 64
    assert zoo.split_name("rtdetr-l") == ("yolo", "rtdetr-l")


def test_the_flow_mode_runs_classifiers_and_the_ultralytics_zoo_only():
    zoo = _zoo()
    import pytest

    with pytest.raises(ValueError, match="not smp models"):
        zoo.flow("smp/unet/resnet18")
    row = zoo.line({"name": "yolo/yolo11n-cls", "size": 32, "status": "ok", "groups": 33,
                    "flops_red": 0.3, "wall": 1.0,
                    "flow": {"top1": "0.180 -> 0.102", "onnx": "runs", "reload": "equal"}})
    assert row.endswith("flow: top1 0.180 -> 0.102, onnx runs, reload equal  (1.0 s)")


def test_the_fork_server_imports_only_what_the_sweeps_sources_need():
    zoo = _zoo()
    only_torchvision = zoo.preload({"torchvision"})
    assert only_torchvision[:3] == ["torch", "autoprune", "onnxruntime"]
    assert "torchvision" in only_torchvision \
        and "autoprune.tasks.classification" in only_torchvision
    assert not {"timm", "segmentation_models_pytorch", "autoprune.tasks.detection"} & \
        set(only_torchvision)
    every = zoo.preload({"timm", "torchvision", "smp", "yolo"})
    assert len(every) == len(set(every)) and {"autoprune.tasks.rtdetr", "timm"} <= set(every)
