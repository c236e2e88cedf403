"""Reading ``autoprune train`` config files (YAML, with YAML 1.2's numbers)."""
from __future__ import annotations

import os
import re
from typing import Any

import yaml

from ..errors import ConfigError

# YAML 1.1 (PyYAML) reads 1e-3 as a string; a config means the number, as YAML 1.2 does
_FLOAT = r"""^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?|\.(?:inf|Inf|INF))$|^\.(?:nan|NaN|NAN)$"""


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """The settings of a YAML config file (``autoprune train config.yaml``) as a dict; a missing
    file, invalid YAML or a file that is not a mapping is a one-line ConfigError."""
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_FLOAT, re.X),
                                 list("-+0123456789."))
    try:
        with open(path) as f:
            cfg = yaml.load(f, Loader=Loader)  # noqa: S506 - a SafeLoader
    except FileNotFoundError:
        raise ConfigError(f"no config file at {path}: check the path") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path} must hold a mapping of settings (task: ..., model: ..., ...)")
    return cfg
