"""``autoprune.classification``: the classification task's public API, defined in
:mod:`autoprune.tasks.classification` (``api.py``, typed in ``api.pyi``). This module *is* that
package once imported, so ``import autoprune.classification``,
``from autoprune import classification`` and ``autoprune.classification`` are one object; the names
below are for readers, editors and type checkers."""
import sys

from .tasks import classification as _task
from .tasks.classification import *  # noqa: F401,F403

sys.modules[__name__] = _task
