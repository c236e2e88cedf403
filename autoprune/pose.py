"""``autoprune.pose``: the pose task's public API, defined in :mod:`autoprune.tasks.pose`
(``api.py``, typed in ``api.pyi``). This module *is* that package once imported, so
``import autoprune.pose``, ``from autoprune import pose`` and ``autoprune.pose`` are one object;
the names below are for readers, editors and type checkers."""
import sys

from .tasks import pose as _task
from .tasks.pose import *  # noqa: F401,F403

sys.modules[__name__] = _task
