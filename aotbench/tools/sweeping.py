"""``sweep``: one op timed over input sizes (here, or on any ``concurrent.futures.Executor``), against the
machine's memory bandwidth on as many threads as the op's kernel used (:func:`aotbench.tools.bandwidth.roofline`).

Each point is one call of the module-level :func:`measure_point`, so an executor of processes (or a Dask
cluster's) can run it: the op travels pickled with its source (:mod:`aotbench.op.travel`) and is built there on first
use; a reference or ``inputs`` plain pickle cannot carry travels as cloudpickle bytes (:mod:`aotbench.spec.pickling`). Each point
records the facts of the process it ran in (:mod:`.environment`); the result's ``notes`` say where they differ from
the client's or are known to distort the reference.
"""

from __future__ import annotations

import functools
import html
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..run import devices as seam
from . import bandwidth
from .timing import Timing, format_ns, gbps
from ..errors import ArgumentTypeError, ArgumentValueError
from .accuracy import array_bytes, as_arrays, max_errors, snapshot
from .comparison import check_positive, interleaved
from .environment import ProcessFacts, process_facts, sweep_notes
from ..spec.pickling import portable
from .tables import format_bytes, html_table, size_text, text_table


@dataclass(frozen=True)
class SweepPoint:
    """One size of a :class:`Sweep`: the input shapes, bytes moved per call, the op's timing and GB/s, and the
    reference's timing and the max abs error against it (None without a reference)."""

    size: Any
    shapes: tuple[tuple[int, ...], ...]
    bytes_moved: int
    timing: Timing
    gbps: float
    reference_timing: Timing | None = None
    max_abs_error: float | None = None
    mismatch: str | None = None  # why the output could not be compared with the reference's
    facts: ProcessFacts | None = None  # the host, CPU and environment of the process that measured it

    @property
    def reference_gbps(self) -> float | None:
        return gbps(self.bytes_moved, self.reference_timing.median_ns) if self.reference_timing else None


@dataclass(frozen=True, repr=False)
class Sweep:
    """The result of :func:`sweep`: one point per size (in the order given) and the memory bandwidth of the device
    the op ran on (GB/s of a large copy there: a numpy copy on as many threads as the op's kernel used, at most
    the usable cores, on the host; a device-to-device copy on a gpu — the roofline of a memory-bound kernel);
    ``roofline_source`` says which copy, in words (``"numpy copy on 2 threads"``), ``roofline_note`` why its
    figure may be low. ``notes``: sentences on where the points ran, when that differs from the client
    (``client_facts``) or is known to distort the timings."""

    points: tuple[SweepPoint, ...]
    bandwidth_gbps: float | None
    label: str = ""
    roofline_source: str = "numpy copy"
    notes: tuple[str, ...] = ()
    client_facts: ProcessFacts | None = None
    roofline_note: str = ""

    @property
    def threads(self) -> int | None:
        """The most CPU threads the op's kernel used at any point (None: unknown, a Python callable or a gpu)."""
        known = [p.timing.threads for p in self.points if p.timing.threads is not None]
        return max(known) if known else None

    def _table(self) -> tuple[list[str], list[list[str]]]:
        has_ref = any(p.reference_timing for p in self.points)
        header = ["size", "bytes", "median", "GB/s"] + (["reference", "ref GB/s", "max abs error"] if has_ref else [])
        body = []
        for p in self.points:
            row = [size_text(p.size), format_bytes(p.bytes_moved), format_ns(p.timing.median_ns), f"{p.gbps:.2f}"]
            if has_ref and p.reference_timing:
                err = p.mismatch or f"{p.max_abs_error:.3g}"
                row += [format_ns(p.reference_timing.median_ns), f"{p.reference_gbps:.2f}", err]
            elif has_ref:
                row += ["", "", ""]
            body.append(row)
        return header, body

    def roofline_text(self) -> str:
        """``roofline: numpy copy on 2 threads, 46.3 GB/s``, with its note when there is one."""
        bw = f"{self.bandwidth_gbps:.1f} GB/s" if self.bandwidth_gbps else "unknown"
        note = f" ({self.roofline_note})" if self.roofline_note else ""
        return f"roofline: {self.roofline_source}, {bw}{note}"

    def _caption(self) -> str:
        timed = [p.timing for p in self.points if p.timing.threads is not None]
        ran = f"; the op ran on {max(timed, key=lambda t: t.threads).threads_text()}" if timed else ""
        return f"sweep of {self.label or 'the op'}: {len(self.points)} sizes{ran}; {self.roofline_text()}"

    def __str__(self) -> str:
        notes = "".join(f"\nnote: {n}" for n in self.notes)
        return f"{self._caption()}\n" + text_table(*self._table()) + notes

    __repr__ = __str__  # the table, not every sample of every timing

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        table = html_table(*self._table(), caption=self._caption())
        return table + (f"<ul class='aotbench-notes'>{notes}</ul>" if notes else "")

    def plot(self, ax=None):
        """Time and GB/s against bytes moved, with the bandwidth roofline (:func:`aotbench.plots.scaling`)."""
        from ..plots import scaling

        return scaling(self, ax=ax)


