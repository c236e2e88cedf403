"""Pruned checkpoints (plain state_dict + JSON metadata, weights-only loading) and ONNX export.

A pruned checkpoint is one ``torch.save`` file holding only tensors and strings::

    {"format": "autoprune-pruned", "version": 1, "state_dict": {...},
     "metadata": "<JSON: user metadata, the channel attributes of every resized layer and the
                  modules' state-dict versions>"}

Loading rebuilds nothing by unpickling: the caller passes a freshly built *unpruned* model of the
same architecture; every tensor is shrunk to the saved shape, the layers' channel attributes are
set, and the weights are loaded with ``strict=True``.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn as nn

from .attributes import sync_attributes, sync_metadata
from .data import tensors_in
from ..errors import (CheckpointError, ConfigError, NotAutopruneCheckpointError,
                      UnreadableCheckpointError)
from .files import atomic_write

FORMAT = "autoprune-pruned"
VERSION = 1
# set on a model by prune(): its tensor shapes before pruning
BASE_SHAPES = "_autoprune_base_shapes"
# Attributes that hold channel counts, per layer type (FIELD_NOTES: fix these after resizing).
_CHANNEL_ATTRS = {
    nn.modules.conv._ConvNd: ("in_channels", "out_channels", "groups"),
    nn.modules.batchnorm._NormBase: ("num_features",),
    nn.Linear: ("in_features", "out_features"),
    nn.GroupNorm: ("num_groups", "num_channels"),
    nn.LayerNorm: ("normalized_shape",),
    nn.PReLU: ("num_parameters",),
    nn.MultiheadAttention: ("embed_dim", "kdim", "vdim", "head_dim"),
    nn.RNNBase: ("input_size", "hidden_size", "proj_size"),  # LSTM/GRU/RNN (timm Sequencer)
}


def _channel_attrs(model: nn.Module) -> dict[str, dict[str, Any]]:
    attrs = {}
    for name, m in model.named_modules():
        for kind, keys in _CHANNEL_ATTRS.items():
            if isinstance(m, kind):
                attrs[name] = {k: (list(v) if isinstance(v, tuple) else v)
                               for k in keys if (v := getattr(m, k, None)) is not None}
    return attrs


def _atomic_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(obj, tmp))  # a full disk: a one-line WriteError


def save_pruned(model: nn.Module, path: str | os.PathLike, **metadata: Any) -> Path:
    """Save a (pruned) model as a weights-only checkpoint with JSON ``metadata`` (atomic write).

    ``metadata`` (task, arch, build kwargs, plan...) must be JSON-serialisable.
    """
    path = Path(path)
    try:
        state_dict = model.state_dict()
        meta = json.dumps({"user": metadata, "layers": _channel_attrs(model),
                           "base_shapes": getattr(model, BASE_SHAPES, None),
                           "module_versions": _module_versions(state_dict)})
    except TypeError as e:
        raise CheckpointError(f"metadata for {path} is not JSON-serialisable ({e}): pass plain "
                              f"numbers, strings, lists and dicts") from None
    state = {k: v.detach().cpu().clone() for k, v in state_dict.items()}
    _atomic_save({"format": FORMAT, "version": VERSION, "metadata": meta, "state_dict": state},
                 path)
    return path


def _module_versions(state_dict: dict[str, torch.Tensor]) -> dict[str, int]:
    """``{module name: version}`` from a state dict's ``_metadata`` (what each module's
    ``_load_from_state_dict`` reads, e.g. torchvision MNASNet's); JSON instead of pickle."""
    meta = getattr(state_dict, "_metadata", None) or {}
    return {name: local["version"] for name, local in meta.items()
            if isinstance(local, dict) and _is_int(local.get("version"))}


def _with_versions(state: dict[str, torch.Tensor], versions: dict[str, int]
                   ) -> dict[str, torch.Tensor]:
    """``state`` as a state dict whose ``_metadata`` holds ``versions`` again."""
    out = OrderedDict(state)
    out._metadata = OrderedDict((name, {"version": v}) for name, v in versions.items())
    return out


