"""Ultralytics YOLO surgery: offline set-up, split-free twins of C2f/C3k2/C2PSA/PSA, the layers that
must keep their channels, and a trainer that fine-tunes the given (pruned) module.

Importing this module sets the offline environment *before* Ultralytics is imported (FIELD_NOTES):
``YOLO_OFFLINE=1``, ``YOLO_AUTOINSTALL=False``, a writable ``YOLO_CONFIG_DIR`` holding matplotlib's
DejaVuSans as ``Arial.ttf`` / ``Arial.Unicode.ttf`` so ``check_font`` never downloads. Nothing here
opens a network connection.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import logging
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import matplotlib
import torch
import torch.nn as nn

from ...engine.padding import pad_channels, remove_channels
from ...engine.progress import interactive
from ...errors import CheckpointError

FONTS = ("Arial.ttf", "Arial.Unicode.ttf")


def _writable_dir(*candidates: Path) -> Path:
    for path in candidates:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".autoprune-write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
            return path
        except OSError:
            continue
    raise OSError("no writable folder for Ultralytics settings: set YOLO_CONFIG_DIR")


def _place_fonts(folder: Path) -> None:
    """Copy matplotlib's DejaVuSans to ``folder`` as the fonts Ultralytics would download."""
    missing = [name for name in FONTS if not (folder / name).is_file()]
    if not missing:
        return
    source = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    folder.mkdir(parents=True, exist_ok=True)
    for name in missing:
        with contextlib.suppress(OSError):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            os.close(fd)
            shutil.copyfile(source, tmp)
            os.replace(tmp, folder / name)


def setup_offline() -> Path:
    """Set the offline environment for Ultralytics (idempotent); returns its settings folder."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_AUTOINSTALL", "False")
    if not os.environ.get("YOLO_CONFIG_DIR"):
        home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        os.environ["YOLO_CONFIG_DIR"] = str(_writable_dir(
            home / "autoprune", Path(tempfile.gettempdir()) / f"autoprune-{os.getuid()}"))
    user_dir = Path(os.environ["YOLO_CONFIG_DIR"]).expanduser() / "Ultralytics"
    _place_fonts(user_dir)
    return user_dir


setup_offline()

import ultralytics  # noqa: E402  (after the offline environment is set)

from ultralytics import YOLO  # noqa: E402
from ultralytics.engine.model import Model as YOLOModel  # noqa: E402  (YOLO objects)
from ultralytics.models.yolo.detect import DetectionTrainer, DetectionValidator  # noqa: E402
from ultralytics.nn.modules import C2PSA, PSA, C2f, Conv, Detect  # noqa: E402
from ultralytics.nn.modules.block import DFL, Attention, RepNCSPELAN4  # noqa: E402
from ultralytics.nn.tasks import DetectionModel, guess_model_task, torch_safe_load  # noqa: E402
from ultralytics.utils import DEFAULT_CFG_DICT, LOGGER, USER_CONFIG_DIR, nms  # noqa: E402

_place_fonts(Path(USER_CONFIG_DIR))  # Ultralytics may have been imported before us, elsewhere
with contextlib.suppress(Exception):  # analytics: never on for autoprune runs
    from ultralytics.utils.events import events

    events.enabled = False

_LAYER_ATTRS = ("f", "i", "type", "np")  # read by DetectionModel._predict_once and model.info


# -- split-free twins ----------------------------------------------------------------------------
def _split_conv(conv: Conv, c: int) -> tuple[Conv, Conv]:
    """Cut an Ultralytics Conv (conv + bn + act) with 2c outputs into two with c outputs each."""
    halves = []
    for part in (slice(0, c), slice(c, None)):
        new = copy.deepcopy(conv)
        with torch.no_grad():
            new.conv.weight = nn.Parameter(conv.conv.weight[part].clone(),
                                           conv.conv.weight.requires_grad)
            if conv.conv.bias is not None:
                new.conv.bias = nn.Parameter(conv.conv.bias[part].clone(), conv.conv.bias.requires_grad)
            new.conv.out_channels = new.conv.weight.shape[0]
            bn = getattr(conv, "bn", None)
            if bn is not None:
                for key in ("weight", "bias"):
                    p = getattr(bn, key)
                    if p is not None:
                        setattr(new.bn, key, nn.Parameter(p[part].clone(), p.requires_grad))
                for key in ("running_mean", "running_var"):
                    b = getattr(bn, key)
                    if b is not None:
                        setattr(new.bn, key, b[part].clone())
                new.bn.num_features = new.conv.out_channels
        halves.append(new)
    return halves[0], halves[1]


def _copy_layer_attrs(src: nn.Module, dst: nn.Module) -> nn.Module:
    for key in _LAYER_ATTRS:
        if hasattr(src, key):
            setattr(dst, key, getattr(src, key))
    return dst


class _SplitCv1(nn.Module):
    """A block whose ``cv1`` output was split in two halves, now the layers ``cv0`` and ``cv1``;
    its other layers (``cv2``, ``m``, ``attn``...) are taken over as they are, in their order."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.c = block.c
        self.native = type(block).__name__  # the Ultralytics class it is written back as
        self.cv0, self.cv1 = _split_conv(block.cv1, block.c)
        for name, child in block.named_children():
            if name != "cv1":
                setattr(self, name, child)
        _copy_layer_attrs(block, self)