def random_inputs(size: Any, rng: np.random.Generator, count: int = 1) -> tuple[np.ndarray, ...]:
    """``count`` fresh float32 standard-normal arrays of shape ``(size,)`` (an int) or ``size`` (a tuple)."""
    shape = (size,) if isinstance(size, int) else tuple(size)
    return tuple(rng.standard_normal(shape, dtype=np.float32) for _ in range(count))


def measure_point(op: Callable, size: Any, inputs: Callable, reference: Callable | None, budget_ms: float,
                  seed: Any) -> SweepPoint:
    """Measure one size (module level so an executor can run it in another process: the op travels pickled)."""
    made = inputs(size, np.random.default_rng(seed))
    args = (made,) if isinstance(made, np.ndarray) else made
    if not isinstance(args, (tuple, list)):
        raise ArgumentTypeError(f"inputs(size, rng) must return a tuple of arrays, got {type(made).__name__}")
    device = seam.for_call(op, tuple(args))
    args = device.prepare(op, tuple(args))  # a gpu op's inputs live on the device, as its outputs do
    label = getattr(op, "name", getattr(op, "__name__", "op"))
    entries = [(label, op)] + ([("reference", reference)] if reference is not None else [])
    output = snapshot(op(*args))
    err = max_errors(output, snapshot(reference(*args))) if reference is not None else None
    timings = interleaved(entries, args, budget_ms, None)
    nbytes = array_bytes(args) + array_bytes(as_arrays(output))
    shapes = device.shapes(args)
    return SweepPoint(size, shapes, nbytes, timings[label], gbps(nbytes, timings[label].median_ns),
                      timings.get("reference"), err.max_abs if err else None, err.mismatch if err else None,
                      process_facts())


def sweep(op: Callable, sizes: Any, inputs: Callable | None = None, reference: Callable | None = None,
          executor: Any = None, budget_ms: float = 100.0, progress: bool | None = None,
          seed: int | None = None, label: str | None = None) -> Sweep:
    """Time ``op`` (and ``reference``, with the max abs error against it) at every size, in the order given.

    ``sizes``: ints (every input gets shape ``(n,)``) or shape tuples; without ``inputs`` each point gets fresh
    float32 standard-normal inputs (as many as the registration or the reference's signature declares), else
    ``inputs(size, rng)`` builds them (module level when the executor runs processes). ``executor``: any
    ``concurrent.futures.Executor`` (one :func:`measure_point` per size; points timed concurrently compete for
    the cores and memory, so one worker per machine gives honest numbers); None runs here. ``progress``: a tqdm
    bar (None: when there are 8 points or more). ``seed`` makes the inputs reproducible. ``label`` names the op
    in tables and plots (default: its name). The result's ``notes`` flag points measured on another machine, in
    another environment than this process, or with malloc settings that slow a numpy reference (Dask's default).
    """
    check_positive("budget_ms", budget_ms)
    if not callable(op) or (reference is not None and not callable(reference)):
        raise ArgumentTypeError("sweep needs a callable op (and reference, when given)")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ArgumentValueError(f"seed must be a non-negative int or None, got {seed!r}")
    if inputs is None:
        points = [_check_shape(s) for s in _as_list(sizes)]
        inputs = functools.partial(random_inputs, count=_arity(op, reference))
    elif callable(inputs):
        points = [int(s) if isinstance(s, np.integer) else s for s in _as_list(sizes)]
    else:
        raise ArgumentTypeError(f"inputs must be a function (size, rng) -> tuple of arrays, got {inputs!r}")
    seeds = np.random.SeedSequence(seed).spawn(len(points))
    calls = [(op, size, inputs, reference, budget_ms, s) for size, s in zip(points, seeds)]
    if label is not None and not isinstance(label, str):
        raise ArgumentTypeError(f"label must be a string, got {label!r}")
    if not label:
        label = getattr(op, "name", getattr(op, "__name__", "op"))
        label += " (emulated on the CPU)" if getattr(op, "emulated", False) else ""
    bar = _progress_bar(progress, len(calls), label)
    try:
        results = _run_points(calls, executor, bar)
    finally:
        if bar is not None:
            bar.close()
    device = seam.for_call(op, ())
    client = process_facts()
    notes = sweep_notes(client, [p.facts for p in results], any(p.reference_timing for p in results))
    measured = Sweep(tuple(results), None, label, "", tuple(notes), client)
    line = bandwidth.roofline(device, measured.threads)
    return replace(measured, bandwidth_gbps=line.gbps, roofline_source=line.source, roofline_note=line.note)


