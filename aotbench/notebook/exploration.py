"""What an interactive panel computes, without any widget: dynamic dimensions, inputs, reference errors.

:mod:`aotbench.notebook.widgets` draws controls and wires them to these pure functions, so the logic is tested (and
usable) without ipywidgets:

* :func:`parse_dynamic` reads MindSpore's ``set_inputs``-style shapes (``None`` = a dim of its own, a string = a
  dim shared by every input that names it, an int = fixed) against the example inputs;
* :func:`concrete_shapes` turns the chosen dim values back into one shape per input;
* :func:`random_inputs` draws fresh inputs of those shapes with the examples' dtypes;
* :func:`call_reference` calls a reference with the current values of the attributes it names;
* :func:`speed_words` says how the op's time compares with the reference's, in words;
* :func:`panel_name` names the op as the user knows it (the variable it is bound to) beside its kernel's name.

The verdict against the reference is :func:`aotbench.tools.accuracy.agreement`, shared with ``compare`` and ``sweep``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ShapeError

MAX_DIM_CONTROL = 1 << 16


@dataclass(frozen=True)
class Dim:
    """One dynamic dimension: its label, its value in the examples, and where it appears (input, axis)."""

    label: str
    value: int
    places: tuple[tuple[int, int], ...]

    @property
    def maximum(self) -> int:
        """A slider's upper end: room to grow well past the example without absurd sizes."""
        return int(min(max(4 * self.value, 64), MAX_DIM_CONTROL))


def _input_names(n: int, names: Sequence[str] | None) -> list[str]:
    return list(names) if names and len(names) == n else [f"input {i}" for i in range(n)]


def parse_dynamic(dynamic: Sequence | None, examples: Sequence[np.ndarray],
                  input_names: Sequence[str] | None = None) -> list[Dim]:
    """The dynamic dims of ``dynamic`` (one shape per input), checked against the examples' shapes."""
    if dynamic is None:
        return []
    if not isinstance(dynamic, (list, tuple)) or len(dynamic) != len(examples):
        raise ShapeError(f"dynamic= lists one shape per input: {len(examples)} shape(s) for {len(examples)} "
                         f"input(s), e.g. dynamic=[('m', 'n'), ('m', 'n')]; got {dynamic!r}")
    names = _input_names(len(examples), input_names)
    found: dict[str, Dim] = {}
    order: list[str] = []
    for i, (shape, example) in enumerate(zip(dynamic, examples)):
        if not isinstance(shape, (list, tuple)) or len(shape) != example.ndim:
            raise ShapeError(f"dynamic shape {i} ({names[i]}) is {shape!r}, but its example has shape "
                             f"{example.shape}: give one entry per dim (None, a name, or the fixed size)")
        for axis, entry in enumerate(shape):
            actual = int(example.shape[axis])
            if entry is None or isinstance(entry, str):
                label = entry if isinstance(entry, str) else f"{names[i]} dim {axis}"
                if isinstance(entry, str) and not entry.strip():
                    raise ShapeError(f"dynamic shape {i}: a dim name cannot be empty")
                if label in found:
                    if found[label].value != actual:
                        raise ShapeError(f"dim {label!r} is {found[label].value} in one example and {actual} in "
                                         f"{names[i]} (axis {axis}): inputs sharing a dim name must agree")
                    found[label] = Dim(label, actual, found[label].places + ((i, axis),))
                else:
                    found[label] = Dim(label, actual, ((i, axis),))
                    order.append(label)
            elif isinstance(entry, int) and not isinstance(entry, bool):
                if entry != actual:
                    raise ShapeError(f"dynamic shape {i} fixes axis {axis} at {entry}, but the example has "
                                     f"{actual}; use None or a name to make it dynamic")
            else:
                raise ShapeError(f"dynamic shape {i}, axis {axis}: {entry!r} is not None, a name or an int")
    return [found[label] for label in order]


def concrete_shapes(examples: Sequence[np.ndarray], dims: Sequence[Dim], values: dict[str, int]) -> list[tuple]:
    """One shape per input: the examples' shapes with every dynamic dim set to its chosen value."""
    shapes = [list(e.shape) for e in examples]
    for dim in dims:
        value = values.get(dim.label, dim.value)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ShapeError(f"dim {dim.label!r} must be a non-negative int, got {value!r}")
        for i, axis in dim.places:
            shapes[i][axis] = int(value)
    return [tuple(s) for s in shapes]


def random_inputs(examples: Sequence[np.ndarray], shapes: Sequence[tuple], rng: np.random.Generator) -> tuple:
    """Fresh random arrays of the given shapes with the examples' dtypes (normal floats, small ints, bools)."""
    out = []
    for example, shape in zip(examples, shapes):
        dtype = example.dtype
        if dtype.kind == "f" or dtype.kind == "V":  # "V": ml_dtypes' bfloat16 and friends
            arr = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "c":
            arr = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
        elif dtype.kind == "b":
            arr = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            arr = rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dtype)
        else:
            raise ArgumentTypeError(f"cannot draw random inputs of dtype {dtype}")
        out.append(arr)
    return tuple(out)


def attrs_for_reference(reference: Callable, attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes ``reference`` takes by keyword: those its parameters name (all of them for ``**kwargs``)."""
    try:
        params = list(inspect.signature(reference).parameters.values())
    except (TypeError, ValueError):
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(attrs)
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in attrs.items() if k in named}


def call_reference(reference: Callable, inputs: tuple, attrs: dict[str, Any]):
    """``reference(*inputs, **the attributes it names)``: ``lambda x, y, axis: ...`` follows the axis control."""
    return reference(*inputs, **attrs_for_reference(reference, attrs))


__all__ = ["Dim", "attrs_for_reference", "call_reference", "concrete_shapes", "parse_dynamic", "random_inputs"]


def speed_words(op_q1_ns: float, op_median_ns: float, op_q3_ns: float, ref_q1_ns: float, ref_median_ns: float,
                ref_q3_ns: float) -> str:
    """The op's speed against the reference's: "3.4x slower than the reference", "2.1x faster than the
    reference", or "as fast as the reference (within noise)" when the middle halves of the two sets of samples
    (first to third quartile) overlap, so the medians' order is not to be trusted."""
    if op_q1_ns <= ref_q3_ns and ref_q1_ns <= op_q3_ns:
        return "as fast as the reference (within noise)"
    if op_median_ns > ref_median_ns:
        return f"{_times(op_median_ns / ref_median_ns)} slower than the reference"
    return f"{_times(ref_median_ns / op_median_ns)} faster than the reference"


def _times(ratio: float) -> str:
    return f"{ratio:.3g}x" if ratio < 100 else f"{ratio:.0f}x"


def panel_name(op) -> str:
    """The op's name for a panel's title: ``op.name`` (its kernel function, as the op's repr and errors name it),
    preceded by the variable the user bound it to in IPython when that differs (``add_reduce (CustomKernel)``
    for ``%%aot_kernel --name add_reduce`` on a cell defining ``CustomKernel``)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    namespace = getattr(shell, "user_ns", None) or {}
    bound = sorted(k for k, v in list(namespace.items()) if v is op and not k.startswith("_"))
    if not bound or op.name in bound:
        return op.name
    return f"{bound[0]} ({op.name})"
