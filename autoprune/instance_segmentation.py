"""``autoprune.instance_segmentation``: the instance_segmentation task's public API, defined in
:mod:`autoprune.tasks.instance_segmentation` (``api.py``, typed in ``api.pyi``). This module *is*
that package once imported, so ``import autoprune.instance_segmentation``,
``from autoprune import instance_segmentation`` and ``autoprune.instance_segmentation`` are one
object; the names below are for readers, editors and type checkers."""
import sys

from .tasks import instance_segmentation as _task
from .tasks.instance_segmentation import *  # noqa: F401,F403

sys.modules[__name__] = _task
