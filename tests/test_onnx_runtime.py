"""ONNX exports run in ONNX Runtime at any batch size (``dynamic_batch``, the default) and equal
torch; ``--static`` / ``dynamic_batch=False`` fixes batch 1."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import autoprune
from autoprune.cli import main
from autoprune.tasks import TASKS, get_adapter, get_task

from conftest import ort_session


def _pruned_example(name):
    torch.manual_seed(0)
    adapter = get_adapter(name, input_size=64, num_classes=3)
    model = adapter.build(adapter.arch_key(get_task(name).example)).eval()
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    groups = autoprune.prunable_groups(model, x, ignored)
    autoprune.prune(model, x, {g.name: 0.3 for g in groups}, ignored_layers=ignored)
    return adapter, model


# RT-DETR's export runs in ONNX Runtime at batch 2 in tests/test_rtdetr.py (its ranked queries
# compared as a set of rows; building and exporting it again here would cost half a minute)
@pytest.mark.parametrize("name", sorted(set(TASKS) - {"rtdetr"}))
def test_dynamic_batch_runs_at_batch_1_and_4_and_equals_torch(name, tmp_path):
    adapter, model = _pruned_example(name)
    path = adapter.export_onnx(model, tmp_path / "m.onnx")
    session = ort_session(path)
    assert session.get_inputs()[0].shape[0] == "batch"
    for batch in (1, 4):
        x = torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))
        outputs = session.run(None, {"input": x.numpy()})
        with torch.no_grad():
            out = adapter.deploy_module(model)(x)
        wanted = [out] if torch.is_tensor(out) else list(out)  # YOLO-seg: boxes, prototypes
        assert len(outputs) == len(wanted)
        for got, expected in zip(outputs, (t.numpy() for t in wanted)):
            assert got.shape == expected.shape and got.shape[0] == batch
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
        got, expected = outputs[0], wanted[0].numpy()
    # the declared output shape: the batch axis named, every other axis the real, fixed size (the
    # exporter's shape inference had named a mask's height "batch")
    declared = session.get_outputs()[0].shape
    assert declared[0] == "batch" and declared[1:] == list(expected.shape[1:]), declared


def test_static_export_takes_batch_1_only(tmp_path):
    adapter, model = _pruned_example("classification")
    path = adapter.export_onnx(model, tmp_path / "m.onnx", dynamic_batch=False)
    session = ort_session(path)
    assert session.get_inputs()[0].shape == [1, 3, 64, 64]
    session.run(None, {"input": np.zeros((1, 3, 64, 64), np.float32)})
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        session.run(None, {"input": np.zeros((4, 3, 64, 64), np.float32)})


def test_cli_export_is_dynamic_unless_static(tmp_path):
    adapter, model = _pruned_example("classification")
    ckpt = autoprune.save_pruned(model, tmp_path / "m.pt", task="classification",
                                 arch="timm/resnet18", build=adapter.build_kwargs(model),
                                 input_size=64)
    assert main(["export", str(ckpt), str(tmp_path / "d.onnx")]) == 0
    assert main(["export", str(ckpt), str(tmp_path / "s.onnx"), "--static"]) == 0
    assert ort_session(tmp_path / "d.onnx").get_inputs()[0].shape[0] == "batch"
    assert ort_session(tmp_path / "s.onnx").get_inputs()[0].shape[0] == 1
    x = np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    got = ort_session(tmp_path / "d.onnx").run(None, {"input": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
