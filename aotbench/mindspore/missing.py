"""What the stand-in does not have: errors that name the missing MindSpore API and say what is there instead."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import MindSporeApiError

SCOPE = "aotbench runs MindSpore's aot Custom ops only"
INSTEAD = ("what is there: Tensor, nn.Cell, ops.Custom(..., 'aot'), ops.CustomRegOp, ops.DataType, the dtypes, "
           "context.set_context / set_device; run the rest in MindSpore itself")


def missing(api: str) -> MindSporeApiError:
    """The error for a MindSpore API (``mindspore.ops.Add``) the stand-in does not provide."""
    return MindSporeApiError(f"{SCOPE}; {api} is not available ({INSTEAD})")


def missing_attribute(api: str) -> AttributeError:
    """The same sentence as an ``AttributeError``, for attributes of objects (``hasattr`` keeps working)."""
    return AttributeError(f"{SCOPE}; {api} is not available ({INSTEAD})")


def module_getattr(public_name: str) -> Callable[[str], object]:
    """A module-level ``__getattr__`` for the stand-in module MindSpore calls ``public_name``: a public name
    raises :func:`missing`; dunder and private names raise a plain ``AttributeError``, as tools that probe
    modules (``hasattr(m, '__version__')``, pytest, inspect) expect."""

    def __getattr__(name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(f"module {public_name!r} has no attribute {name!r}")
        raise missing(f"{public_name}.{name}")

    return __getattr__
