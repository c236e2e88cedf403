"""The checks that the YOLO sub-task test files (test_obb.py, test_pose.py,
test_instance_segmentation.py) share, as plain functions: each file keeps its own test functions
and module-scoped fixtures (one worker per file under ``--dist loadfile``) and calls these with
its task's specifics (a :class:`Subtask`, names, words, widths)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn

import autoprune
from autoprune.datasets.scenes import write_yolo_dataset
from autoprune.tasks import task_of
from autoprune.tasks.detection import models as yolo

from conftest import (assert_one_line, ort_session, params, randomize_norms,
                      run_offline_child, state_shapes, stop_after_first_save)

TRAIN_ARGS = dict(nbs=8, optimizer="AdamW", lr0=0.005, warmup_epochs=0, mosaic=0.0,
                  val=False)  # Ultralytics validates the last epoch only (saves 0.5 s an epoch)
SMALL = dict(input_size=64, batch_size=8, num_workers=0, progress=False, train_args=TRAIN_ARGS)


@dataclass(frozen=True)
class Subtask:
    """One YOLO sub-task as its tests see it: ``task`` (the registered name, also the public
    module ``autoprune.<task>``), ``api`` (that module), its adapter class, the arch its flow
    trains, its metric keys (the first the one the flow prunes by), the Ultralytics trainer class
    that keeps the pruned module, and the build keywords of its checkpoints."""
    task: str
    api: ModuleType
    adapter: type
    arch: str
    metrics: tuple[str, ...]
    trainer: type
    build: dict

    @property
    def meta(self) -> dict:
        return {"task": self.task, "arch": self.arch, "build": self.build, "input_size": 64}


def run_flow(sub: Subtask, data_yaml, out: Path, pretrain_epochs: int):
    """The one-call flow pruned by FLOPs with a new sensitivity file in ``out``: train
    ``pretrain_epochs``, measure at ratio 0.3 on 8 val images, prune -25 % FLOPs, retrain 1
    epoch. Returns ``(result, out)``, the ``flow`` fixture's value."""
    result = sub.api.train(f"{sub.arch}.yaml", data_yaml, epochs=1,
                           pretrain_epochs=pretrain_epochs, save_dir=out / "run",
                           sensitivities_file=out / "sens.json", ratios=(0.3,),
                           pruned_flops=0.25, eval_limit=8, **SMALL)
    return result, out


def training_adapter(sub: Subtask, data_yaml):
    return sub.adapter(data_yaml, input_size=64, batch_size=8, progress=False,
                       train_args=TRAIN_ARGS)


def check_names(sub: Subtask, data_yaml, tmp_path, keys, refused) -> None:
    """Each ``(name, arch key)`` of ``keys`` belongs to the task; each ``(name, words)`` of
    ``refused`` is refused by its train in one line; detection's train refuses the task's arch
    and names this task."""
    for name, key in keys:
        assert task_of(name) == sub.task
        assert sub.adapter().arch_key(name) == key
    assert task_of("yolov8n") == "detection"
    for name, words in refused:
        with pytest.raises(autoprune.ConfigError, match=words) as e:
            sub.api.train(name, data_yaml, save_dir=tmp_path, **SMALL)
        assert_one_line(e)
    with pytest.raises(autoprune.ConfigError, match=f"autoprune.{sub.task} prunes it") as e:
        autoprune.detection.train(f"{sub.arch}.yaml", save_dir=tmp_path, **SMALL)
    assert_one_line(e)


def prune_every_group(adapter, model: nn.Module, ratio: float = 0.3):
    """Prune each of ``model``'s groups by ``ratio``; returns the group names and the result."""
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    names = [g.name for g in autoprune.prunable_groups(model, x, ignored)]
    return names, autoprune.prune(model, x, {n: ratio for n in names}, ignored_layers=ignored)


def pruned_head_model(adapter, arch: str):
    """``arch`` built by ``adapter`` (norms randomized, patched), every group pruned at 0.3 and
    its FLOPs down by more than 25 %; returns the model and its group names."""
    model = randomize_norms(adapter.build(arch))
    assert adapter.arch_of(model) == arch and yolo.is_patched(model)
    names, result = prune_every_group(adapter, model)
    assert result.flops_after < 0.75 * result.flops_before
    return model, names


