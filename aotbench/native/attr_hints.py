"""What an attribute's :class:`~aotbench.errors.AttrError` tells a user to do when a kernel reads it as another
type: the value to pass instead, and whether the ``value_type`` its registration declares
(``.attr("alpha", "required", "float")``) agrees with what the kernel reads.

aotbench never converts an attribute, as MindSpore does not (ABI.md section 4: an aot op's ``value_type`` is not
enforced, and ``Attr<float>`` fails on an int). The kernel's ``Attr<T>`` read is the check; the declaration only
makes the advice precise. ``"all"``, no type, or a name aotbench does not know declares nothing.
"""

from __future__ import annotations

from .attrs import AttrKind, TypedAttr

_INT64 = (-(2**63), 2**63 - 1)

#: MindSpore's value_type names (any case; "int64" and "float32" read as "int" and "float"), and the kinds a
#: value of that type has.
DECLARED_KINDS: dict[str, tuple[AttrKind, ...]] = {
    "bool": (AttrKind.BOOL,), "int": (AttrKind.INT,), "int64": (AttrKind.INT,), "float": (AttrKind.FLOAT,),
    "float32": (AttrKind.FLOAT,), "str": (AttrKind.STR,),
    "listint": (AttrKind.INT_VEC, AttrKind.EMPTY_LIST), "listfloat": (AttrKind.FLOAT_VEC, AttrKind.EMPTY_LIST),
    "listlistint": (AttrKind.INT_2D, AttrKind.EMPTY_LIST, AttrKind.EMPTY_ROWS),
    "listlistfloat": (AttrKind.FLOAT_2D, AttrKind.EMPTY_LIST, AttrKind.EMPTY_ROWS),
}
#: The value_type to declare for what a kernel reads.
_DECLARE = {AttrKind.BOOL: "bool", AttrKind.INT: "int", AttrKind.FLOAT: "float", AttrKind.STR: "str",
            AttrKind.INT_VEC: "listInt", AttrKind.FLOAT_VEC: "listFloat", AttrKind.INT_2D: "listListInt",
            AttrKind.FLOAT_2D: "listListFloat"}
_PYTHON = {
    AttrKind.BOOL: "True or False", AttrKind.INT: "a Python int", AttrKind.FLOAT: "a Python float",
    AttrKind.STR: "a str", AttrKind.INT_VEC: "a list of ints", AttrKind.FLOAT_VEC: "a list of floats",
    AttrKind.INT_2D: "a list of lists of ints", AttrKind.FLOAT_2D: "a list of lists of floats",
}


def declared_kinds(value_type: object) -> tuple[AttrKind, ...] | None:
    """The kinds ``value_type`` allows; None when it declares nothing aotbench knows (``"all"``, None ...)."""
    return DECLARED_KINDS.get(value_type.lower()) if isinstance(value_type, str) else None


def value_instead(attr: TypedAttr, wanted: AttrKind) -> str:
    """The value to give instead of ``attr``'s for a kernel reading ``Attr<wanted>``: the same number or numbers
    where they can be that type, else the Python type to give."""
    value = attr.value
    if wanted is AttrKind.FLOAT and attr.kind is AttrKind.INT:
        return f"{float(value)!r} (a float)"  # type: ignore[arg-type]
    if wanted is AttrKind.INT and attr.kind is AttrKind.FLOAT and _fits_int64(value):
        return f"{int(value)!r} (an int)"  # type: ignore[call-overload]
    if wanted is AttrKind.FLOAT_VEC and attr.kind is AttrKind.INT_VEC:
        return f"{[float(v) for v in value]!r} (floats)"  # type: ignore[union-attr]
    if wanted is AttrKind.INT_VEC and attr.kind is AttrKind.FLOAT_VEC and all(map(_fits_int64, value)):  # type: ignore
        return f"{[int(v) for v in value]!r} (ints)"  # type: ignore[union-attr]
    if wanted is AttrKind.FLOAT_2D and attr.kind is AttrKind.INT_2D:
        return f"{[[float(v) for v in row] for row in value]!r} (floats)"  # type: ignore[union-attr]
    return _PYTHON.get(wanted, f"a value of the kind Attr<{wanted.cpp}> reads")


def as_given(value: object) -> object:
    """An attribute's value as a user gives it: lists where aotbench holds tuples (to keep it hashable)."""
    return [as_given(v) for v in value] if isinstance(value, tuple) else value


def _fits_int64(value: object) -> bool:
    return isinstance(value, float) and value.is_integer() and _INT64[0] <= value < 2.0**63


def advice(attr: TypedAttr, requested: AttrKind) -> str:
    """What to do when a kernel read ``attr`` as ``Attr<requested>`` and its value is of another kind."""
    where = "with the call" if attr.call else "in the registration (value=...)"
    readable = " or ".join(f"Attr<{k.cpp}>" for k in attr.kind.readable_as)
    fix = f"Pass {value_instead(attr, requested)} {where}"
    kinds = declared_kinds(attr.declared)
    if kinds is None:
        return f"{fix}, or read it as {readable}."
    if requested in kinds:
        return f"{fix}, as its registration declares ({attr.declared!r})."
    declare = _DECLARE.get(requested, requested.cpp)
    return (f"{fix} and declare it {declare!r} in the registration, which says {attr.declared!r} (a type the "
            f"kernel does not read); or read it as {readable}.")


__all__ = ["DECLARED_KINDS", "advice", "as_given", "declared_kinds", "value_instead"]
