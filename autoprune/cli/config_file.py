"""Reading ``autoprune train`` config files: YAML with YAML 1.2's numbers, no duplicated key and no
alias that expands beyond :data:`MAX_NODES` values (a "billion laughs" file)."""
from __future__ import annotations

import os
import re
from typing import Any

import yaml

from ..errors import ConfigError

# YAML 1.1 (PyYAML) reads 1e-3 as a string; a config means the number, as YAML 1.2 does
_FLOAT = r"""^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?|\.(?:inf|Inf|INF))$|^\.(?:nan|NaN|NAN)$"""
MAX_NODES = 100_000  # values a config may hold once its aliases are expanded


class _Refused(Exception):
    """A config the loader refuses, with the one line that says why."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice (naming both lines) and aliases that
    expand a document beyond :data:`MAX_NODES` values."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expansion(node)
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _Refused(f"'{key}' is set twice (lines {seen[key]} and {line}): keep one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_FLOAT, re.X),
                              list("-+0123456789."))


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases make it hold more than MAX_NODES values once expanded
    (counted on the composed graph, each shared node once per use: no expansion happens)."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # post-order without recursion: a deep document does not overflow the stack
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if not children_done and id(node) in visiting:
            raise _Refused(f"an alias refers to itself (line {node.start_mark.line + 1}): write "
                           f"the settings out")
        visiting.add(id(node))
        children = [v for pair in node.value for v in pair] \
            if isinstance(node, yaml.MappingNode) else \
            list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if children_done or not children:
            sizes[id(node)] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[id(node)] > MAX_NODES:
                raise _Refused(f"its aliases expand to more than {MAX_NODES:,} values (line "
                               f"{node.start_mark.line + 1}): write the settings out")
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """The settings of a YAML config file (``autoprune train config.yaml``) as a dict; a missing
    file, invalid YAML, a key given twice, an alias bomb or a file that is not a mapping is a
    one-line ConfigError."""
    try:
        with open(path) as f:
            cfg = yaml.load(f, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except FileNotFoundError:
        raise ConfigError(f"no config file at {path}: check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a folder, not a config file: pass a .yaml file") from None
    except _Refused as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise ConfigError(f"{path} is nested too deeply to read: a config is a flat mapping of "
                          f"settings") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file: pass a YAML config") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path} must hold a mapping of settings (task: ..., model: ..., ...)")
    return cfg