def run_eval_and_train(model: nn.Module):
    """The model's outputs on two random 64 px images in eval mode (no grad), then in train
    mode."""
    with torch.no_grad():
        evaluated = model.eval()(torch.rand(2, 3, 64, 64))
    return evaluated, model.train()(torch.rand(2, 3, 64, 64))


def check_pruned_yolo26_trains(sub: Subtask, data_yaml, tmp_path, arch: str) -> None:
    """``arch`` (a YOLO26 model whose loss trains layers the eval-mode graph lacks) pruned at 0.3
    per group trains an epoch with the task's Ultralytics trainer and reloads with its pruned
    shapes."""
    adapter = training_adapter(sub, data_yaml)
    model = adapter.build(arch)
    prune_every_group(adapter, model)
    shapes = state_shapes(model)
    trained = adapter.fit(model, 1, tmp_path / "run", meta={**sub.meta, "arch": arch})
    assert state_shapes(trained) == shapes
    assert state_shapes(sub.api.load_model(tmp_path / "run" / "best.pt")) == shapes


def check_data_refused(sub: Subtask, data, tmp_path, words: str) -> None:
    """The task's train on the data.yaml ``data`` stops with a one-line ConfigError matching
    ``words``."""
    with pytest.raises(autoprune.ConfigError, match=words) as e:
        sub.api.train(f"{sub.arch}.yaml", data, epochs=1, save_dir=tmp_path / "o", **SMALL)
    assert_one_line(e)


def tiny_dataset(tmp_path, task: str = "detect"):
    """A data.yaml of 2 train and 1 val 32 px scenes with ``task``'s labels (boxes by default)."""
    return write_yolo_dataset(tmp_path, train=2, val=1, size=32, seed=0, task=task)


def check_flow_by_flops(sub: Subtask, flow):
    """The flow fixture's run: its report (task, arch, the metrics, -25 % FLOPs), files and
    sensitivity record (8 images), the pruned checkpoint (its shapes, fewer parameters) and
    Ultralytics' pruned best.pt (native blocks, no autoprune needed, the same shapes). Returns
    the reloaded pruned model and the record."""
    result, out = flow
    run = out / "run"
    rep = json.loads((run / "report.json").read_text())
    assert rep["task"] == sub.task and rep["arch"] == sub.arch
    for key in ("baseline", "pruned"):
        assert set(rep[key]["metrics"]) == set(sub.metrics)
        assert set(rep[key]) >= {"params", "flops", "size_mb", "latency_cpu_ms"}
    assert rep["baseline"]["metrics"][sub.metrics[0]] > 0
    assert rep["flops_reduction"] == pytest.approx(0.25, abs=0.02)
    for name in ("report.md", "report.csv", "sensitivity.png", "baseline/best.pt",
                 "pruned/best.pt", "pruned/last.pt", "pruned/ultralytics/weights/best.pt"):
        assert (run / name).is_file(), name
    record = json.loads((out / "sens.json").read_text())
    assert record["metric"]["name"] == sub.metrics[0] and record["extra"]["eval_images"] == 8
    # the model stays pruned through training
    pruned = sub.api.load_model(result.pruned_path)
    assert state_shapes(pruned) == state_shapes(result.model)
    assert params(pruned) < params(sub.api.load_model(result.baseline_path))
    ul_best = run / "pruned" / "ultralytics" / "weights" / "best.pt"
    ul, _ = yolo.read_ultralytics(ul_best)
    assert not any(isinstance(m, yolo.SPLIT_FREE) for m in ul.modules())  # native blocks:
    assert b"autoprune.tasks" not in ul_best.read_bytes()  # YOLO(path) needs no autoprune
    assert state_shapes(yolo.patch_model(ul)) == state_shapes(pruned)
    return pruned, record


def check_flow_by_loss(sub: Subtask, flow, data_yaml, tmp_path, distill: bool = False):
    """The measured file, a tolerated loss of 0.99: the ratios are PaddleSlim's by-loss ones of
    it and retraining keeps them; with ``distill`` the task's trainer ran Ultralytics' feature
    distillation. Returns the flow's result."""
    result, out = flow
    sens = autoprune.load_sensitivities(out / "sens.json")
    extra = {"distill": True} if distill else {}  # not given otherwise, as the user leaves it
    r = sub.api.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "run",
                      sensitivities_file=out / "sens.json", ratios=(0.3,),
                      eval_metric_loss=0.99, eval_limit=8, **extra, **SMALL)
    want = {k: v for k, v in autoprune.ratios_by_loss(sens, 0.99).items() if v > 0}
    assert {k: v for k, v in r.ratios.items() if v > 0} == want and want
    assert r.report["flops_reduction"] > 0.1
    assert state_shapes(sub.api.load_model(r.pruned_path)) == state_shapes(r.model)
    if distill:
        recipe = r.report["recipe"]["distill"]  # Ultralytics' default weight of the term
        assert {k: v for k, v in recipe.items() if k != "description"} == \
            {"method": "ultralytics-features", "dis": 6.0}
        results = (tmp_path / "run" / "pruned" / "ultralytics" / "results.csv").read_text()
        assert "train/dis_loss" in results.splitlines()[0]
    return r