def _as_list(sizes: Any) -> list:
    items = [] if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__") else list(sizes)
    if not items:
        raise ArgumentTypeError(f"sizes must be a non-empty list of ints or shape tuples, got {sizes!r}")
    return items


def _check_shape(size: Any) -> int | tuple[int, ...]:
    """An int (a 1-D length) or a tuple of ints, every one >= 1, as plain Python ints."""
    def is_dim(d: Any) -> bool:
        return isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1

    if is_dim(size):
        return int(size)
    if isinstance(size, (tuple, list)) and size and all(is_dim(d) for d in size):
        return tuple(int(d) for d in size)
    raise ArgumentValueError(f"each size is a length >= 1 or a shape tuple of such dims, got {size!r}; pass inputs= "
                             "(a function (size, rng) -> arrays) for anything else")


def _arity(op: Any, reference: Callable | None) -> int:
    """How many default inputs to make: the registration's inputs, else the reference's positional parameters."""
    reg = getattr(getattr(op, "spec", None), "reg_info", None)
    if reg is not None and reg.inputs:
        return len(reg.inputs)
    if isinstance(getattr(reference, "nin", None), int):  # a numpy ufunc such as np.add
        return reference.nin
    try:
        params = list(inspect.signature(reference).parameters.values()) if reference is not None else []
    except (TypeError, ValueError):  # a builtin without a signature
        params = []
    required = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    if required and not any(p.kind is p.VAR_POSITIONAL for p in params):
        return len(required)
    raise ArgumentValueError("sweep cannot tell how many inputs the op takes: register them (reg_info with "
                             ".input(...)), pass a reference with plain positional parameters, or pass "
                             "inputs=(size, rng) -> arrays")


def _progress_bar(progress: bool | None, total: int, label: str):
    if progress is not None and not isinstance(progress, bool):
        raise ArgumentTypeError(f"progress must be True, False or None (automatic), got {progress!r}")
    if not (progress if progress is not None else total >= 8):
        return None
    try:
        from tqdm.auto import tqdm  # only when a bar is wanted: tqdm is not a dependency of the core
    except ImportError as exc:
        if progress:
            raise ArgumentValueError("progress=True needs tqdm: pip install tqdm (or pass progress=False)") from exc
        return None
    return tqdm(total=total, desc=f"sweep {label}", unit="size")


def _run_points(calls: list[tuple], executor: Any, bar) -> list[SweepPoint]:
    """Every point, here or through ``executor.submit``, gathered in size order (a failure cancels the rest)."""
    results = []
    if executor is None:
        for call in calls:
            results.append(measure_point(*call))
            if bar is not None:
                bar.update(1)
        return results
    if not callable(getattr(executor, "submit", None)):
        raise ArgumentTypeError(f"executor must be a concurrent.futures.Executor (with .submit), got {executor!r}")
    op, _, inputs, reference, _, _ = calls[0]  # the same in every call: checked and wrapped once
    carried = (portable(op, "the op"), portable(inputs, "inputs"),
               None if reference is None else portable(reference, "the reference"))
    futures = [executor.submit(measure_point, carried[0], size, carried[1], carried[2], budget, seed)
               for _, size, _, _, budget, seed in calls]
    try:
        for future in futures:
            results.append(future.result())
            if bar is not None:
                bar.update(1)
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return results


__all__ = ["Sweep", "SweepPoint", "measure_point", "random_inputs", "sweep"]
