"""RT-DETR (issue 42): Ultralytics' ``rtdetr-l`` pruned through its own task, ``autoprune.rtdetr``
(the detection adapter with Ultralytics' RT-DETR model, trainer and validator): the HGNetv2
backbone and the hybrid encoder's convolutions lose 0.3 of each group, the transformer layers
keep their widths; forward, FLOPs down, reload in a fresh process, ONNX in ONNX Runtime; its
twins keep Ultralytics' training loss and write back as Ultralytics' classes; names and input
sizes it cannot take are refused in one line. Untrained, 128 px (its least size); the trained
one-call flow of rtdetr-l / rtdetr-x runs in ``benchmarks/zoo.py --flow``."""
from __future__ import annotations

import copy
import re

import pytest
import torch

import autoprune
from autoprune.tasks import get_adapter
from autoprune.tasks.detection import models as yolo
from autoprune.tasks.detection.native import to_native

from conftest import assert_one_line
from test_zoo_ultralytics import check_onnx, check_pruned, prune_and_save, \
    reload_in_fresh_process


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    return prune_and_save("rtdetr", "rtdetr-l", 128, tmp_path_factory.mktemp("rtdetr"))


def test_rtdetr_prunes_its_cnn_parts_and_keeps_the_transformer_widths(pruned):
    check_pruned(pruned)
    names = set(pruned["result"].plan)
    assert any(n.startswith("model.0.") for n in names)  # the HGNetv2 stem
    assert "model.10.conv" not in names  # AIFI's input: its width stays
    head = pruned["model"].model[-1]
    assert not any(n.startswith(f"model.{head.i}.") for n in names)  # the decoder
    assert all(proj[0].out_channels == head.hidden_dim for proj in head.input_proj)


def test_rtdetr_reloads_equal_in_a_fresh_process(pruned, tmp_path):
    diffs = reload_in_fresh_process([pruned["path"]], tmp_path)
    assert all(d <= 1e-4 for d in diffs.values()), diffs


def test_rtdetr_onnx_export_runs_in_onnxruntime(pruned, tmp_path):
    check_onnx(pruned, tmp_path, order_free=True)  # untrained: near-tied queries


# -- declarations and twins ------------------------------------------------------------------------
def test_rtdetr_declares_its_classes_and_refuses_what_it_cannot_take(tmp_path):
    from ultralytics.models.rtdetr.train import RTDETRTrainer
    from ultralytics.models.rtdetr.val import RTDETRValidator

    from autoprune import rtdetr
    from autoprune.flow.registry import get_task
    from autoprune.tasks.rtdetr import models as rt

    adapter = get_task("rtdetr").adapter_class()
    assert issubclass(adapter.trainer_class, yolo.KeepModuleTrainer)
    assert issubclass(adapter.trainer_class, RTDETRTrainer)
    assert issubclass(adapter.validator_class, RTDETRValidator)
    assert adapter.resolve_arch("rtdetr-x.pt") == "rtdetr-x" and adapter.yolo_task == "detect"
    for name, words in (("rtdetr-resnet50.yaml", "a ResNet backbone"),
                        ("yolov8n-rtdetr.yaml", "RT-DETR decoder on a YOLO backbone"),
                        ("rtdetr-s.yaml", "unknown model name")):
        with pytest.raises(autoprune.ConfigError, match=re.escape(words)) as e:
            adapter.resolve_arch(name)
        assert_one_line(e)
    with pytest.raises(autoprune.ConfigError, match="input_size=64 is too small for RT-DETR") as e:
        rtdetr.train("rtdetr-l.yaml", str(tmp_path / "missing.yaml"), input_size=64,
                     save_dir=tmp_path / "o")  # refused before the data is read
    assert_one_line(e)
    with yolo.quiet():
        model = adapter(nc=3, input_size=128).build("rtdetr-l")
    assert rt.least_input_size(model) == 128


def test_rtdetr_twins_keep_ultralytics_training_loss_and_native_classes():
    """The decoder twin returns Ultralytics' five training outputs when the loss passes its
    targets (the trace alone gets four), and both twins write back as Ultralytics' classes."""
    from ultralytics.nn.modules.head import RTDETRDecoder
    from ultralytics.nn.modules.transformer import AIFI

    torch.manual_seed(0)
    adapter = get_adapter("rtdetr", nc=3, input_size=128)
    model = adapter.build("rtdetr-l").train()
    kinds = {type(m) for m in model.modules()}
    assert {yolo.RTDETRDecoderTraceable, yolo.AIFITraceable} <= kinds
    batch = {"img": torch.rand(2, 3, 128, 128), "batch_idx": torch.tensor([0.0, 1.0]),
             "cls": torch.tensor([[1.0], [2.0]]),
             "bboxes": torch.tensor([[0.5, 0.5, 0.3, 0.3], [0.4, 0.6, 0.2, 0.4]])}
    loss, items = model.loss(batch)
    assert torch.isfinite(loss).all() and items
    native = copy.deepcopy(model)
    assert to_native(native) == []
    kinds = {type(m) for m in native.modules()}
    assert RTDETRDecoder in kinds and AIFI in kinds and yolo.AIFITraceable not in kinds