def _read(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: check the path")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - corrupt zip, truncated file, unsafe pickle...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if first.startswith("Weights only load failed"):  # torch's long advice to unpickle
            first = "it holds pickled Python objects, which are never loaded"
        raise UnreadableCheckpointError(f"{path} cannot be read as a weights-only checkpoint "
                                        f"(corrupt, truncated or not made by autoprune: "
                                        f"{first[:160]})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise NotAutopruneCheckpointError(f"{path} is not an autoprune pruned checkpoint (no "
                                          f"'format': '{FORMAT}'); for a plain state_dict use "
                                          f"model.load_state_dict(torch.load(path, "
                                          f"weights_only=True))")
    version = data.get("version", 0)
    if not _is_int(version):
        raise damaged(path)
    if version > VERSION:
        raise CheckpointError(f"{path} was written by a newer autoprune (version "
                              f"{version}): upgrade autoprune")
    try:
        meta = json.loads(data["metadata"])
        if not isinstance(meta, dict) or not _well_formed(meta, data["state_dict"]):
            raise TypeError
    except (KeyError, TypeError, ValueError, RecursionError):
        raise damaged(path) from None
    bad = _bad_user_field(meta.get("user", {}))
    if bad:
        raise damaged(path, bad)
    return {**data, "metadata": meta}


def damaged(path: Path, why: str = "its metadata or weights cannot be read") -> CheckpointError:
    """The error for a checkpoint that cannot be used as it is, saying ``why``."""
    return CheckpointError(f"{path} is damaged ({why}): restore a copy or save the model again")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _well_formed(meta: dict[str, Any], state: Any) -> bool:
    """Whether metadata and weights have the types that load_pruned and the readers rely on."""
    def shape(v: Any) -> bool:
        return isinstance(v, list) and all(_is_int(s) for s in v)

    layers, base = meta.get("layers", {}), meta.get("base_shapes")
    versions = meta.get("module_versions", {})
    return (isinstance(state, dict)
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())
            and isinstance(meta.get("user", {}), dict)
            and isinstance(layers, dict)
            and all(isinstance(attrs, dict) and all(_is_int(v) or shape(v) for v in attrs.values())
                    for attrs in layers.values())
            and (base is None or isinstance(base, dict) and all(shape(s) for s in base.values()))
            and isinstance(versions, dict) and all(_is_int(v) for v in versions.values()))


# Counts in the metadata the task layer builds models from: each a positive whole number (or None).
def _bad_user_field(user: dict[str, Any]) -> str | None:
    """Why the fields a model is rebuilt from (``task``, ``arch``, ``build``, ``input_size``) are
    invalid, naming the field; None when they are fine (or absent). What ``build`` holds is
    its task's to check (``TaskAdapter.check_build_kwargs``)."""
    for key in ("task", "arch"):
        if user.get(key) is not None and not isinstance(user[key], str):
            return f"metadata field {key!r} is {user[key]!r:.40}, not a name"
    build = user.get("build", {})
    if not isinstance(build, dict):
        return f"metadata field 'build' is {build!r:.40}, not a map of build arguments"
    size = user.get("input_size")
    fields = [(f"input_size[{i}]", v) for i, v in enumerate(size)] \
        if isinstance(size, list) else [("input_size", size)]
    for name, value in fields:
        if value is not None and not (_is_int(value) and value > 0):
            return f"metadata field {name!r} is {value!r:.40}, not a positive whole number"
    return None


def read_pruned_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata passed to :func:`save_pruned` for this checkpoint."""
    return _read(path)["metadata"].get("user", {})


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint written by :func:`save_pruned`, for a model of its shapes
    (with the modules' state-dict versions, as ``model.state_dict()`` gives them)."""
    data = _read(path)
    return _with_versions(data["state_dict"], data["metadata"].get("module_versions", {}))


def _shrink(model: nn.Module, state: dict[str, torch.Tensor], path: Path) -> None:
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        for store in (module._parameters, module._buffers):
            for key, tensor in list(store.items()):
                full = prefix + key
                if tensor is None or full not in state:
                    continue
                shape = state[full].shape
                if tensor.dim() != len(shape):
                    raise CheckpointError(f"{path} does not fit this model: {full} has "
                                          f"{tensor.dim()} dims here, {len(shape)} in the file "
                                          f"(another architecture?)")
                if tensor.shape == shape:
                    continue
                if any(s > t for s, t in zip(shape, tensor.shape)):
                    raise CheckpointError(f"{path} does not fit this model: {full} is "
                                          f"{tuple(shape)} in the file but only "
                                          f"{tuple(tensor.shape)} here (another width or "
                                          f"num_classes?)")
                new = torch.empty(shape, dtype=tensor.dtype, device=tensor.device)
                store[key] = nn.Parameter(new, tensor.requires_grad) \
                    if isinstance(tensor, nn.Parameter) else new


def load_pruned(path: str | os.PathLike, base_model: nn.Module) -> nn.Module:
    """Load a pruned checkpoint into ``base_model`` (a fresh, unpruned model of the same
    architecture), which is resized in place and returned. Uses ``torch.load(weights_only=True)``.
    """
    path = Path(path)
    data = _read(path)
    state, meta = data["state_dict"], data["metadata"]
    base_shapes = meta.get("base_shapes") or {k: list(v.shape) for k, v in state.items()}
    _check_base(base_model, base_shapes, path)
    modules = dict(base_model.named_modules())
    layers = meta.get("layers", {})
    for name, attrs in layers.items():  # every check before the model is changed
        if name not in modules:
            raise CheckpointError(f"{path} does not fit this model: it has no layer {name!r} "
                                  f"(another architecture?)")
        allowed = {k for kind, keys in _CHANNEL_ATTRS.items() if isinstance(modules[name], kind)
                   for k in keys}
        for key in attrs:
            if key not in allowed:
                raise damaged(path, f"layer {name!r} lists {key!r}, not a channel attribute of "
                                     f"{type(modules[name]).__name__}")
    _shrink(base_model, state, path)
    for name, attrs in layers.items():
        for key, value in attrs.items():
            setattr(modules[name], key, tuple(value) if isinstance(value, list) else value)
    for module in base_model.modules():
        if isinstance(module, nn.RNNBase):  # its forward reads the weights it listed when built
            module._init_flat_weights()
    sync_attributes(base_model)
    sync_metadata(base_model)
    versions = meta.get("module_versions") or _module_versions(base_model.state_dict())
    try:  # a checkpoint from before versions were saved: the fresh model's own versions
        base_model.load_state_dict(_with_versions(state, versions), strict=True)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise CheckpointError(f"{path} does not fit this model: {' '.join(lines[1:3])[:300]} "
                              f"(build the same architecture the checkpoint was made from)") \
            from None
    setattr(base_model, BASE_SHAPES, base_shapes)
    return base_model


def _check_base(model: nn.Module, base_shapes: dict[str, list[int]], path: Path) -> None:
    """The model must be the architecture the checkpoint was pruned from, tensor for tensor."""
    own = {k: list(v.shape) for k, v in model.state_dict().items()}
    for key, shape in base_shapes.items():
        if key not in own:
            raise CheckpointError(f"{path} does not fit this model: it has no tensor {key!r} "
                                  f"(another architecture?)")
        if own[key] != list(shape):
            raise CheckpointError(f"{path} does not fit this model: {key} is {tuple(own[key])} "
                                  f"here but {tuple(shape)} in the model the checkpoint was "
                                  f"made from (another width or num_classes?)")


def opset_range() -> tuple[int, int]:
    """The ONNX opsets torch's (TorchScript) exporter writes."""
    from torch.onnx import _constants

    return (getattr(_constants, "ONNX_MIN_OPSET", 7),
            getattr(_constants, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", 20))


def check_opset(opset_version: Any) -> int:
    """Refuse an ONNX opset torch's exporter cannot write (one-line ConfigError)."""
    low, high = opset_range()
    if not _is_int(opset_version) or not low <= opset_version <= high:
        raise ConfigError(f"opset_version={opset_version!r} is not an ONNX opset torch "
                          f"{torch.__version__.split('+')[0]} exports ({low}..{high}): "
                          f"pass e.g. 17")
    return int(opset_version)


def export_onnx(model: nn.Module, example_inputs: Any, path: str | os.PathLike,
                opset_version: int = 17, dynamic_batch: bool = True,
                metadata: Mapping[str, Any] | None = None) -> Path:
    """Export ``model`` (in eval mode) to ONNX at ``path``; the model's mode is kept. The inputs
    are named ``input`` (``input0``, ``input1``... for several), the outputs ``output``
    (``output0``...). ``dynamic_batch`` (default) lets every input and output take any batch
    size (axis 0 named ``batch``); False fixes the example's batch size. The file is written
    atomically (a temp file next to it, then renamed): an interrupted export leaves an earlier
    file at ``path`` as it was, and no half file."""
    opset_version = check_opset(opset_version)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    was_training = model.training
    model.eval()
    try:
        try:
            with torch.no_grad():
                shapes = [tuple(t.shape) for t in tensors_in(model(*args))]
        except RuntimeError as e:  # e.g. an input too small for the model's downsampling
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            raise ConfigError(f"the model does not run on an input of shape "
                              f"{[list(t.shape) for t in tensors_in(args)]} ({first}): export "
                              f"it at another input size") from None
        inputs = io_names("input", len(args))
        output_names = io_names("output", len(shapes))
        axes = {name: {0: "batch"} for name in inputs + output_names} if dynamic_batch else None

        def write(tmp: str) -> None:
            try:
                torch.onnx.export(model, args, tmp, opset_version=opset_version, dynamo=False,
                                  input_names=inputs, output_names=output_names,
                                  dynamic_axes=axes)
            except torch.onnx.errors.OnnxExporterError as e:
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                raise ConfigError(f"the model cannot be exported to ONNX at opset "
                                  f"{opset_version} ({first}): try a newer opset (up to "
                                  f"{opset_range()[1]}), e.g. 17") from None
            _declare_output_shapes(Path(tmp), shapes, dynamic_batch, metadata)

        atomic_write(path, write)
    finally:
        model.train(was_training)
    return path


def _declare_output_shapes(path: Path, shapes: list[tuple[int, ...]], dynamic_batch: bool,
                           metadata: Mapping[str, Any] | None = None) -> None:
    """:func:`declare_output_shapes` on the ONNX file at ``path``, and ``metadata`` written into
    it (left as exported without the ``onnx`` package, or over 2 GB: then it holds external
    data)."""
    try:
        import onnx
    except ImportError:
        return
    if path.stat().st_size > 1_900_000_000:
        return
    graph_model = onnx.load(str(path))
    declare_output_shapes(graph_model, shapes, dynamic_batch)
    for key, value in (metadata or {}).items():
        entry = graph_model.metadata_props.add()
        entry.key, entry.value = str(key), str(value)
    onnx.save(graph_model, str(path))


def declare_output_shapes(graph_model: Any, shapes: list[tuple[int, ...]],
                          dynamic_batch: bool) -> Any:
    """Write the outputs' true shapes into an ONNX ``ModelProto`` (in place; returned): the
    exporter's shape inference can name a static axis after the batch (a segmentation mask's
    height came out as ``batch``). Every axis but the batch is fixed by the example's input
    size."""
    for output, shape in zip(graph_model.graph.output, shapes):
        dims = output.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for i, (dim, size) in enumerate(zip(dims, shape)):
            if i == 0 and dynamic_batch:
                dim.dim_param = "batch"
            else:
                dim.dim_value = size
    return graph_model


def io_names(stem: str, count: int) -> list[str]:
    """The names of an exported model's inputs or outputs: ``input`` / ``output`` for one,
    ``input0``, ``input1``... for several."""
    return [stem] if count == 1 else [f"{stem}{i}" for i in range(count)]
