"""Pretrained weights, shared by the tasks: where a weights file came from (:class:`Provenance`),
its sha256, a quick offline / reachability check, the one-line error for a file that is neither
cached nor fetchable, and reading what a cache or a user supplies (weights-only, one-line errors).
The hub caches themselves (Hugging Face, torch hub) are :mod:`autoprune.tasks.hub_cache`.

Nothing is fetched unless a caller asks for named weights; a cached copy is used without the
network. "Offline" is ``HF_HUB_OFFLINE`` (Hugging Face), ``YOLO_OFFLINE`` (Ultralytics) or a
site that does not answer one HTTP ``HEAD`` within :data:`PROBE_TIMEOUT` seconds (through the
proxies the environment names), so a blocked network fails in seconds instead of retrying for a
minute. Imports no model library (timm,
torchvision, smp, Ultralytics): the tasks' ``pretrained`` modules do.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Iterator, Mapping
from urllib.parse import urlparse

import torch

from ..engine.provenance import SOURCES, Provenance, file_provenance, sha256_of
from ..errors import AutopruneError, ConfigError

PROBE_TIMEOUT = 2.0  # seconds for the one TCP connect that decides whether to try a download
PROBE_TTL = 60.0  # seconds a probe's answer is reused
LOCAL = "pretrain_weights=<local file>"  # the way out that needs no network, in every message
TRUTHY = frozenset({"1", "true", "yes", "on", "y", "t"})


# Provenance, sha256_of and file_provenance: autoprune.engine.provenance (re-exported here)


# -- offline and reachability --------------------------------------------------------------------
def env_flag(*names: str) -> bool:
    """True when any of the environment variables is set to a true word (1, true, yes, on...)."""
    return any(os.environ.get(n, "").strip().lower() in TRUTHY for n in names)


_probes: dict[str, tuple[float, bool]] = {}


def site_root(url: str) -> str:
    """``scheme://host[:port]/`` of ``url``: what :func:`reachable` asks."""
    parts = urlparse(url)
    return f"{parts.scheme or 'https'}://{parts.netloc or parts.path.split('/')[0]}/"


def reachable(url: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether one HTTP ``HEAD`` of ``url``'s site root gets any HTTP answer (an error status
    too) within ``timeout`` seconds, through the proxies the environment names, as the
    downloads would. Name look-up, connect, TLS and the answer all count: it runs in a thread,
    so a hanging resolver or a silent peer cannot hold the caller longer. A bare TCP connect
    is not enough: some sandboxes and proxies accept any connection. Answers are reused for
    :data:`PROBE_TTL` seconds."""
    root = site_root(url)
    cached = _probes.get(root)
    if cached and time.monotonic() - cached[0] < PROBE_TTL:
        return cached[1]
    result: list[bool] = []

    def attempt() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(root, method="HEAD"),
                                        timeout=timeout):
                result.append(True)
        except urllib.error.HTTPError:  # the site answered, if only with an error status
            result.append(True)
        except Exception:  # noqa: BLE001 - no answer: look-up, connect, TLS or read failed
            result.append(False)

    thread = threading.Thread(target=attempt, name="autoprune-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.25)
    answer = bool(result and result[0])
    _probes[root] = (time.monotonic(), answer)
    return answer


def unreachable_reason(url: str) -> str | None:
    """None when the site ``url`` is fetched from answers (:func:`reachable`), else why not."""
    host = urlparse(site_root(url)).netloc
    return None if reachable(url) else f"{host} cannot be reached"


def missing_weights_error(what: str, file: str, folder: str | os.PathLike, reason: str,
                          fetch: str, local: str = LOCAL) -> ConfigError:
    """The one-line error for weights that are neither cached nor fetchable: the file, the folder
    it is looked for in, why it cannot be fetched and the two ways out."""
    return ConfigError(f"pretrained weights {what} are not cached ({file} not in {folder}) and "
                       f"cannot be fetched ({reason}): fetch them on a connected machine "
                       f"({fetch}) and copy them into that folder, or pass {local}")


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type when empty), at most 160 chars."""
    return ((str(e).strip().splitlines() or [type(e).__name__])[0])[:160]


# -- reading what a cache or a user supplies ------------------------------------------------------
def refetch(what: str, local: str = LOCAL) -> str:
    """The way out for a damaged cached file: fetch it again, or use a local file."""
    return f"delete it and fetch {what} again, or pass {local}"


def _refused_pickle(e: BaseException | None) -> bool:
    """Whether ``e`` (or what it was raised from) is torch's weights-only unpickler refusing
    an object that is not a tensor."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, pickle.UnpicklingError):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def unreadable(path: str | os.PathLike, e: BaseException, fix: str) -> ConfigError:
    """The one-line error of a weights file that failed to load: a pickle of objects other than
    tensors is refused (nothing in it ran); anything else is named damaged."""
    if _refused_pickle(e):
        return ConfigError(f"refused {path}: it is a pickle holding objects other than tensors "
                           f"(code could run on loading it), which torch.load(weights_only=True) "
                           f"does not load; nothing in it ran: {fix}")
    return ConfigError(f"{path} cannot be read as weights ({type(e).__name__}: {first_line(e)}; "
                       f"truncated or damaged): {fix}")


def read_weights(path: str | os.PathLike, fix: str) -> dict[str, torch.Tensor]:
    """The tensors of a weights file that a cache or a user supplies (safetensors, or torch's
    format read weights-only, never unpickling anything else; a ``{"state_dict": ...}`` wrapper
    unwrapped). A truncated or damaged file, a pickle of other objects or a file of no tensors
    is a one-line ConfigError naming it and ending with ``fix``."""
    try:
        if str(path).endswith(".safetensors"):
            from safetensors.torch import load_file
            state: Any = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - each reader has its own errors: all are one line
        raise unreadable(path, e, fix) from None
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not state or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise ConfigError(f"{path} holds no weights (a {type(state).__name__}, not a map of "
                          f"names to tensors): {fix}")
    return dict(state)


def read_json_config(path: str | os.PathLike, fix: str) -> dict[str, Any]:
    """The JSON object of a cached ``config.json``; a damaged or truncated file, or one that
    holds no object, is a one-line ConfigError naming it and ending with ``fix``."""
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ConfigError(f"{path} is not a readable config.json ({first_line(e)}): "
                          f"{fix}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} is not a config.json of settings (it holds a "
                          f"{type(config).__name__}): {fix}")
    return config


@contextlib.contextmanager
def loading(path: str | os.PathLike, fix: str) -> Iterator[None]:
    """A model library loading the weights file ``path`` inside this block: a failure (a size
    mismatch, a damaged file) becomes a one-line ConfigError naming it; autoprune's own errors
    pass as they are."""
    try:
        yield
    except AutopruneError:
        raise
    except Exception as e:  # noqa: BLE001 - timm, torchvision and smp raise many kinds
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        detail = next((ln for ln in lines if "mismatch" in ln or "Missing" in ln
                       or "Unexpected" in ln), lines[0] if lines else type(e).__name__)
        if _refused_pickle(e):
            raise unreadable(path, e, fix) from None
        raise ConfigError(f"{path} does not load into the model it is for ({detail[:160]}): "
                          f"{fix}") from None


__all__ = ["LOCAL", "PROBE_TIMEOUT", "Provenance", "SOURCES", "env_flag", "file_provenance",
           "first_line", "loading", "missing_weights_error", "read_json_config", "read_weights",
           "reachable", "refetch", "sha256_of", "site_root", "unreachable_reason",
           "unreadable"]
