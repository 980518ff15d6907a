"""Which stack level a warning raised inside aotbench should name: the user's line, not aotbench's."""

from __future__ import annotations

import sys

_PACKAGE = __name__.rpartition(".")[0] + "."


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made inside aotbench that points the warning at the first
    frame outside the package (the user's line)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_globals.get("__name__", "") + ".").startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
