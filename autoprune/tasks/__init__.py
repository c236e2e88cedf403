"""The tasks: one package per task (``classification/``, ``detection/``, ``segmentation/``,
``instance_segmentation/``...), each behind the :class:`~autoprune.flow.contract.TaskAdapter`
contract, and one :func:`~autoprune.flow.registry.register_task` statement each (below)."""
from __future__ import annotations

from ..flow.contract import TaskAdapter, TrainResult
from ..flow.registry import REQUIRED, TASKS, Task, get_adapter, get_task, register_task, task_of

__all__ = ["TASKS", "Task", "TaskAdapter", "TrainResult", "get_adapter", "get_task",
           "register_task", "task_of"]

# the tasks that come with autoprune
_SCENES = "Fashion-MNIST scenes"
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
register_task(Task(
    "detection", package="autoprune.tasks.detection",
    adapter="autoprune.tasks.detection.adapter:DetectionAdapter",
    resolve_arch="autoprune.tasks.detection.names:resolve_arch",
    profile="autoprune.tasks.detection.profile:measure_profile",
    profile_settings=dict(epochs=30, train_images=512, val_images=64, input_size=128,
                          batch_size=16),
    arch_help="a YOLO name (yolo26n, yolov8s, yolo11m)",
    config_example="model: yolov8n.yaml, data: data.yaml", data_key="data", example="yolov8n",
    settings="autoprune.tasks.detection.settings:YoloSettings",
    inputs={"model": REQUIRED, "data": None, "eval_data": None}, positional=("model", "data"),
    aliases={"train_data": "data"}))
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
register_task(Task(
    "instance_segmentation", package="autoprune.tasks.instance_segmentation",
    adapter="autoprune.tasks.instance_segmentation.adapter:InstanceSegmentationAdapter",
    resolve_arch="autoprune.tasks.instance_segmentation.names:resolve_arch",
    profile="autoprune.tasks.instance_segmentation.profile:measure_profile",
    profile_settings=dict(epochs=30, train_images=512, val_images=64, input_size=128,
                          batch_size=16),
    arch_help="a YOLO-seg name (yolo11n-seg, yolov8s-seg, yolo26n-seg)",
    config_example="model: yolo11n-seg.yaml, data: data.yaml", data_key="data",
    example="yolov8n-seg", settings="autoprune.tasks.detection.settings:YoloSettings",
    inputs={"model": REQUIRED, "data": None, "eval_data": None}, positional=("model", "data"),
    aliases={"train_data": "data"}))
register_task(Task(
    "pose", package="autoprune.tasks.pose", adapter="autoprune.tasks.pose.adapter:PoseAdapter",
    resolve_arch="autoprune.tasks.pose.names:resolve_arch",
    profile="autoprune.tasks.pose.profile:measure_profile",
    profile_settings=dict(epochs=30, train_images=512, val_images=64, input_size=128,
                          batch_size=16),
    arch_help="a YOLO pose name (yolo11n-pose, yolov8s-pose, yolo26n-pose)",
    config_example="model: yolo11n-pose.yaml, data: data.yaml", data_key="data",
    example="yolov8n-pose", settings="autoprune.tasks.detection.settings:YoloSettings",
    inputs={"model": REQUIRED, "data": None, "eval_data": None}, positional=("model", "data"),
    aliases={"train_data": "data"}))
register_task(Task(
    "obb", package="autoprune.tasks.obb", adapter="autoprune.tasks.obb.adapter:OBBAdapter",
    resolve_arch="autoprune.tasks.obb.names:resolve_arch",
    profile="autoprune.tasks.obb.profile:measure_profile",
    profile_settings=dict(epochs=30, train_images=512, val_images=64, input_size=128,
                          batch_size=16),
    arch_help="a YOLO OBB name (yolo11n-obb, yolov8s-obb, yolo26n-obb)",
    config_example="model: yolo11n-obb.yaml, data: data.yaml", data_key="data",
    example="yolov8n-obb", settings="autoprune.tasks.detection.settings:YoloSettings",
    inputs={"model": REQUIRED, "data": None, "eval_data": None}, positional=("model", "data"),
    aliases={"train_data": "data"}))
