"""Attribute values typed the way the host stores them (ABI.md section 4), with no implicit conversion.

Python ``bool`` -> ``bool``, ``int`` -> ``int64_t``, ``float`` -> ``float``, ``str`` -> ``std::string``,
a list/tuple of ints -> ``std::vector<int64_t>``, of floats -> ``std::vector<float>``, a list of such lists
(ragged allowed) -> the 2-D forms. An empty list reads as any list kind, a list of empty lists as either 2-D
kind. numpy scalars and arrays are accepted by their Python equivalents, and so are other libraries' arrays and
scalars that speak DLPack (a 0-d JAX array or torch tensor is its number). Strings and names must be encodable
as UTF-8 (no lone surrogates).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from ..errors import AttrError
from . import dlpack

_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class AttrKind(IntEnum):
    """The attribute kinds of the native host (same numbers as in native/src/runtime.cc)."""

    MISSING = 0
    BOOL = 1
    INT = 2
    FLOAT = 3
    STR = 4
    INT_VEC = 5
    FLOAT_VEC = 6
    INT_2D = 7
    FLOAT_2D = 8
    EMPTY_LIST = 9
    EMPTY_ROWS = 10

    @property
    def cpp(self) -> str:
        """How a kernel reads it: the ``T`` of ``Attr<T>``."""
        return _CPP[self]

    @property
    def readable_as(self) -> tuple[AttrKind, ...]:
        """The kinds a kernel may read a value of this kind as (an empty list carries no element type)."""
        if self is AttrKind.EMPTY_LIST:
            return AttrKind.INT_VEC, AttrKind.FLOAT_VEC, AttrKind.INT_2D, AttrKind.FLOAT_2D
        if self is AttrKind.EMPTY_ROWS:
            return AttrKind.INT_2D, AttrKind.FLOAT_2D
        return (self,)


_CPP = {
    AttrKind.MISSING: "(missing)", AttrKind.BOOL: "bool", AttrKind.INT: "int64_t", AttrKind.FLOAT: "float",
    AttrKind.STR: "std::string", AttrKind.INT_VEC: "std::vector<int64_t>",
    AttrKind.FLOAT_VEC: "std::vector<float>", AttrKind.INT_2D: "std::vector<std::vector<int64_t>>",
    AttrKind.FLOAT_2D: "std::vector<std::vector<float>>", AttrKind.EMPTY_LIST: "an empty list",
    AttrKind.EMPTY_ROWS: "a list of empty lists",
}


@dataclass(frozen=True)
class TypedAttr:
    """One attribute: its name, kind and value (lists normalised to tuples, so it is hashable)."""

    name: str
    kind: AttrKind
    value: object
    #: Given with each call (a call attribute), not registered with the op: said so in errors.
    call: bool = field(default=False, compare=False, repr=False)
    #: The value_type its registration declares (``.attr(name, "required", "float")``), for errors' advice.
    declared: str | None = field(default=None, compare=False, repr=False)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise AttrError(f"attribute name {name!r} is not valid: use letters, digits and underscores "
                        "(a C identifier)", name=str(name))
    return name


def typed(name: str, value: object, call: bool = False, declared: str | None = None) -> TypedAttr:
    """Type one attribute value (``call``: given with a call; ``declared``: the registration's value_type); an
    :class:`AttrError` says why a value cannot be an attribute."""
    kind, typed_value = _kind_and_value(name, value)
    return TypedAttr(name, kind, typed_value, call, declared)


def _kind_and_value(name: str, value: object) -> tuple[AttrKind, object]:
    check_name(name)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    elif hasattr(value, "__dlpack__") and not isinstance(value, (bool, int, float, str, list, tuple)):
        value = _foreign(name, value)
    if isinstance(value, bool):
        return AttrKind.BOOL, value
    if isinstance(value, int):
        return AttrKind.INT, _int(name, value)
    if isinstance(value, float):
        return AttrKind.FLOAT, _float(name, value)
    if isinstance(value, str):
        if "\0" in value:
            raise AttrError(f"attribute {name!r}: strings cannot contain NUL characters", name=name)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate ("a\ud800"): std::string holds UTF-8 only
            raise AttrError(f"attribute {name!r}: the string {value!r} cannot be encoded as UTF-8 (character "
                            f"{value[exc.start]!r} at index {exc.start} is a lone surrogate); pass text made "
                            "of whole characters", name=name) from None
        return AttrKind.STR, value
    if isinstance(value, (list, tuple)):
        return _sequence(name, value)
    raise AttrError(
        f"attribute {name!r} has a value of type {type(value).__name__}; an attribute must be a bool, int, float, "
        "str, a list of ints or floats, or a list of such lists", name=name)


def _foreign(name: str, value: object) -> object:
    """Another library's array or scalar (a 0-d JAX array, a torch tensor ...) as Python values: read through
    DLPack from host memory, or with the library's own ``tolist()`` from a device's."""
    try:
        device = value.__dlpack_device__()  # type: ignore[attr-defined]
        if int(device[0]) in dlpack.HOST_ACCESSIBLE:
            return dlpack.to_numpy(value).tolist()
        return value.tolist()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - whatever the library raised
        if "Tracer" in type(value).__name__:  # JAX's stand-in for a value inside jax.jit, vmap or grad
            raise AttrError(f"attribute {name!r} is a {type(value).__name__}: inside jax.jit, vmap or grad it has no "
                            "value yet, and an attribute needs one when the op is called. Pass a Python number "
                            "(mark the argument static: jax.jit(f, static_argnums=...), or close over it)",
                            name=name) from exc
        raise AttrError(f"attribute {name!r}: its value, a {type(value).__name__}, could not be read ({exc}); pass a "
                        "Python number, str or list", name=name) from exc


def _int(name: str, v: int) -> int:
    if not _INT64[0] <= v <= _INT64[1]:
        raise AttrError(f"attribute {name!r}: {v} does not fit in int64_t", name=name)
    return v


def _float(name: str, v: float) -> float:
    if math.isfinite(v) and abs(v) > _FLOAT32_MAX:
        raise AttrError(f"attribute {name!r}: {v} overflows float (attributes are read as 32-bit float)",
                        name=name)
    return v


def _scalar_kind(name: str, items: list | tuple) -> AttrKind:
    kinds = set()
    for x in items:
        if isinstance(x, np.generic):
            x = x.item()
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise AttrError(
                f"attribute {name!r}: list elements must be ints or floats (got {type(x).__name__} {x!r})",
                name=name)
        kinds.add(AttrKind.INT if isinstance(x, int) else AttrKind.FLOAT)
    if len(kinds) > 1:
        raise AttrError(
            f"attribute {name!r} mixes ints and floats; write every element as a float (2.0, not 2) to get "
            "std::vector<float>, or every one as an int", name=name)
    return kinds.pop() if kinds else AttrKind.EMPTY_LIST


def _sequence(name: str, value: list | tuple) -> tuple[AttrKind, object]:
    if not value:
        return AttrKind.EMPTY_LIST, ()
    nested = [isinstance(x, (list, tuple, np.ndarray)) for x in value]
    if all(nested):
        rows = [list(np.asarray(r).tolist()) if isinstance(r, np.ndarray) else list(r) for r in value]
        kinds = {_scalar_kind(name, r) for r in rows} - {AttrKind.EMPTY_LIST}
        if len(kinds) > 1:
            raise AttrError(f"attribute {name!r} mixes int rows and float rows; use one element type", name=name)
        if not kinds:  # [[]], [[], []]: no element says int or float, so either 2-D getter may read it
            return AttrKind.EMPTY_ROWS, tuple(() for _ in rows)
        if kinds == {AttrKind.FLOAT}:
            return AttrKind.FLOAT_2D, tuple(tuple(_float(name, float(x)) for x in r) for r in rows)
        return AttrKind.INT_2D, tuple(tuple(_int(name, int(x)) for x in r) for r in rows)
    if any(nested):
        raise AttrError(f"attribute {name!r} mixes lists and scalars; use a flat list or a list of lists",
                        name=name)
    kind = _scalar_kind(name, value)
    if kind is AttrKind.INT:
        return AttrKind.INT_VEC, tuple(_int(name, int(x)) for x in value)
    return AttrKind.FLOAT_VEC, tuple(_float(name, float(x)) for x in value)


def describe(attr: TypedAttr) -> str:
    """``name=value (Attr<T>)``, for reprs and messages."""
    return f"{attr.name}={attr.value!r} ({attr.kind.cpp})"