def check_interrupted_training_resumes(sub: Subtask, flow, data_yaml, tmp_path, monkeypatch,
                                       capsys, validator_column: str | None = None) -> dict:
    """A stage interrupted after its first epoch continues from Ultralytics' last.pt with the
    pruned module itself (its results.csv names ``validator_column`` where given, and its
    best.pt reloads pruned); run again, the finished stage is not trained; the task's resume
    does the same by file after a second interruption. Returns that run's checkpoint metadata
    (its task checked)."""
    result, _ = flow
    model = sub.api.load_model(result.pruned_path)
    shapes = state_shapes(model)
    adapter = training_adapter(sub, data_yaml)
    stop_after_first_save(monkeypatch, sub.trainer)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(model, 2, tmp_path / "run", meta=sub.meta)
    monkeypatch.undo()
    results = tmp_path / "run" / "ultralytics" / "results.csv"
    assert len(results.read_text().strip().splitlines()) == 2  # header + epoch 1
    capsys.readouterr()
    resumed = adapter.fit(model, 2, tmp_path / "run", meta=sub.meta, resume=True)
    assert "resuming" in capsys.readouterr().out and state_shapes(resumed) == shapes
    assert len(results.read_text().strip().splitlines()) == 3  # + the resumed epoch 2
    if validator_column is not None:  # the task's own Ultralytics validator ran
        assert validator_column in results.read_text().splitlines()[0]
    assert state_shapes(sub.api.load_model(tmp_path / "run" / "best.pt")) == shapes
    adapter.fit(sub.api.load_model(result.pruned_path), 2, tmp_path / "run", meta=sub.meta,
                resume=True)
    assert "already finished its 2 epochs" in capsys.readouterr().out
    # the same by file, after a second interruption
    stop_after_first_save(monkeypatch, sub.trainer)
    with pytest.raises(KeyboardInterrupt):
        adapter.fit(sub.api.load_model(result.pruned_path), 2, tmp_path / "again",
                    meta=sub.meta)
    monkeypatch.undo()
    again = sub.api.resume(tmp_path / "again" / "ultralytics" / "weights" / "last.pt",
                           progress=False)
    assert state_shapes(again) == shapes
    meta = autoprune.read_pruned_metadata(tmp_path / "again" / "best.pt")
    assert meta["task"] == sub.task
    return meta


def _detached(out: Any) -> Any:
    """A model output's tensor detached, or a tuple of tensors as a list of detached ones."""
    return [t.detach() for t in out] if isinstance(out, tuple) else out.detach()


def check_offline_child(sub: Subtask, flow, data_yaml, tmp_path, found: str) -> dict:
    """In a fresh process with every network call refused: ``from autoprune import <task>``,
    reload the pruned checkpoint (outputs equal to this process's), predict with YOLO(...) on
    Ultralytics' pruned best.pt (``found``, an expression of its first result ``found``, is sent
    back as the child's ``"found"``), export ONNX. Returns the child's dict."""
    result, out = flow
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    torch.save(x, tmp_path / "x.pt")
    want, _ = sub.api.load_model(result.pruned_path)(x)
    ul_best = out / "run" / "pruned" / "ultralytics" / "weights" / "best.pt"
    image = next((Path(data_yaml).parent / "images" / "train").glob("*.png"))
    child = run_offline_child(tmp_path, f"""
        from autoprune import {sub.task} as api
        model = api.load_model({str(result.pruned_path)!r})
        y, _ = model(torch.load({str(tmp_path / 'x.pt')!r}, weights_only=True))
        y = [t.detach() for t in y] if isinstance(y, tuple) else y.detach()
        torch.save(y, {str(tmp_path / 'y.pt')!r})
        from ultralytics import YOLO
        found = YOLO({str(ul_best)!r}).predict({str(image)!r}, imgsz=64, conf=0.0,
                                                verbose=False)[0]
        onnx = api.export_onnx({str(result.pruned_path)!r}, {str(tmp_path / 'm.onnx')!r})
        print("RESULT", json.dumps({{"attempts": attempts, "found": {found},
                                    "onnx": str(onnx)}}))
    """)
    assert child["attempts"] == []
    got, want = torch.load(tmp_path / "y.pt", weights_only=True), _detached(want)
    if isinstance(want, list):
        assert len(got) == len(want) and all(map(torch.equal, got, want))
    else:
        assert torch.equal(got, want)
    assert Path(child["onnx"]).is_file()
    return child