class C2fSplitFree(_SplitCv1):
    """C2f / C3k2 without ``chunk``: ``cv0`` and ``cv1`` are the two halves of the original ``cv1``.

    ``y = [cv0(x), cv1(x)]; y += [m(y[-1]) for m in self.m]; cv2(cat(y))`` — the same numbers as
    the original, but each half is its own layer, so the halves can lose channels independently.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv0(x), self.cv1(x)]
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class C2PSASplitFree(_SplitCv1):
    """C2PSA without ``split``: ``cv0`` (passed through) and ``cv1`` (into the PSA blocks)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv2(torch.cat((self.cv0(x), self.m(self.cv1(x))), 1))


class PSASplitFree(_SplitCv1):
    """PSA without ``split``: ``cv0`` (passed through) and ``cv1`` (attention + feed-forward)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.cv1(x)
        b = b + self.attn(b)
        b = b + self.ffn(b)
        return self.cv2(torch.cat((self.cv0(x), b), 1))


class ELANSplitFree(_SplitCv1):
    """RepNCSPELAN4 / ELAN1 (YOLOv9) without ``chunk``: ``cv0`` and ``cv1`` are the two halves of
    the original ``cv1``; ``y = [cv0(x), cv1(x)]; y += [cv2(y[-1]), cv3(...)]; cv4(cat(y))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv0(x), self.cv1(x)]
        y.extend(m(y[-1]) for m in (self.cv2, self.cv3))
        return self.cv4(torch.cat(y, 1))


# C3k2 is a C2f, ELAN1 a RepNCSPELAN4
TWINS = ((C2f, C2fSplitFree), (C2PSA, C2PSASplitFree), (PSA, PSASplitFree),
         (RepNCSPELAN4, ELANSplitFree))
SPLIT_FREE = tuple(t for _, t in TWINS)


