"""The Hugging Face hub and torch hub caches, read in their own layouts (no network for a cached
file; a download only when the caller asks for named weights and the site answers), written in
those layouts by the ``seed_*`` helpers (tests, benchmarks, air-gapped sites), and timm's
pretrained configs resolved to a file there. Reachability, the one-line errors and reading a
file are :mod:`autoprune.tasks.weights`. Imports no model library.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import urlparse

import torch
import torch.nn as nn

from ..engine.files import write_text_atomic
from ..engine.provenance import Provenance, file_provenance, sha256_of
from ..errors import ConfigError
from .weights import LOCAL, env_flag, first_line, missing_weights_error, unreachable_reason

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # what timm looks for in a hub repo
HF_DEFAULT_ENDPOINT = "https://huggingface.co"


# -- the Hugging Face hub cache ------------------------------------------------------------------
def _expand(path: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(path)))


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, from the environment now (``HF_HUB_CACHE``, then
    ``HUGGINGFACE_HUB_CACHE``, then ``HF_HOME``/hub, then ``XDG_CACHE_HOME``/huggingface/hub):
    the same rule as huggingface_hub's, which reads it once at import."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return _expand(os.environ[name])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return _expand(home) / "hub"


def hf_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT).rstrip("/")


def hf_offline_reason() -> str | None:
    """Why the hub must not be asked: ``HF_HUB_OFFLINE`` set (now, or when huggingface_hub was
    imported), or its host unreachable; None when a download may be tried."""
    if env_flag("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        return "HF_HUB_OFFLINE is set"
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - a dependency of timm and smp
        return "huggingface_hub is not installed"
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE was set when huggingface_hub was imported"
    return unreachable_reason(hf_endpoint())


def hf_repo_folder(repo_id: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """``<cache>/models--<org>--<name>``: the hub's folder of a model repo."""
    return Path(cache_dir or hf_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def hf_url(repo_id: str, filename: str, revision: str | None = None) -> str:
    return f"{hf_endpoint()}/{repo_id}/resolve/{revision or 'main'}/{filename}"


def hf_cached(repo_id: str, filename: str, revision: str | None = None,
              cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The cached file of a hub repo, or None (no network)."""
    from huggingface_hub import try_to_load_from_cache

    hit = try_to_load_from_cache(repo_id, filename, cache_dir=str(cache_dir or hf_cache_dir()),
                                 revision=revision)
    return Path(hit) if isinstance(hit, str) else None


def hf_fetch_command(repo_id: str, files: Sequence[str], revision: str | None,
                     cache: str | os.PathLike) -> str:
    """The ``hf download`` command that puts ``files`` of a repo into the cache ``cache``."""
    rev = f" --revision {revision}" if revision else ""
    return f"hf download {repo_id} {' '.join(files)}{rev} --cache-dir {cache}"


def hf_file(repo_id: str, filenames: Sequence[str] = HF_WEIGHTS, revision: str | None = None,
            *, what: str | None = None, local: str = LOCAL,
            fetch_files: Sequence[str] | None = None) -> Path:
    """The first of ``filenames`` a hub repo holds, from the cache (no network) or downloaded
    into it when the hub may be asked (:func:`hf_offline_reason`); else a one-line ConfigError
    naming the file, the cache folder and the ways out (``hf download`` of ``fetch_files``, by
    default the first file name)."""
    cache = hf_cache_dir()
    for name in filenames:
        found = hf_cached(repo_id, name, revision, cache)
        if found is not None:
            return found
    what = what or repo_id
    reason = hf_offline_reason()
    if reason is None:
        found, reason = _hf_download(repo_id, filenames, revision, cache)
        if found is not None:
            return found
    raise missing_weights_error(what, filenames[0], hf_repo_folder(repo_id, cache), reason,
                                hf_fetch_command(repo_id, fetch_files or filenames[:1], revision,
                                                 cache), local)


def _hf_download(repo_id: str, filenames: Sequence[str], revision: str | None,
                 cache: Path) -> tuple[Path | None, str]:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (EntryNotFoundError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    for name in filenames:
        try:
            return Path(hf_hub_download(repo_id, name, revision=revision,
                                        cache_dir=str(cache))), ""
        except LocalEntryNotFoundError as e:  # the connection failed after all
            return None, f"download failed: {first_line(e)}"
        except EntryNotFoundError:
            continue  # the repo has no such file: try the next name
        except (RepositoryNotFoundError, RevisionNotFoundError) as e:
            raise ConfigError(f"{repo_id}{'@' + revision if revision else ''} is not on the "
                              f"Hugging Face hub ({first_line(e)}): check the name") from None
        except Exception as e:  # noqa: BLE001 - any network failure is one line
            return None, f"download failed: {first_line(e)}"
    raise ConfigError(f"{repo_id} holds none of {', '.join(filenames)}: it is not a weights "
                      f"repo timm or smp can load; check the name")


def _state_of(model: nn.Module | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = model.state_dict() if isinstance(model, nn.Module) else dict(model)
    return {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}


def _hub_config(model: nn.Module | Mapping[str, Any],
                pretrained_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """timm's ``config.json`` fields for a timm model (architecture, num_classes, num_features,
    pretrained_cfg); the given ``pretrained_cfg`` alone for anything else."""
    cfg = dict(getattr(model, "pretrained_cfg", None) or {})
    cfg = {k: v for k, v in cfg.items()
           if v is not None and k not in ("state_dict", "file", "source", "hf_hub_id", "url")}
    cfg.update(pretrained_cfg or {})
    if not isinstance(model, nn.Module) or not cfg.get("architecture"):
        return json.loads(json.dumps(cfg, default=list))
    classes = getattr(model, "num_classes", cfg.get("num_classes"))
    cfg["num_classes"] = classes  # the weights' head, not the source's (timm reads the top one)
    out = {"architecture": cfg.pop("architecture"), "num_classes": classes,
           "num_features": getattr(model, "num_features", None), "pretrained_cfg": cfg}
    return json.loads(json.dumps(out, default=list))


def _link_blob(blob: Path, target: Path) -> None:
    """``target`` -> ``blob`` as the hub does it (a relative symlink; a copy where links fail)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink():
        target.unlink()
    try:
        target.symlink_to(os.path.relpath(blob, target.parent))
    except OSError:
        shutil.copyfile(blob, target)


def _write_blob(repo: Path, data_file: Path) -> Path:
    blob = repo / "blobs" / sha256_of(data_file)
    blob.parent.mkdir(parents=True, exist_ok=True)
    os.replace(data_file, blob)
    return blob


def seed_hf_cache(model: nn.Module | Mapping[str, torch.Tensor], repo_id: str,
                  cache_dir: str | os.PathLike | None = None,
                  pretrained_cfg: Mapping[str, Any] | None = None, *,
                  config: Mapping[str, Any] | None = None, revision: str | None = None,
                  filename: str = "model.safetensors") -> Path:
    """Write ``model``'s weights into a Hugging Face hub cache in the hub's own layout:
    ``models--<org>--<name>/blobs/<sha256>``, ``snapshots/<rev>/{model.safetensors,config.json}``
    (links to the blobs) and ``refs/main``; returns the snapshot's weights file.

    For tests, benchmarks and air-gapped sites: timm (``HF_HUB_OFFLINE=1``), smp and
    :func:`hf_file` then read it without the network. ``config`` is written as ``config.json``
    as given; by default it is built from a timm model's ``pretrained_cfg`` (updated with
    ``pretrained_cfg``). ``revision`` is the commit the snapshot stands for (smp asks for a fixed
    one); by default a hash of the content. ``cache_dir`` defaults to :func:`hf_cache_dir`."""
    from safetensors.torch import save_file

    repo = hf_repo_folder(repo_id, cache_dir)
    repo.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repo) as tmp:
        data = Path(tmp) / filename
        state = _state_of(model)
        if filename.endswith(".safetensors"):
            save_file(state, str(data), metadata={"format": "pt"})
        else:
            torch.save(state, data)
        cfg = dict(config) if config is not None else _hub_config(model, pretrained_cfg)
        cfg_file = Path(tmp) / "config.json"
        cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True))
        data_blob, cfg_blob = _write_blob(repo, data), _write_blob(repo, cfg_file)
    revision = revision or hashlib.sha1(
        (data_blob.name + cfg_blob.name).encode()).hexdigest()
    snapshot = repo / "snapshots" / revision
    _link_blob(data_blob, snapshot / filename)
    _link_blob(cfg_blob, snapshot / "config.json")
    (repo / "refs").mkdir(exist_ok=True)
    write_text_atomic(repo / "refs" / "main", revision)  # last: the snapshot is complete
    return snapshot / filename


