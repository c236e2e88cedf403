"""Deploying without autoprune: a pruned YOLO written in Ultralytics' format holds only Ultralytics'
own modules (the split-free blocks are written back as native ones, their narrower half padded with
zero channels), loads with ``YOLO(path)`` in a process where ``import autoprune`` fails, and gives
the pruned model's outputs; autoprune reads such a file back as the exact pruned model."""
import copy
import json
import os
from pathlib import Path
import random
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import autoprune
from autoprune.tasks.detection import DetectionAdapter
from autoprune.tasks.detection import models as yolo

from conftest import randomize_norms, state_shapes

# a process in which autoprune cannot be imported (whatever sys.path or an editable install says)
BLOCK_AUTOPRUNE = """
import importlib.abc, sys
class _NoAutoprune(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "autoprune" or name.startswith("autoprune."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
sys.meta_path.insert(0, _NoAutoprune())
try:
    import autoprune
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("autoprune is importable")
"""



def _pruned(arch: str) -> nn.Module:
    """An untrained ``arch`` (2 classes) with random BatchNorm statistics, pruned with random
    ratios per group, so that the two halves of most split blocks end up of different widths."""
    adapter = DetectionAdapter(nc=2, input_size=64)
    model = randomize_norms(adapter.build(arch))
    g = torch.Generator().manual_seed(1)
    example, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    names = [grp.name for grp in autoprune.prunable_groups(model, example, ignored)]
    rng = random.Random(0)
    autoprune.prune(model, example, {n: rng.choice((0.1, 0.3, 0.5, 0.7)) for n in names},
                    ignored_layers=ignored)
    with torch.no_grad():  # class scores spread around 0.5: an untrained head predicts boxes
        for branch in yolo.detect_head(model).cv3:
            branch[-1].bias.copy_(2 * torch.randn(branch[-1].bias.shape, generator=g))
    return model.eval()


def _uneven(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, yolo.SPLIT_FREE)
            and m.cv0.conv.out_channels != m.cv1.conv.out_channels]


def _save_like_ultralytics(model: nn.Module, path) -> None:
    """What Ultralytics' trainer leaves as weights/best.pt at the end (strip_optimizer)."""
    import ultralytics
    net = copy.deepcopy(model).half()
    for p in net.parameters():
        p.requires_grad = False
    torch.save({"date": "2026-11-23", "version": ultralytics.__version__, "epoch": -1,
                "model": net, "ema": None, "optimizer": None, "best_fitness": None,
                "train_args": {"task": "detect", "imgsz": 64}}, path)


@pytest.mark.parametrize("arch", ["yolov10n", "yolov9t"])
def test_every_split_free_kind_is_written_back_natively(arch):
    """PSA and C2fCIB (YOLOv10), RepNCSPELAN4 and ELAN1 (YOLOv9) as well as C2f / C3k2 / C2PSA
    (the subprocess test): native classes, the same outputs, and back to the exact pruned shapes."""
    model = _pruned(arch)
    assert _uneven(model)
    native = copy.deepcopy(model)
    assert yolo.to_native(native) == []
    assert not any(isinstance(m, yolo.SPLIT_FREE) for m in native.modules())
    kinds = {type(m).__name__ for m in native.modules()}
    assert {"yolov10n": {"PSA", "C2fCIB", "C2f"},
            "yolov9t": {"RepNCSPELAN4", "ELAN1"}}[arch] <= kinds
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want, got = model(x), native.eval()(x)
    want, got = (want[0], got[0]) if isinstance(want, (tuple, list)) else (want, got)
    if isinstance(want, dict):
        want, got = want["one2one"][0], got["one2one"][0]
    assert (got - want).abs().max() <= 1e-5 * max(1.0, want.abs().max())
    assert state_shapes(yolo.patch_model(native)) == state_shapes(model)