def patch_model(model: nn.Module) -> nn.Module:
    """Replace every C2f / C3k2 / C2PSA / PSA of ``model`` by its split-free twin (in place).

    The outputs stay the same; the model keeps its layer indices, so Ultralytics still runs it.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            for original, twin in TWINS:
                if isinstance(child, original) and type(child).forward is original.forward:
                    new = twin(child)
                    if getattr(child, PADDED, None):  # written back by write_native: unpad
                        new = _unpadded(new, getattr(child, PADDED))
                    setattr(parent, name, new)
                    break
    return model


# -- writing the native Ultralytics blocks back (a checkpoint that needs no autoprune) ----------
PADDED = "autoprune_halves"  # on a native block written back: the pruned widths of its two halves


def _block_input(block: _SplitCv1) -> torch.Tensor:
    return torch.zeros(1, block.cv0.conv.in_channels, 8, 8)


def _same_outputs(a: nn.Module, b: nn.Module, channels: int) -> bool:
    """True when the two blocks give the same outputs (float, eval mode) on a random input."""
    x = torch.randn(2, channels, 16, 16, generator=torch.Generator().manual_seed(0))
    a, b = copy.deepcopy(a).float().eval(), copy.deepcopy(b).float().eval()
    with torch.no_grad():
        want, got = a(x), b(x)
    return want.shape == got.shape and bool(torch.allclose(
        got, want, rtol=1e-5, atol=1e-5 * max(1.0, want.abs().max().item())))


def _join_convs(first: Conv, second: Conv) -> Conv:
    """One Conv whose outputs are ``first``'s then ``second``'s (the inverse of _split_conv)."""
    joined = copy.deepcopy(first)
    with torch.no_grad():
        for module, parts in ((joined.conv, (first.conv, second.conv)),
                              (getattr(joined, "bn", None), (getattr(first, "bn", None),
                                                             getattr(second, "bn", None)))):
            if module is None:
                continue
            for key in ("weight", "bias", "running_mean", "running_var"):
                old = getattr(module, key, None)
                if old is None:
                    continue
                value = torch.cat([getattr(p, key) for p in parts], 0)
                setattr(module, key, nn.Parameter(value, old.requires_grad)
                        if isinstance(old, nn.Parameter) else value)
        joined.conv.out_channels = joined.conv.weight.shape[0]
        if getattr(joined, "bn", None) is not None:
            joined.bn.num_features = joined.conv.out_channels
    return joined


def _native_class(block: _SplitCv1) -> type:
    """The Ultralytics class a split-free block was made from (C2f or C3k2, ELAN1...)."""
    default = next(original for original, twin in TWINS if isinstance(block, twin))
    from ultralytics.nn.modules import block as blocks

    for name in (getattr(block, "native", None), str(getattr(block, "type", "")).split(".")[-1]):
        cls = getattr(blocks, name, None) if name else None
        if isinstance(cls, type) and issubclass(cls, default) and cls.forward is default.forward:
            return cls
    return default


def native_block(block: _SplitCv1) -> nn.Module | None:
    """The native Ultralytics block (C2f, C3k2, C2PSA, PSA, RepNCSPELAN4, ELAN1) that computes
    what the split-free ``block`` computes: the narrower half is padded with zero channels so
    that ``cv1``'s output splits into two equal halves again (the widths are kept in
    ``autoprune_halves`` so that :func:`patch_model` takes them off). None when it cannot be done
    exactly."""
    a, b = block.cv0.conv.out_channels, block.cv1.conv.out_channels
    c = max(a, b)
    dtype = block.cv0.conv.weight.dtype
    work = copy.deepcopy(block).float()
    try:
        pad_channels(work, _block_input(work), work.cv0.conv, c - a)
        pad_channels(work, _block_input(work), work.cv1.conv, c - b)
    except (ValueError, RuntimeError):
        return None
    cls = _native_class(block)
    native = cls.__new__(cls)
    nn.Module.__init__(native)
    for key, value in work.__dict__.items():
        if not key.startswith("_") and key not in ("training", "native"):
            setattr(native, key, value)
    native.c = c
    native.cv1 = _join_convs(work.cv0, work.cv1)
    for name, child in work.named_children():
        if name not in ("cv0", "cv1"):
            setattr(native, name, child)
    if a != b:
        setattr(native, PADDED, (a, b))
    native.train(block.training)
    if not _same_outputs(block, native, block.cv0.conv.in_channels):
        return None
    return native.to(dtype)


def _unpadded(block: _SplitCv1, halves: tuple[int, int]) -> _SplitCv1:
    """``block`` (just split from a native block written back) without the zero channels its
    halves were padded with; ``block`` itself if they are not zero any more (trained since)."""
    dtype = block.cv0.conv.weight.dtype
    work = copy.deepcopy(block).float()
    try:
        for half, kept in zip((work.cv0, work.cv1), halves):
            remove_channels(work, _block_input(work), half.conv,
                            list(range(int(kept), half.conv.out_channels)))
    except (ValueError, RuntimeError, IndexError):
        return block
    if not _same_outputs(block, work, block.cv0.conv.in_channels):
        return block
    return work.to(dtype)


def to_native(model: nn.Module) -> list[str]:
    """Replace each split-free block of ``model`` by the native Ultralytics block that gives the
    same outputs (in place); returns the names of the blocks that could not be (left as they
    are)."""
    left = []
    names = {m: n for n, m in model.named_modules()}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, SPLIT_FREE):
                native = native_block(child)
                if native is None:
                    left.append(f"{names[parent]}.{name}".lstrip("."))
                else:
                    setattr(parent, name, native)
    return left


@dataclasses.dataclass
class NativeWrite:
    """What :func:`write_native` did: ``left``, the blocks that had to stay split-free (the file
    then still needs autoprune); ``params`` and ``padded_params`` of the model before and after
    (the zero channels added to make the halves equal)."""

    left: list[str]
    params: int = 0
    padded_params: int = 0
    changed: bool = False


def write_native(path: str | os.PathLike) -> NativeWrite:
    """Rewrite the Ultralytics checkpoint at ``path`` (a ``best.pt`` this run trained) with native
    Ultralytics blocks in place of autoprune's split-free ones, so that ``YOLO(path)`` loads it
    where autoprune is not installed; the outputs stay the same. A file without split-free blocks
    is left as it is."""
    torch.serialization.add_safe_globals(list(SPLIT_FREE))
    with quiet():
        ckpt, _ = torch_safe_load(str(path), safe_only=True)
    done, seen = NativeWrite([]), set()
    for key in ("model", "ema"):
        net = ckpt.get(key) if isinstance(ckpt, dict) else None
        if not isinstance(net, nn.Module) or id(net) in seen:
            continue
        seen.add(id(net))
        if any(isinstance(m, SPLIT_FREE) for m in net.modules()):
            done.params = sum(p.numel() for p in net.parameters())
            done.left += to_native(net)
            done.padded_params = sum(p.numel() for p in net.parameters())
            done.changed = True
    if done.changed:
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)
        try:
            torch.save(ckpt, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    done.left = list(dict.fromkeys(done.left))  # in model order, once each
    return done


def is_patched(model: nn.Module) -> bool:
    """True when no split/chunk block is left."""
    return not any(isinstance(m, tuple(original for original, _ in TWINS))
                   for m in model.modules())


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """Leaf modules whose output channels must stay: each Detect branch's last conv (``cv2``,
    ``cv3``, ``cv4`` and the ``one2one_*`` twins), the DFL, and every Attention block (YOLO12's
    area attention ``AAttn`` too: its heads are fixed views of its qkv conv)."""
    out: list[nn.Module] = []
    for m in model.modules():
        if isinstance(m, Detect):
            for key in ("cv2", "cv3", "cv4", "cv5", "one2one_cv2", "one2one_cv3", "one2one_cv4"):
                branches = getattr(m, key, None)
                if isinstance(branches, nn.ModuleList):
                    for branch in branches:
                        last = branch[-1] if isinstance(branch, nn.Sequential) else branch
                        out.extend(last.modules())
            if isinstance(getattr(m, "dfl", None), nn.Module):
                out.extend(m.dfl.modules())
        elif isinstance(m, (Attention, DFL)) or "Attention" in type(m).__name__ \
                or type(m).__name__ == "AAttn":  # YOLO12's area attention
            out.extend(m.modules())
    seen, unique = set(), []
    for m in out:
        if id(m) not in seen:
            seen.add(id(m))
            unique.append(m)
    return unique


def detect_head(model: nn.Module) -> Detect | None:
    heads = [m for m in model.modules() if isinstance(m, Detect)]
    return heads[-1] if heads else None


def model_nc(model: nn.Module) -> int | None:
    """Number of classes the model predicts."""
    head = detect_head(model)
    return int(head.nc) if head is not None else getattr(model, "nc", None)


# -- validation and training --------------------------------------------------------------------
@contextlib.contextmanager
def _patient_nms() -> Iterator[None]:
    """Ultralytics' NMS stops after 2 s + 0.05 s per image and drops the rest: on a loaded CPU
    that makes mAP (and every sensitivity point) depend on the machine's load. Lift the limit."""
    original = nms.non_max_suppression

    def patient(*args, **kwargs):
        kwargs.setdefault("max_time_img", 1e6)
        return original(*args, **kwargs)

    nms.non_max_suppression = patient
    try:
        yield
    finally:
        nms.non_max_suppression = original


