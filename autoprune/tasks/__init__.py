"""The tasks: one package per task (``classification/``, ``detection/``, ``segmentation/``,
``instance_segmentation/``...), each behind the :class:`~autoprune.flow.contract.TaskAdapter`
contract, and one :func:`~autoprune.flow.registry.register_task` statement each (below)."""
from __future__ import annotations

from ..flow.contract import TaskAdapter, TrainResult
from ..flow.registry import REQUIRED, TASKS, Task, get_adapter, get_task, register_task, task_of

__all__ = ["TASKS", "Task", "TaskAdapter", "TrainResult", "get_adapter", "get_task",
           "register_task", "task_of"]


def _yolo_task(name: str, adapter: str, kind: str, examples: str, example: str) -> Task:
    """An Ultralytics YOLO task: a ``data.yaml`` (``train_data`` is its other name), YOLO settings,
    profiles built on the scenes at 128 px; ``examples``: model names for the help, the first the
    config example's; ``example``: the profile example's."""
    package = f"autoprune.tasks.{name}"
    return Task(
        name, package=package, adapter=f"{package}.adapter:{adapter}",
        resolve_arch=f"{package}.names:resolve_arch", profile=f"{package}.profile:measure_profile",
        profile_settings=dict(epochs=30, train_images=512, val_images=64, input_size=128,
                              batch_size=16),
        arch_help=f"a {kind} name ({examples})", example=example,
        config_example=f"model: {examples.split(', ')[0]}.yaml, data: data.yaml", data_key="data",
        settings="autoprune.tasks.detection.settings:YoloSettings",
        inputs={"model": REQUIRED, "data": None, "eval_data": None}, positional=("model", "data"),
        aliases={"train_data": "data"})


# the tasks that come with autoprune
register_task(Task(
    "classification", package="autoprune.tasks.classification",
    adapter="autoprune.tasks.classification.adapter:ClassificationAdapter",
    resolve_arch="autoprune.tasks.classification.adapter:resolve_arch",
    profile="autoprune.tasks.classification.profile:measure_profile",
    profile_settings=dict(epochs=3, train_images=12000, val_images=1000, input_size=32,
                          batch_size=128),
    arch_help="a timm/torchvision name (resnet18, torchvision/mobilenet_v2)",
    config_example="model: resnet18, train_data: fashion-mnist", example="resnet18",
    settings="autoprune.tasks.classification.settings:ClassificationSettings"))
register_task(_yolo_task("detection", "DetectionAdapter", "YOLO", "yolov8n, yolo26n, yolo11m",
                         "yolov8n"))
register_task(Task(
    "segmentation", package="autoprune.tasks.segmentation",
    adapter="autoprune.tasks.segmentation.adapter:SegmentationAdapter",
    resolve_arch="autoprune.tasks.segmentation.models:resolve_arch",
    profile="autoprune.tasks.segmentation.profile:measure_profile",
    profile_settings=dict(epochs=10, train_images=1000, val_images=200, input_size=64,
                          batch_size=8),
    arch_help="smp/<arch>/<encoder> (smp/unet/resnet18)",
    config_example="model: smp/unet/resnet18, train_data: fashion-scenes",
    example="smp/unet/resnet18",
    settings="autoprune.tasks.segmentation.settings:SegmentationSettings",
    inputs={"model": "unet", "train_data": REQUIRED, "eval_data": None},
    positional=("model", "encoder")))
register_task(_yolo_task("instance_segmentation", "InstanceSegmentationAdapter", "YOLO-seg",
                         "yolo11n-seg, yolov8s-seg, yolo26n-seg", "yolov8n-seg"))
register_task(_yolo_task("pose", "PoseAdapter", "YOLO pose",
                         "yolo11n-pose, yolov8s-pose, yolo26n-pose", "yolov8n-pose"))
register_task(_yolo_task("obb", "OBBAdapter", "YOLO OBB", "yolo11n-obb, yolov8s-obb, yolo26n-obb",
                         "yolov8n-obb"))
register_task(_yolo_task("rtdetr", "RTDETRAdapter", "RT-DETR", "rtdetr-l, rtdetr-x", "rtdetr-l"))