def test_pruned_yolo_loads_in_ultralytics_without_autoprune(tmp_path):
    """yolov8n (C2f) and yolo11n (C3k2, C2PSA), pruned unevenly, written as Ultralytics writes
    best.pt and then by write_native: a process that cannot import autoprune loads both with
    YOLO(path) (and through Ultralytics' weights-only allow-list), and gets the pruned model's
    outputs and predictions."""
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    torch.save(x, tmp_path / "x.pt")
    files, expected = {}, {}
    for arch in ("yolov8n", "yolo11n"):
        model = _pruned(arch)
        assert _uneven(model), arch
        path = tmp_path / f"{arch}.pt"
        _save_like_ultralytics(model, path)
        split_free = tmp_path / f"{arch}_split_free.pt"
        split_free.write_bytes(path.read_bytes())
        done = yolo.write_native(path)
        assert done.changed and done.left == [] and done.padded_params > done.params
        assert not yolo.write_native(path).changed  # written once
        assert b"autoprune.tasks" not in path.read_bytes()  # no class of autoprune's
        reference = copy.deepcopy(model).half().float().eval()  # the file holds half precision
        with torch.no_grad():
            expected[arch] = reference(x)[0]
        back = yolo.load_ultralytics(path)  # autoprune reads it back as the exact pruned model
        assert state_shapes(back) == state_shapes(model)
        with yolo.quiet():
            boxes = yolo.YOLO(str(split_free)).predict(
                (x[0].permute(1, 2, 0).numpy() * 255).astype("uint8"), imgsz=64, conf=0.5,
                verbose=False)[0].boxes
        files[arch] = str(path)
        expected[arch + ".boxes"] = boxes.data.clone()
    script = BLOCK_AUTOPRUNE + textwrap.dedent(f"""
        import json, torch
        torch.set_num_threads(1)
        from ultralytics import YOLO
        from ultralytics.nn.tasks import torch_safe_load
        x = torch.load({str(tmp_path / 'x.pt')!r}, weights_only=True)
        out = {{}}
        for arch, path in {files!r}.items():
            torch_safe_load(path, safe_only=True)  # Ultralytics' allow-list of classes
            y = YOLO(path)
            with torch.no_grad():
                torch.save(y.model.float().eval()(x)[0], path + ".out")
            image = (x[0].permute(1, 2, 0).numpy() * 255).astype("uint8")
            boxes = y.predict(image, imgsz=64, conf=0.5, verbose=False)[0].boxes
            torch.save(boxes.data.clone(), path + ".boxes")
            out[arch] = sorted({{type(m).__module__.split(".")[0] for m in y.model.modules()}})
        print("RESULT", json.dumps(out))
    """)
    root = str(Path(__file__).resolve().parents[1])  # the checkout off the path; the rest stays
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root)}
    env.update(YOLO_OFFLINE="1", YOLO_AUTOINSTALL="False",
               YOLO_CONFIG_DIR=str(tmp_path / "config"))
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    modules = json.loads(line[len("RESULT "):])
    for arch, path in files.items():
        assert modules[arch] == ["torch", "ultralytics"]
        got, want = torch.load(path + ".out", weights_only=True), expected[arch]
        assert (got - want).abs().max() <= 1e-5 * max(1.0, want.abs().max()), arch
        boxes, want_boxes = (torch.load(path + ".boxes", weights_only=True),
                             expected[arch + ".boxes"])
        assert boxes.shape == want_boxes.shape and len(boxes) > 0, arch
        assert torch.allclose(boxes, want_boxes, rtol=1e-3, atol=1e-3), arch


def test_a_stage_says_in_one_line_whether_its_ultralytics_file_needs_autoprune(tmp_path, capsys,
                                                                              monkeypatch):
    """write_deployable (run when a detection stage ends): one line saying that YOLO(path) loads
    best.pt without autoprune, or, for a block that cannot be written back, which one and that
    the ONNX export is the way to deploy."""
    from autoprune.tasks.detection.stages import write_deployable
    model = DetectionAdapter(nc=2, input_size=64).build("yolov8n")
    weights = tmp_path / "run" / "ultralytics" / "weights"
    weights.mkdir(parents=True)
    for name in ("best.pt", "last.pt"):
        _save_like_ultralytics(model, weights / name)
    from autoprune.tasks.detection import native
    monkeypatch.setattr(native, "native_block", lambda block: None)  # nothing can be written back
    write_deployable(tmp_path / "run")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all("\n" not in line for line in lines)  # best.pt, last.pt
    assert lines[0].startswith(f"[autoprune] note: {weights / 'best.pt'} keeps autoprune's "
                               f"split-free form in model.2, model.4, model.6, ...: YOLO() "
                               f"loads it only where autoprune is installed; elsewhere deploy "
                               f"the ONNX export (autoprune export ")
    monkeypatch.undo()
    write_deployable(tmp_path / "run")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[autoprune] {weights / 'best.pt'} holds Ultralytics' own blocks: YOLO(path) "
                     f"loads it without autoprune (zero channels that even out split blocks add "
                     f"0.0% parameters; `autoprune export` writes the exact pruned model)"]
    write_deployable(tmp_path / "run")  # already written back: nothing to do, nothing said
    assert capsys.readouterr().out == ""
