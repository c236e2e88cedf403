"""``autoprune.detection``: the detection task's public API, defined in
:mod:`autoprune.tasks.detection` (``api.py``, typed in ``api.pyi``). This module *is* that package
once imported, so ``import autoprune.detection``, ``from autoprune import detection`` and
``autoprune.detection`` are one object; the names below are for readers, editors and
type checkers."""
import sys

from .tasks import detection as _task
from .tasks.detection import *  # noqa: F401,F403

sys.modules[__name__] = _task
