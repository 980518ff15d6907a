"""What the stand-in does not have: errors that name the missing MindSpore API and say what is there instead."""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable

from ..errors import MindSporeApiError, MindSporeAttributeError

SCOPE = "aotbench runs MindSpore's aot Custom ops only"
INSTEAD = ("what is there: Tensor, nn.Cell, ops.Custom(..., 'aot'), ops.CustomRegOp, ops.DataType, the dtypes, "
           "context.set_context / set_device; run the rest in MindSpore itself")
_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def sentence(api: str) -> str:
    return f"{SCOPE}; {api} is not available ({INSTEAD})"


def missing(api: str) -> MindSporeApiError:
    """The error for a MindSpore module or feature (``mindspore.dataset``) the stand-in does not provide."""
    return MindSporeApiError(sentence(api))


def missing_attribute(api: str) -> AttributeError:
    """The same sentence as a plain ``AttributeError``, for attributes of stand-in objects (``Tensor.sum``)."""
    return AttributeError(sentence(api))


def missing_operation(api: str) -> TypeError:
    """The same sentence as a ``TypeError``, for an operator the stand-in's Tensor does not have (``t + 1``)."""
    return TypeError(sentence(api))


def _in_from_import(frame) -> bool:
    """Whether ``frame`` is executing ``from module import name`` (CPython's IMPORT_FROM), where an
    AttributeError would be replaced by a generic "cannot import name" ImportError without our sentence."""
    try:
        return frame.f_lasti >= 0 and frame.f_code.co_code[frame.f_lasti] == _IMPORT_FROM
    except (AttributeError, IndexError):
        return False


def module_getattr(public_name: str) -> Callable[[str], object]:
    """A module-level ``__getattr__`` for the stand-in module MindSpore calls ``public_name``.

    A public name raises :class:`~aotbench.MindSporeAttributeError` (an ``AttributeError``: ``hasattr`` and
    ``getattr(m, name, default)`` keep working), or :class:`~aotbench.MindSporeApiError` (an ``ImportError``)
    inside ``from mindspore import name``, so that the sentence naming it reaches the user either way. Dunder and
    private names raise a plain ``AttributeError``, as tools that probe modules expect."""

    def __getattr__(name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(f"module {public_name!r} has no attribute {name!r}")
        api = f"{public_name}.{name}"
        if _in_from_import(sys._getframe(1)):
            raise missing(api)
        raise MindSporeAttributeError(sentence(api))

    return __getattr__
