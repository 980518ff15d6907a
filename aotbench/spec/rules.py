"""Output rules: how many outputs an op has, and their shapes and dtypes for given inputs.

``out_shape`` is a shape, a tuple of shapes, or a function of the input shapes; ``out_dtype`` a dtype, a
tuple of dtypes, or a function of the input dtypes (MindSpore's meaning). ``out_shape=None`` means the
kernel's ``FInferShape`` decides (the op layer calls it).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from ..native.dtypes import dtype_string, resolve_dtype
from ..errors import ArgumentTypeError, ArgumentValueError, ShapeError
from .registration import OpInfo

Shape = tuple[int, ...]
INT64_MAX = 2**63 - 1


def is_shape_list(x: object) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(e, (list, tuple)) for e in x)


def count_outputs(out_shape: object, out_dtype: object, reg_info: OpInfo | None) -> int:
    """The number of outputs the arguments declare, checking that they agree."""
    counts: dict[str, int] = {}
    if reg_info is not None and reg_info.outputs:
        counts["reg_info outputs"] = len(reg_info.outputs)
    if isinstance(out_dtype, (list, tuple)):
        counts["out_dtype"] = len(out_dtype)
    if is_shape_list(out_shape):
        counts["out_shape"] = len(out_shape)  # type: ignore[arg-type]
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{k} gives {v}" for k, v in counts.items())
        raise ArgumentValueError(f"the number of outputs is ambiguous: {detail}")
    return next(iter(counts.values()), 1)


def declares_tuple(out_shape: object, out_dtype: object) -> bool:
    """True when ``out_shape`` is a tuple of shapes or ``out_dtype`` a tuple of dtypes, even of one: MindSpore
    then returns a tuple of outputs (so ``net(x, y)[0]`` is the first output, not its first row)."""
    return is_shape_list(out_shape) or isinstance(out_dtype, (list, tuple))


def normalize_shape(value: object, what: str) -> Shape:
    """A shape as a tuple of non-negative ints (an int means a 1-D shape)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (list, tuple)) or any(
            isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in value):
        raise ShapeError(f"{what} is {value!r}, which is not a shape (a tuple of ints)")
    dims = tuple(int(d) for d in value)
    if any(d < 0 for d in dims):
        raise ShapeError(f"{what} is {dims}: every dimension of a concrete output shape must be >= 0")
    if any(d > INT64_MAX for d in dims):
        raise ShapeError(f"{what} is {dims}: a dimension above 2**63 - 1 does not fit int64_t, what the kernel "
                         "reads")
    return dims


def code_unknown_dims(shapes: Sequence[object]) -> list[Shape]:
    """Input shapes with unknown parts as InferShape sees them: ``None`` for a dim is -1, ``None`` for a whole
    shape an unknown rank (``(-2,)``)."""
    coded = []
    for i, s in enumerate(shapes):
        if s is None:
            coded.append((-2,))
        elif isinstance(s, (list, tuple)) and all(d is None or _is_dim(d) for d in s):
            coded.append(tuple(-1 if d is None else int(d) for d in s))
            wrong = [d for d in coded[-1] if d > INT64_MAX]
            if wrong:  # the kernel reads int64_t: 2**63 would arrive as -2**63, 2**64 + 5 as 5
                raise ShapeError(f"input shape {i} is {tuple(s)}: dimension {wrong[0]} is outside 0 .. 2**63 - 1 "
                                 "(int64_t, what InferShape reads); use None for an unknown dim")
        else:
            raise ArgumentTypeError(f"input shape {i} is {s!r}: give a tuple of ints and None, or None")
    return coded


def _is_dim(d: object) -> bool:
    return isinstance(d, numbers.Integral) and not isinstance(d, bool) and int(d) >= 0


def output_shapes(rule: object, input_shapes: Sequence[Shape], n_outputs: int) -> list[Shape]:
    """Evaluate a non-None ``out_shape`` rule for concrete input shapes."""
    value = rule
    if callable(rule):
        try:
            value = rule(*input_shapes)
        except Exception as exc:  # a user function: report it with its inputs
            raise ShapeError(f"out_shape{tuple(input_shapes)} raised {type(exc).__name__}: {exc}") from exc
    shapes = list(value) if n_outputs > 1 or is_shape_list(value) else [value]  # type: ignore[arg-type]
    if n_outputs > 1 and not is_shape_list(value):
        raise ShapeError(f"out_shape gave {value!r}, but the op has {n_outputs} outputs: give one shape each")
    if len(shapes) != n_outputs:
        raise ShapeError(f"out_shape gave {len(shapes)} shapes for an op with {n_outputs} outputs")
    return [normalize_shape(s, f"output {i} shape" if n_outputs > 1 else "the output shape")
            for i, s in enumerate(shapes)]


def output_dtypes(rule: object, input_dtypes: Sequence[np.dtype], n_outputs: int,
                  reg_info: OpInfo | None, input_dtype_strings: tuple[str, ...]) -> list[np.dtype]:
    """Output dtypes: the ``out_dtype`` rule, else the registration's dtype_format, else the first input's.

    When the registration lists dtype combinations, the inputs must match one of them (whatever ``out_dtype``
    says), and an ``out_dtype`` that contradicts the matched row is refused.
    """
    from_reg = reg_info.output_dtypes(input_dtype_strings) if reg_info is not None else None
    value = rule
    if callable(rule) and not isinstance(rule, type):
        try:
            value = rule(*input_dtypes)
        except Exception as exc:
            raise ArgumentValueError(f"out_dtype{tuple(input_dtypes)} raised {type(exc).__name__}: {exc}") from exc
    if value is None:
        if from_reg is not None:
            return [resolve_dtype(d) for d in from_reg]
        if not input_dtypes:
            raise ArgumentTypeError("out_dtype is needed: the op has no inputs to take the output dtype from")
        return [input_dtypes[0]] * n_outputs
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n_outputs
    if len(values) != n_outputs:
        raise ArgumentValueError(f"out_dtype gives {len(values)} dtypes for an op with {n_outputs} outputs")
    dtypes = [resolve_dtype(v) for v in values]
    if from_reg is not None and [dtype_string(d) for d in dtypes] != list(from_reg):
        raise ArgumentValueError(
            f"out_dtype gives ({', '.join(dtype_string(d) for d in dtypes)}) but the registration's dtype_format "
            f"gives ({', '.join(from_reg)}) for inputs ({', '.join(input_dtype_strings)}); make them agree")
    return dtypes


def describe_rule(rule: object) -> str:
    if rule is None:
        return "InferShape"
    if callable(rule):
        return getattr(rule, "__name__", "function")
    return repr(rule)

