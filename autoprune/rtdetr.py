"""``autoprune.rtdetr``: the rtdetr task's public API, defined in :mod:`autoprune.tasks.rtdetr`
(``api.py``, typed in ``api.pyi``). This module *is* that package once imported, so
``import autoprune.rtdetr``, ``from autoprune import rtdetr`` and ``autoprune.rtdetr`` are one
object; the names below are for readers, editors and type checkers."""
import sys

from .tasks import rtdetr as _task
from .tasks.rtdetr import *  # noqa: F401,F403

sys.modules[__name__] = _task
