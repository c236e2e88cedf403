"""``autoprune.obb``: the obb task's public API, defined in :mod:`autoprune.tasks.obb`
(``api.py``, typed in ``api.pyi``). This module *is* that package once imported, so
``import autoprune.obb``, ``from autoprune import obb`` and ``autoprune.obb`` are one object;
the names below are for readers, editors and type checkers."""
import sys

from .tasks import obb as _task
from .tasks.obb import *  # noqa: F401,F403

sys.modules[__name__] = _task