# -- the torch hub cache (torchvision, timm's older URL weights) ---------------------------------
def torch_hub_dir() -> Path:
    """``$TORCH_HOME/hub/checkpoints`` (torch hub's cache of downloaded weights), read now."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def torch_hub_name(url: str) -> str:
    """The file name torch hub caches ``url`` under."""
    return os.path.basename(urlparse(url).path)


def torch_hub_file(url: str, *, what: str, fetch: str, local: str = LOCAL,
                   check_hash: bool = True) -> Path:
    """The cached copy of ``url`` in :func:`torch_hub_dir` (no network), or downloaded there by
    torch hub when its host answers; else the one-line ConfigError."""
    folder = torch_hub_dir()
    path = folder / torch_hub_name(url)
    if path.is_file():
        return path
    reason = unreachable_reason(url)
    if reason is None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            torch.hub.download_url_to_file(url, str(path), hash_prefix=_hash_prefix(url)
                                           if check_hash else None, progress=False)
            return path
        except Exception as e:  # noqa: BLE001 - any network failure is one line
            reason = f"download failed: {first_line(e)}"
    raise missing_weights_error(what, path.name, folder, reason, fetch, local)


def _hash_prefix(url: str) -> str | None:
    """torch hub's hash prefix in a file name such as ``resnet18-f37072fd.pth`` (its own rule)."""
    found = torch.hub.HASH_REGEX.search(torch_hub_name(url))
    return found.group(1) if found and found.group(1) else None