def exported_pruned(sub: Subtask, flow, tmp_path):
    """The flow's pruned checkpoint exported to ONNX: a valid graph that stores no more weights
    than the pruned model has. Returns the file, the graph and the reloaded pruned model."""
    import onnx
    result, _ = flow
    path = sub.api.export_onnx(result.pruned_path, tmp_path / "pruned.onnx")
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    pruned = sub.api.load_model(result.pruned_path)
    stored = sum(int(np.prod(i.dims)) for i in graph.graph.initializer)
    assert stored <= params(pruned) + 100  # the pruned (smaller) convolutions
    return path, graph, pruned


def check_onnx_runtime_matches_torch(sub: Subtask, flow, tmp_path, channels: int) -> None:
    """:func:`exported_pruned` (one output) run in ONNX Runtime: at batch 1 and 3 its
    ``(batch, channels, 84)`` output equals the deploy module's in torch."""
    path, graph, pruned = exported_pruned(sub, flow, tmp_path)
    assert len(graph.graph.output) == 1
    session = ort_session(path)
    net = sub.adapter(input_size=64).deploy_module(pruned)
    for batch in (1, 3):
        x = torch.rand(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            want = net(x).numpy()
        got = session.run(None, {"input": x.numpy()})[0]
        assert got.shape == want.shape == (batch, channels, 84)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def check_build_profile(sub: Subtask, adapter, dataset_words: str, tmp_path, monkeypatch):
    """``autoprune profiles build`` for the task's arch on 8 scenes, 1 epoch, with the
    evaluation replaced by a made-up non-zero score for each metric (such a model scores 0; the
    real one runs in the flow); the record says ``dataset_words`` and ``--task``; DEFAULT then
    resolves for ``adapter``'s model and a YOLO object. Returns the record."""
    from autoprune.flow.sensitivities import check_sensitivities_file
    from autoprune.profiles.build import build_profile

    def fake_evaluate(self, model):
        score = 0.5 + 1e-9 * sum(float(p.abs().sum()) for p in model.parameters())
        return {name: score for name in sub.metrics}

    monkeypatch.setattr(sub.adapter, "evaluate", fake_evaluate)
    out = tmp_path / "profiles"
    path = build_profile(f"{sub.arch}.yaml", out, epochs=1, train_images=8, val_images=4,
                         input_size=64, batch_size=8, ratios=(0.5,), progress=False,
                         work_dir=tmp_path)
    assert path == out / f"{sub.task}-{sub.arch}.json"
    record = autoprune.read_record(path)
    assert record.metric["name"] == sub.metrics[0] and record.model["arch"] == sub.arch
    assert dataset_words in record.extra["how"]["dataset"]
    assert f"--task {sub.task}" in record.extra["how"]["command"]
    monkeypatch.setattr("autoprune.flow.defaults.profile_dir", lambda: out)
    from ultralytics import YOLO
    with yolo.quiet():
        wrapper = YOLO(f"{sub.arch}.yaml")
    assert adapter.arch_key(wrapper) == sub.arch
    module = adapter.build(sub.arch)
    assert check_sensitivities_file(adapter, module, "DEFAULT", sub.arch) == path
    return record


def check_bundled_default(sub: Subtask, flow, data_yaml, tmp_path) -> None:
    """The bundled profile of the task's arch prunes the flow's trained model by 20 % FLOPs."""
    result, _ = flow
    r = sub.api.train(result.baseline_path, data_yaml, epochs=1, save_dir=tmp_path / "run",
                      sensitivities_file="DEFAULT", pruned_flops=0.2, eval_limit=8, **SMALL)
    assert r.sensitivities_path.name == f"{sub.task}-{sub.arch}.json"
    assert r.report["flops_reduction"] == pytest.approx(0.2, abs=0.02)
