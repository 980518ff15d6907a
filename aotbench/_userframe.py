"""Which stack level a warning raised inside aotbench should name: the user's line, not aotbench's (nor IPython's,
when a ``%%aot_kernel`` cell runs aotbench through IPython's magic machinery)."""

from __future__ import annotations

import sys

_SKIPPED = (__name__.rpartition(".")[0] + ".", "IPython.")


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made inside aotbench that points the warning at the first
    frame outside the package and outside IPython: the user's line, or the cell whose magic ran aotbench."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_globals.get("__name__", "") + ".").startswith(_SKIPPED):
        frame, level = frame.f_back, level + 1
    return level