def seed_torch_hub(model: nn.Module | Mapping[str, torch.Tensor], url: str) -> Path:
    """Write ``model``'s state dict where torch hub caches ``url``
    (``$TORCH_HOME/hub/checkpoints/<file name of the url>``); returns the file."""
    folder = torch_hub_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / torch_hub_name(url)
    state = model.state_dict() if isinstance(model, nn.Module) else model
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.")
    os.close(fd)
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


# -- timm pretrained configs (plain dicts: timm itself is imported by the callers) ---------------
def timm_cfg_file(cfg: Mapping[str, Any], *, local: str = LOCAL) -> tuple[Path, Provenance]:
    """The weights file of a timm pretrained config (``get_pretrained_cfg(name).to_dict()``):
    from the Hugging Face hub (its cache) when the config names a hub id, as timm prefers,
    else from its URL through torch hub's cache."""
    name = f"{cfg.get('architecture')}.{cfg.get('tag')}" if cfg.get("tag") else \
        str(cfg.get("architecture"))
    hub_id = cfg.get("hf_hub_id")
    if hub_id:
        repo_id, _, revision = str(hub_id).partition("@")
        names = (cfg["hf_hub_filename"],) if cfg.get("hf_hub_filename") else HF_WEIGHTS
        path = hf_file(repo_id, names, revision or None, what=str(hub_id), local=local)
        return path, file_provenance(path, "timm", hub_id, cfg.get("tag"),
                                     hf_url(repo_id, path.name, revision or None))
    url = cfg.get("url")
    if not url:
        raise ConfigError(f"timm has no pretrained weights for {name}: train from scratch "
                          f"(pretrained=False) or pass {local}")
    fetch = f"python -c \"import timm; timm.create_model('{name}', pretrained=True)\""
    path = torch_hub_file(url, what=f"timm {name}", fetch=fetch, local=local, check_hash=False)
    return path, file_provenance(path, "timm", name, cfg.get("tag"), url)


__all__ = ["HF_WEIGHTS", "hf_cache_dir", "hf_cached", "hf_fetch_command", "hf_file",
           "hf_offline_reason", "hf_repo_folder", "hf_url", "seed_hf_cache", "seed_torch_hub",
           "timm_cfg_file", "torch_hub_dir", "torch_hub_file", "torch_hub_name"]
