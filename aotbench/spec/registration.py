"""``CustomRegOp`` and ``DataType``: MindSpore's registration builder, same chain of methods.

``CustomRegOp(name).input(...).output(...).dtype_format(...).attr(...).target(...).get_op_info()`` returns an
:class:`OpInfo` that ``aotbench.Custom(..., reg_info=...)`` reads: the number and names of inputs and outputs,
the attributes (an ``.attr`` without ``value=`` becomes a positional call argument after the arrays), and the
accepted dtype combinations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from ..native.attrs import TypedAttr, check_name, typed
from ..native.dtypes import DTYPE_STRINGS
from ..errors import ArgumentTypeError, ArgumentValueError

_SHORT = {
    "F16": "float16", "F32": "float32", "F64": "float64", "BF16": "bfloat16", "I8": "int8", "I16": "int16",
    "I32": "int32", "I64": "int64", "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "BOOL": "bool", "C64": "complex64", "C128": "complex128",
}


class DataType:
    """``(dtype, format)`` pairs for ``dtype_format``; ``None_None`` accepts any dtype.

    Members are named like MindSpore's: ``F32_Default``, ``I64_Default``, ``BOOL_Default``, ... (and the
    ``_None`` forms). Only the dtype part matters on the CPU; the format is recorded as given.
    """

    None_None = ("", "")
    None_Default = ("", "DefaultFormat")


for _short, _dtype in _SHORT.items():
    setattr(DataType, f"{_short}_Default", (_dtype, "DefaultFormat"))
    setattr(DataType, f"{_short}_None", (_dtype, ""))
del _short, _dtype


@dataclass(frozen=True)
class OpInfo:
    """What ``get_op_info()`` returns: a frozen description of the op's interface."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[TypedAttr, ...]  # registered with value=
    call_attrs: tuple[str, ...]  # registered without value=: positional call arguments, in order
    dtype_formats: tuple[tuple[str, ...], ...]  # one row per combination: inputs then outputs ("" = any)
    target: str | None = None
    has_dtype_format: bool = False  # any .dtype_format(...) given, even only None_None (MindSpore requires one)
    value_types: tuple[tuple[str, str], ...] = ()  # (name, value_type) as .attr declared them ("all" included)

    @cached_property
    def declared(self) -> Mapping[str, str]:
        """The declared value_type of each attribute that has one, by name (read-only; read at every call)."""
        return MappingProxyType(dict(self.value_types))

    def __getstate__(self) -> dict:
        """What pickling carries: the fields, not the read-only view above (made again where it is read)."""
        return {k: v for k, v in self.__dict__.items() if k != "declared"}

    def output_dtypes(self, input_dtypes: tuple[str, ...]) -> tuple[str, ...] | None:
        """The output dtypes the registration gives for these input dtypes (None: it does not say).

        Raises :class:`ArgumentError` when the registration lists dtype combinations and none matches.
        """
        if not self.dtype_formats:
            return None
        n_in = len(self.inputs)
        for row in self.dtype_formats:
            if all(want in ("", have) for want, have in zip(row[:n_in], input_dtypes)):
                outs = row[n_in:]
                return None if any(o == "" for o in outs) else tuple(outs)
        accepted = "; ".join("(" + ", ".join(r[:n_in]) + ")" for r in self.dtype_formats)
        raise ArgumentTypeError(
            f"op {self.name!r} is registered for input dtypes {accepted}, not ({', '.join(input_dtypes)})")


@dataclass
class CustomRegOp:
    """Builder for :class:`OpInfo`, with MindSpore's method names and argument order."""

    op_name: str = "Custom"
    _inputs: list[str] = field(default_factory=list)
    _outputs: list[str] = field(default_factory=list)
    _attrs: list[TypedAttr] = field(default_factory=list)
    _call_attrs: list[str] = field(default_factory=list)
    _value_types: list[tuple[str, str]] = field(default_factory=list)
    _dtype_formats: list[tuple[str, ...]] = field(default_factory=list)
    _target: str | None = None

    def input(self, index=None, name=None, param_type="required", **kwargs) -> CustomRegOp:
        self._inputs.append(str(name if name is not None else f"x{len(self._inputs)}"))
        return self

    def output(self, index=None, name=None, param_type="required", **kwargs) -> CustomRegOp:
        self._outputs.append(str(name if name is not None else f"y{len(self._outputs)}"))
        return self

    def dtype_format(self, *args) -> CustomRegOp:
        row = []
        for pair in args:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ArgumentTypeError(
                    f"dtype_format takes DataType members such as DataType.F32_Default, not {pair!r}")
            if pair[0] not in ("", *DTYPE_STRINGS):
                raise ArgumentValueError(f"dtype_format: unknown dtype {pair[0]!r}")
            row.append(pair[0])
        self._dtype_formats.append(tuple(row))
        return self

    def attr(self, name=None, param_type=None, value_type=None, default_value=None, **kwargs) -> CustomRegOp:
        check_name(name)
        declared = value_type if isinstance(value_type, str) else None
        if declared is not None:
            self._value_types.append((name, declared))
        if "value" in kwargs:
            self._attrs.append(typed(name, kwargs["value"], declared=declared))
        else:
            self._call_attrs.append(name)
        return self

    def target(self, target=None) -> CustomRegOp:
        self._target = target
        return self

    def get_op_info(self) -> OpInfo:
        width = len(self._inputs) + len(self._outputs)
        for row in self._dtype_formats:
            if len(row) != width:
                raise ArgumentTypeError(
                    f"dtype_format has {len(row)} entries but the op declares {len(self._inputs)} inputs and "
                    f"{len(self._outputs)} outputs ({width} entries needed)")
        names = [a.name for a in self._attrs] + self._call_attrs
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ArgumentValueError(f"attribute {min(dup)!r} is registered twice")
        formats = tuple(self._dtype_formats)
        if all(all(d == "" for d in row) for row in formats):
            formats = ()  # only None_None: any dtype
        return OpInfo(self.op_name, tuple(self._inputs), tuple(self._outputs), tuple(self._attrs),
                      tuple(self._call_attrs), formats, self._target, bool(self._dtype_formats),
                      tuple(self._value_types))
