"""Importing a PaddleSlim sensitivities pickle, opt-in only, with an unpickler restricted to plain
data (pickle files can run code when loaded)."""
from __future__ import annotations

import copy
import pickle
import warnings
from pathlib import Path
from typing import Mapping

from ..errors import SensitivityFileError
from .store import PathLike, Sensitivities, parse_points


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickler that builds only dicts, lists, numbers and strings (and numpy scalars)."""

    _ALLOWED = {("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
                ("numpy", "dtype"), ("collections", "OrderedDict"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise SensitivityFileError(f"refusing to unpickle {module}.{name}: a PaddleSlim "
                                   f"sensitivity file holds only numbers and names")


def import_paddleslim(path: PathLike, *, allow_pickle: bool = False,
                      name_map: Mapping[str, str] | None = None) -> Sensitivities:
    """Read a PaddleSlim sensitivities pickle (``{param: {ratio: loss}}``); opt-in only.

    Pickle files can run code when loaded; this reader is restricted to plain data, but it still
    requires ``allow_pickle=True``. ``name_map`` renames PaddleSlim parameter names to autoprune
    group names (unmapped names are kept). Save the result with ``save_sensitivities``.
    """
    path = Path(path)
    if not allow_pickle:
        raise SensitivityFileError(f"{path} would be read with pickle, which can run code: pass "
                                   f"allow_pickle=True (CLI: --allow-pickle) if you trust it")
    if not path.is_file():
        raise SensitivityFileError(f"no PaddleSlim sensitivity file at {path}: check the path")
    warnings.warn(f"reading pickle file {path} (restricted to plain data)", stacklevel=2)
    try:
        with open(path, "rb") as f:
            data = _PlainDataUnpickler(f).load()
    except SensitivityFileError:
        raise
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise SensitivityFileError(f"{path} is not a readable PaddleSlim pickle ({e})") from None
    if not isinstance(data, Mapping):
        raise SensitivityFileError(f"{path}: expected {{param: {{ratio: loss}}}}, "
                                   f"got {type(data).__name__}")
    name_map = dict(name_map or {})
    renamed = {name_map.get(str(k), str(k)): v for k, v in data.items()}
    return parse_points(path, copy.deepcopy(renamed))
