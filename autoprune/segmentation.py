"""``autoprune.segmentation``: the segmentation task's public API, defined in
:mod:`autoprune.tasks.segmentation` (``api.py``, typed in ``api.pyi``). This module *is* that
package once imported, so ``import autoprune.segmentation``, ``from autoprune import segmentation``
and ``autoprune.segmentation`` are one object; the names below are for readers, editors and
type checkers."""
import sys

from .tasks import segmentation as _task
from .tasks.segmentation import *  # noqa: F401,F403

sys.modules[__name__] = _task
