"""How far an output is from a reference: max abs and rel errors (NaN-aware), and a verdict at a tolerance.

One definition for every place that compares (``compare``, ``sweep``, the explore panel, the plots): equal
values, NaN and NaN included, are no error; a NaN or inf on one side only is an infinite error; the relative
error is ``|o - r| / |r|`` per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..run import devices as seam


@dataclass(frozen=True)
class Errors:
    """How far an output is from a reference: max abs and max rel error, how many elements are NaN/inf where
    the reference is finite, and ``mismatch`` (a sentence) when the outputs cannot be compared at all."""

    max_abs: float
    max_rel: float
    nonfinite: int = 0
    mismatch: str | None = None


def to_host(value: Any) -> np.ndarray:
    """An array as a numpy array: a device array is copied to the host by its device; anything else goes through
    ``np.asarray``."""
    return seam.for_value(value).to_host(value)


def as_arrays(value: Any) -> tuple[np.ndarray, ...]:
    """An output as a tuple of host arrays (an op with several outputs returns a tuple)."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    return tuple(to_host(v) for v in items)


def snapshot(value: Any) -> Any:
    """A private host copy of an output, so a callable that reuses its output buffer cannot change it later."""
    if isinstance(value, (tuple, list)):
        return tuple(np.array(to_host(v), copy=True) for v in value)
    return np.array(to_host(value), copy=True)


def max_errors(output: Any, reference: Any) -> Errors:
    """Max abs and max rel error of ``output`` against ``reference`` (arrays or tuples of arrays).

    NaN-aware: equal values (NaN and NaN, inf and inf) are no error; a NaN on one side only is an infinite error.
    The relative error is ``|o - r| / |r|`` per element (0 where equal, inf where ``r`` is 0 and ``o`` is not).
    A different number of outputs, a shape mismatch or a non-numeric dtype comes back as ``mismatch``.
    """
    outs, refs = as_arrays(output), as_arrays(reference)
    problem = _mismatch(outs, refs)
    if problem:
        return Errors(math.nan, math.nan, mismatch=problem)
    worst_abs = worst_rel = 0.0
    nonfinite = 0
    for o, r in zip(outs, refs):
        abs_err, rel_err = elementwise_errors(o, r)
        worst_abs = max(worst_abs, float(abs_err.max(initial=0.0)))
        worst_rel = max(worst_rel, float(rel_err.max(initial=0.0)))
        nonfinite += int(np.count_nonzero(np.isfinite(r) & ~np.isfinite(o)))
    return Errors(worst_abs, worst_rel, nonfinite)


def _mismatch(outs: tuple[np.ndarray, ...], refs: tuple[np.ndarray, ...]) -> str | None:
    """Why the outputs cannot be compared element by element (count, shape, dtype), or None."""
    if len(outs) != len(refs):
        return f"{len(outs)} output(s) where the reference has {len(refs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape:
            return f"output {i} has shape {o.shape}, the reference {r.shape}"
        if o.dtype.kind not in "biufc" or r.dtype.kind not in "biufc":
            return f"output {i} is not numeric ({o.dtype} vs {r.dtype})"
    return None


def elementwise_errors(o: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|o - r| and |o - r| / |r| per element, with NaN-aware equality and inf for one-sided NaN."""
    wide = np.complex128 if "c" in (o.dtype.kind, r.dtype.kind) else np.float64
    a, b = o.astype(wide), r.astype(wide)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        abs_err = np.where(same, 0.0, np.abs(a - b))
        abs_err = np.where(np.isnan(abs_err), np.inf, abs_err)
        scale = np.abs(b)
        rel_err = np.divide(abs_err, scale, out=np.full(abs_err.shape, np.inf), where=scale > 0)
        rel_err = np.where(same, 0.0, np.where(np.isnan(rel_err), np.inf, rel_err))
    return abs_err, rel_err


def array_bytes(values: Any) -> int:
    """The bytes of the host and device arrays among ``values`` (other arguments, such as call attributes, move
    none)."""
    return sum(v.nbytes for v in values if seam.CPU.owns(v) or seam.GPU.owns(v))


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for results of this dtype: exact for ints and bools, loose for 16-bit floats."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return 0.0, 0.0
    if dtype.itemsize <= 2 or dtype.kind == "V":
        return 1e-2, 1e-2
    if dtype in (np.float32, np.complex64):
        return 1e-4, 1e-5
    return 1e-9, 1e-12


@dataclass(frozen=True)
class Agreement:
    """An output against the reference at a tolerance: max abs/rel error, how many elements fail, the verdict."""

    max_abs: float
    max_rel: float
    mismatched: int
    total: int
    rtol: float
    atol: float
    problem: str | None = None  # a count, shape or dtype mismatch, in words

    @property
    def ok(self) -> bool:
        return self.problem is None and self.mismatched == 0


def agreement(output: Any, reference: Any, rtol: float | None = None, atol: float | None = None) -> Agreement:
    """Max abs/rel error (as :func:`max_errors`) plus the elements outside ``atol + rtol * |reference|``
    (defaults: :func:`tolerance` of the output's dtype), from one pass of :func:`elementwise_errors` per output."""
    outs, refs = as_arrays(output), as_arrays(reference)
    rt, at = tolerance(outs[0].dtype) if outs else (0.0, 0.0)
    rt, at = (rt if rtol is None else rtol), (at if atol is None else atol)
    problem = _mismatch(outs, refs)
    if problem:
        return Agreement(math.nan, math.nan, 0, 0, rt, at, problem)
    worst_abs = worst_rel = 0.0
    mismatched = total = 0
    for o, r in zip(outs, refs):
        abs_err, rel_err = elementwise_errors(o, r)
        worst_abs = max(worst_abs, float(abs_err.max(initial=0.0)))
        worst_rel = max(worst_rel, float(rel_err.max(initial=0.0)))
        with np.errstate(invalid="ignore"):
            limit = at + rt * np.abs(np.nan_to_num(r.astype(np.complex128 if r.dtype.kind == "c" else np.float64)))
        mismatched += int(np.count_nonzero(abs_err > limit))
        total += abs_err.size
    return Agreement(worst_abs, worst_rel, mismatched, total, rt, at)


__all__ = ["Agreement", "Errors", "agreement", "array_bytes", "as_arrays", "elementwise_errors", "max_errors",
           "snapshot", "tolerance"]