class PatientValidator(DetectionValidator):
    """DetectionValidator whose NMS has no time limit (same results, independent of load)."""

    def postprocess(self, preds):
        with _patient_nms():
            return super().postprocess(preds)


class KeepModuleTrainer(DetectionTrainer):
    """DetectionTrainer that trains the module it is given instead of rebuilding it from YAML.

    Ultralytics' own ``get_model`` builds a fresh model from the YAML and copies the tensors whose
    shapes match, which silently undoes pruning. Here a module passed as ``weights`` (resume, a
    loaded checkpoint) or set as ``module`` on a subclass (an in-memory model) is used as it is.
    Resume a run with ``YOLO(last_pt).train(resume=True, trainer=KeepModuleTrainer)``.
    """

    module: nn.Module | None = None

    def get_model(self, cfg=None, weights=None, verbose=True):
        m = weights if isinstance(weights, nn.Module) else type(self).module
        if m is None:
            return super().get_model(cfg, weights, verbose)
        m = patch_model(m)  # an unpatched checkpoint trains as well, and stays prunable
        if self.data.get("names"):
            m.names = self.data["names"]
        return m.float().requires_grad_(True)  # checkpoints are stored frozen, in half precision

    def get_validator(self):
        validator = super().get_validator()
        validator.__class__ = PatientValidator  # the same validator, NMS without a time limit
        return validator


