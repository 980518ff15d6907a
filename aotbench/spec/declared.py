"""A call attribute's value checked against the type its registration declares (``.attr(name, "required",
"float")``), before the kernel runs.

aotbench types an attribute by its value and does not convert it, as MindSpore does not (ABI.md section 4: an aot
op's ``value_type`` is not enforced there, and ``Attr<float>`` fails on an int). So a value that contradicts the
declared type would fail, or be read as another type, in the framework: it is refused here with the value to pass
instead. ``"all"``, no type, or a name aotbench does not know declares nothing.
"""

from __future__ import annotations

from ..errors import AttrError
from ..native.attrs import AttrKind, TypedAttr

_EMPTY_1D = (AttrKind.EMPTY_LIST,)
_EMPTY_2D = (AttrKind.EMPTY_LIST, AttrKind.EMPTY_ROWS)

#: MindSpore's value_type names (lower-cased), and the kinds a value of that type may have.
DECLARED_KINDS: dict[str, tuple[AttrKind, ...]] = {
    "bool": (AttrKind.BOOL,), "int": (AttrKind.INT,), "int64": (AttrKind.INT,), "float": (AttrKind.FLOAT,),
    "float32": (AttrKind.FLOAT,), "str": (AttrKind.STR,), "listint": (AttrKind.INT_VEC, *_EMPTY_1D),
    "listfloat": (AttrKind.FLOAT_VEC, *_EMPTY_1D), "listlistint": (AttrKind.INT_2D, *_EMPTY_2D),
    "listlistfloat": (AttrKind.FLOAT_2D, *_EMPTY_2D),
}


def declared_kinds(value_type: object) -> tuple[AttrKind, ...] | None:
    """The kinds ``value_type`` allows; None when it declares nothing aotbench checks (``"all"``, None ...)."""
    return DECLARED_KINDS.get(value_type.lower()) if isinstance(value_type, str) else None


def check_declared(op: str, attr: TypedAttr, value_type: object) -> None:
    """Refuse ``attr`` (a call attribute of ``op``) when its value contradicts the declared ``value_type``."""
    kinds = declared_kinds(value_type)
    if kinds is None or attr.kind in kinds:
        return
    wanted = kinds[0]
    raise AttrError(
        f"{op}: call attribute {attr.name!r} is declared {value_type!r} (.attr({attr.name!r}, ..., "
        f"{value_type!r}) in its registration), but the call gave {attr.value!r}, which a kernel reads as "
        f"Attr<{attr.kind.cpp}>. Pass {_instead(attr, wanted)}. aotbench does not convert it, as MindSpore does "
        f"not: there the value keeps its own type, and the kernel's Attr<{wanted.cpp}> would fail on it",
        name=attr.name, requested=wanted.cpp, registered=attr.kind.cpp)


def _instead(attr: TypedAttr, wanted: AttrKind) -> str:
    """The value to pass instead, where one follows from the given one; else the Python type to give."""
    value = attr.value
    if wanted is AttrKind.FLOAT and attr.kind is AttrKind.INT:
        return f"{float(value)!r} (a float)"  # type: ignore[arg-type]
    if wanted is AttrKind.INT and attr.kind is AttrKind.FLOAT and float(value).is_integer():  # type: ignore[arg-type]
        return f"{int(value)!r} (an int)"  # type: ignore[call-overload]
    if wanted is AttrKind.FLOAT_VEC and attr.kind is AttrKind.INT_VEC:
        return f"{[float(v) for v in value]!r} (floats)"  # type: ignore[union-attr]
    if wanted is AttrKind.FLOAT_2D and attr.kind is AttrKind.INT_2D:
        return f"{[[float(v) for v in row] for row in value]!r} (floats)"  # type: ignore[union-attr]
    return f"a value the kernel reads as Attr<{wanted.cpp}> ({_PYTHON[wanted]})"


_PYTHON = {
    AttrKind.BOOL: "True or False", AttrKind.INT: "a Python int", AttrKind.FLOAT: "a Python float",
    AttrKind.STR: "a str", AttrKind.INT_VEC: "a list of ints", AttrKind.FLOAT_VEC: "a list of floats",
    AttrKind.INT_2D: "a list of lists of ints", AttrKind.FLOAT_2D: "a list of lists of floats",
}

__all__ = ["DECLARED_KINDS", "check_declared", "declared_kinds"]
