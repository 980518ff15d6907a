"""Make ``import mindspore`` resolve to the stand-in, for one run (``python -m aotbench run``) only.

:func:`activate` puts the stand-in's modules into ``sys.modules`` under MindSpore's names and a finder at the
front of ``sys.meta_path`` that answers any other ``mindspore.*`` import with :class:`~aotbench.MindSporeApiError`
naming it (never a real MindSpore's module half-mixed with the stand-in). Leaving the ``with`` block restores
both, so nothing outlives the run.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator

from . import common, context, nn, ops
from .common import dtype, tensor
from .missing import missing

STAND_INS = {"mindspore": sys.modules[__package__], "mindspore.common": common, "mindspore.common.dtype": dtype,
             "mindspore.common.tensor": tensor, "mindspore.context": context, "mindspore.nn": nn,
             "mindspore.ops": ops}


class _MissingSubmodules(importlib.abc.MetaPathFinder):
    """Refuses every ``mindspore.*`` module the stand-in does not have, naming it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] == "mindspore" and fullname not in STAND_INS:
            raise missing(fullname)


@contextlib.contextmanager
def activate() -> Iterator[None]:
    """Within the block, ``import mindspore`` (and its submodules above) give the stand-in."""
    saved = {name: sys.modules[name] for name in list(sys.modules) if name.split(".")[0] == "mindspore"}
    finder = _MissingSubmodules()
    for name in saved:
        del sys.modules[name]
    sys.modules.update(STAND_INS)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] == "mindspore"]:
            del sys.modules[name]
        sys.modules.update(saved)