def keep_module_trainer(module: nn.Module,
                        base: type[KeepModuleTrainer] | None = None) -> type[KeepModuleTrainer]:
    """A subclass of ``base`` (KeepModuleTrainer, or another task's twin of it) that trains
    ``module`` (an in-memory model)."""
    base = base or KeepModuleTrainer
    return type(base.__name__, (base,), {"module": module, "__module__": base.__module__})


@contextlib.contextmanager
def _plain_progress() -> Iterator[None]:
    """Ultralytics' bars, in a log file or a pipe: drawn once, when done (as on a CI console),
    instead of a frame every 0.1 s kept in the log."""
    module = importlib.import_module("ultralytics.utils.tqdm")
    original = getattr(module, "is_noninteractive_console", None)
    if original is None or interactive(sys.stdout):  # where Ultralytics' bars go
        yield
        return
    module.is_noninteractive_console = lambda: True
    try:
        yield
    finally:
        module.is_noninteractive_console = original


@contextlib.contextmanager
def quiet(enabled: bool = True) -> Iterator[None]:
    """Silence Ultralytics' logger (warnings stay) for the duration of the block; its progress
    bars are drawn once when they end if stdout is not a terminal."""
    with _plain_progress():
        if not enabled:
            yield
            return
        level = LOGGER.level
        LOGGER.setLevel(logging.WARNING)
        try:
            yield
        finally:
            LOGGER.setLevel(level)


def read_ultralytics(path: str | os.PathLike) -> tuple[nn.Module, dict]:
    """``(model, checkpoint)`` of an Ultralytics checkpoint, loaded ``weights_only`` against
    Ultralytics' allow-list of model classes plus autoprune's split-free twins: a file holding any
    other class is refused, never unpickled. The model is float, in eval mode, not yet patched."""
    torch.serialization.add_safe_globals(list(SPLIT_FREE))
    with quiet():
        ckpt, _ = torch_safe_load(str(path), safe_only=True)
    model = ckpt.get("ema") or ckpt.get("model") if isinstance(ckpt, dict) else None
    if not isinstance(model, nn.Module):
        raise TypeError("no model in it")
    model = model.float()
    model.args = {**DEFAULT_CFG_DICT, **(ckpt.get("train_args") or {})}
    model.pt_path = str(path)
    model.task = getattr(model, "task", None) or guess_model_task(model)
    if not hasattr(model, "stride"):
        model.stride = torch.tensor([32.0])
    return model.eval(), ckpt


def resume_training(last: str | os.PathLike, progress: bool = True,
                    trainer: type[KeepModuleTrainer] | None = None):
    """Continue an interrupted Ultralytics run from its ``last.pt`` with :class:`KeepModuleTrainer`
    (or ``trainer``, another task's twin of it: the pruned module itself trains on); returns the
    ``YOLO`` object, its ``trainer`` done."""
    load_ultralytics(last)  # refuses a file of unknown classes before Ultralytics unpickles it
    threads = torch.get_num_threads()
    try:
        with quiet(not progress):
            wrapper = YOLO(str(last))
            wrapper.train(resume=True, trainer=trainer or KeepModuleTrainer)
    finally:
        torch.set_num_threads(threads)
    return wrapper


def load_ultralytics(path: str | os.PathLike) -> nn.Module:
    """The model of an Ultralytics checkpoint (loaded safely, see :func:`read_ultralytics`),
    float, patched."""
    try:
        model, _ = read_ultralytics(path)
    except (TypeError, KeyError, AttributeError, RuntimeError, EOFError, ValueError,
            pickle.UnpicklingError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(f"{path} is neither an autoprune checkpoint nor an Ultralytics one "
                              f"made of known model classes ({first}): pass a checkpoint "
                              f"written by autoprune or Ultralytics") from None
    return patch_model(model)


__all__ = ["C2PSASplitFree", "C2fSplitFree", "DetectionModel", "DetectionValidator",
           "ELANSplitFree",
           "KeepModuleTrainer", "NativeWrite", "PSASplitFree", "PatientValidator", "SPLIT_FREE", "detect_head",
           "ignored_layers", "is_patched", "keep_module_trainer", "load_ultralytics", "model_nc",
           "patch_model", "read_ultralytics", "resume_training", "quiet", "setup_offline",
           "to_native", "ultralytics", "write_native", "YOLOModel"]
