"""Side by side: ``compare`` (several callables on the same inputs) and ``compare_flags`` (one op rebuilt under
several flag sets).

A :class:`Comparison` has a text table (``str``), an HTML table (``_repr_html_``) and ``.plot()`` (matplotlib is
imported only there, through :mod:`aotbench.plots`). Errors are against the FIRST entry (:mod:`aotbench.tools.accuracy`).
Throughput counts the minimum traffic: the bytes of the array arguments plus the bytes of the output. Each entry
is held to the roofline of the threads its kernel ran on (:func:`aotbench.tools.bandwidth.roofline`: a serial
kernel to the one-core copy, an OpenMP kernel to the copy on as many threads, at most the usable cores), and
the table says which.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..run import devices as seam
from ..spec.spec import OpSpec, parse_flags
from . import bandwidth
from .bandwidth import Roofline
from .timing import Timing, bench, format_ns, gbps, shown_label
from ..errors import ArgumentTypeError, ArgumentValueError
from .accuracy import array_bytes, as_arrays, max_errors, snapshot
from .tables import format_bytes, html_table, text_table

DEFAULT_FLAG_SETS = {"documented (-O0)": (), "-O2": ("-O2",), "-O3 -march=native": ("-O3", "-march=native")}


@dataclass(frozen=True)
class ComparisonRow:
    """One entry of a :class:`Comparison`: its timing, speed-up over the first entry (first median / this
    median), throughput and errors against the first entry's output."""

    label: str
    timing: Timing
    speedup: float
    gbps: float
    max_abs_error: float
    max_rel_error: float
    nonfinite: int = 0  # elements NaN/inf here but finite in the first entry's output
    mismatch: str | None = None  # why the output could not be compared (then both errors are nan)

    def error_text(self) -> str:
        """The errors in words for the tables: a mismatch, or abs/rel with the non-finite count flagged."""
        if self.mismatch:
            return self.mismatch
        text = f"{self.max_abs_error:.3g} / {self.max_rel_error:.3g}"
        return f"{text} ({self.nonfinite} NaN/inf where the first is finite)" if self.nonfinite else text


@dataclass(frozen=True, repr=False)
class Comparison:
    """The result of :func:`compare`: one row per entry, the first being the baseline."""

    rows: tuple[ComparisonRow, ...]
    bytes_moved: int
    bytes_automatic: bool = True  # array arguments + output, rather than a number the caller gave
    fns: dict = field(default_factory=dict, compare=False, repr=False)  # label -> the callable that was timed
    #: compare_flags on a cpu op: label -> the source lines GCC vectorized (and the loops it could not)
    vectorized: dict = field(default_factory=dict, compare=False)
    #: label -> the roofline that entry is held to (:func:`aotbench.tools.bandwidth.roofline`: the copy on as many
    #: threads as its kernel used); empty with ``compare(..., roofline=False)``
    rooflines: dict = field(default_factory=dict, compare=False)

    @property
    def timings(self) -> dict[str, Timing]:
        return {row.label: row.timing for row in self.rows}

    def _distinct_rooflines(self) -> list[Roofline]:
        return list(dict.fromkeys(self.rooflines.values()))

    def _table(self) -> tuple[list[str], list[list[str]]]:
        header = ["", "median", "IQR", "speed-up", "GB/s", f"max abs / rel error vs {self.rows[0].label}"]
        body = [[shown_label(r.label, r.timing), format_ns(r.timing.median_ns), format_ns(r.timing.iqr_ns),
                 f"{r.speedup:.2f}x",
                 f"{r.gbps:.2f}", "(baseline)" if i == 0 else r.error_text()] for i, r in enumerate(self.rows)]
        if any(r.timing.threads is not None for r in self.rows):
            header.insert(5, "threads")
            for row, r in zip(body, self.rows):
                row.insert(5, "?" if r.timing.threads is None else str(r.timing.threads))
        if self.rooflines:
            mixed = len(self._distinct_rooflines()) > 1
            header.insert(5, "of roofline")
            for row, r in zip(body, self.rows):
                line = self.rooflines.get(r.label)
                share = f"{100 * r.gbps / line.gbps:.0f}%" if line and line.gbps > 0 else ""
                row.insert(5, f"{share} of the {_copy_words(line)}" if share and mixed else share)
        if self.vectorized:
            header.append("vectorized (source lines)")
            for row, r in zip(body, self.rows):
                row.append(self.vectorized.get(r.label, ""))
        return header, body

    def _caption(self) -> str:
        how = "array arguments + output" if self.bytes_automatic else "as given"
        lines = self._distinct_rooflines()
        if len(lines) == 1:
            roof = f"; roofline: {lines[0]}"
        elif lines:
            roof = "; rooflines: " + "; ".join(
                f"{line} ({', '.join(label for label, own in self.rooflines.items() if own == line)})"
                for line in lines)
        else:
            roof = ""
        return f"{format_bytes(self.bytes_moved)} moved per call ({how}){roof}"

    @property
    def notes(self) -> tuple[str, ...]:
        """The threads each entry ran on, and why, grouped (``op, op -O2: 1 thread (no OpenMP)``), and what a
        ``?`` in the threads column means."""
        groups: dict[str, list[str]] = {}
        unknown = []
        for r in self.rows:
            if r.timing.threads is None:
                unknown.append(r.label)
            else:
                groups.setdefault(r.timing.threads_text(), []).append(r.label)
        if not groups:
            return ()
        said = ["threads: " + "; ".join(f"{', '.join(labels)}: {text}" for text, labels in groups.items())]
        if unknown:
            held = " (held to the 1-thread copy)" if self.rooflines and any(
                self.rooflines.get(label) and self.rooflines[label].threads == 1 for label in unknown) else ""
            said.append(f"threads ?: {', '.join(unknown)} — a Python callable, whose threads aotbench cannot "
                        f"see{held}")
        return tuple(said)

    def __str__(self) -> str:
        notes = "".join(f"\nnote: {n}" for n in self.notes)
        return f"{self._caption()}\n" + text_table(*self._table()) + notes

    __repr__ = __str__  # the table, not every sample of every timing

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        table = html_table(*self._table(), caption=self._caption())
        return table + (f"<ul class='aotbench-notes'>{notes}</ul>" if notes else "")

    def plot(self, ax=None, title: str | None = None):
        """A bar chart of the medians with IQR whiskers (:func:`aotbench.plots.timings`); returns the Figure."""
        from ..plots import timings

        return timings(self, ax=ax, title=title)


def compare(fns: Mapping[str, Callable], *args: Any, budget_ms: float = 200.0, flush_cache: bool | None = None,
            bytes_moved: float | None = None, roofline: bool = True) -> Comparison:
    """Time every callable of ``fns`` on ``args`` and compare its output with the first one's.

    Each entry is called once untimed (its output is kept), then timed with :func:`aotbench.bench` in two
    rounds of ``budget_ms / 2`` each, the second in reverse order, so a drift of the machine falls on every entry
    alike; all samples are kept. ``bytes_moved=None`` counts the minimum traffic: the bytes of the array
    arguments plus those of the first entry's output; a number overrides it. ``roofline`` holds each entry to
    the copy bandwidth of its device on as many threads as its kernel used (a Python callable: one), measured
    once per machine (:func:`aotbench.tools.bandwidth.roofline`); the table says which copy and each entry's
    share of it.
    """
    entries = _check_entries(fns)
    check_positive("budget_ms", budget_ms)
    if bytes_moved is not None:
        check_positive("bytes_moved", bytes_moved)
    outputs = {label: snapshot(fn(*args)) for label, fn in entries}
    first = entries[0][0]
    automatic = bytes_moved is None
    nbytes = int(array_bytes(args) + array_bytes(as_arrays(outputs[first]))) if automatic else int(bytes_moved)
    timings = interleaved(entries, args, budget_ms, flush_cache)
    rows = []
    for label, _ in entries:
        err = max_errors(outputs[label], outputs[first])
        median = timings[label].median_ns
        rows.append(ComparisonRow(label, timings[label], _ratio(timings[first].median_ns, median),
                                  gbps(nbytes, median), err.max_abs, err.max_rel, err.nonfinite, err.mismatch))
    lines = {label: bandwidth.roofline(seam.for_call(fn, args), timings[label].threads)
             for label, fn in entries} if roofline else {}
    return Comparison(tuple(rows), nbytes, automatic, dict(entries), rooflines=lines)


def _copy_words(line: Roofline | None) -> str:
    """``2-thread copy`` or ``device copy``: which roofline, in a table cell."""
    if line is None:
        return "copy"
    return f"{line.threads}-thread copy" if line.threads is not None else "device copy"


def _check_entries(fns: Any) -> list[tuple[str, Callable]]:
    if not isinstance(fns, Mapping) or not fns:
        raise ArgumentTypeError("compare needs a non-empty mapping of label -> callable, e.g. {'op': op, 'numpy': f}")
    for label, fn in fns.items():
        if not isinstance(label, str):
            raise ArgumentTypeError(f"compare's labels must be strings, got {label!r}")
        if not callable(fn):
            raise ArgumentTypeError(f"compare's entry {label!r} is a {type(fn).__name__}, not a callable")
    return list(fns.items())


def check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ArgumentValueError(f"{name} must be a positive number, got {value!r}")


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.inf


def interleaved(entries: list[tuple[str, Callable]], args: tuple, budget_ms: float,
                 flush_cache: bool | None) -> dict[str, Timing]:
    """Each entry timed in two rounds (the second in reverse order), the samples of both kept together."""
    rounds: dict[str, list[Timing]] = {label: [] for label, _ in entries}
    for order in (entries, entries[::-1]):
        for label, fn in order:
            rounds[label].append(bench(fn, *args, budget_ms=budget_ms / 2, flush_cache=flush_cache, label=label))
    return {label: replace(parts[0], samples_ns=tuple(s for t in parts for s in t.samples_ns), label=label)
            for label, parts in rounds.items()}


def compare_flags(op: Any, *args: Any, flag_sets: Mapping[str, Any] | None = None, reference: Callable | None = None,
                  budget_ms: float = 200.0, flush_cache: bool | None = None, bytes_moved: float | None = None,
                  vectorization: bool = True, roofline: bool = True) -> Comparison:
    """Rebuild ``op`` under each flag set (which REPLACES its flags) and :func:`compare` the builds on ``args``.

    ``flag_sets`` maps a label to a list of flags (or a string, split like a shell would); the default is the
    documented build (-O0), ``-O2`` and ``-O3 -march=native``. ``reference`` (a callable on the same args) is
    added last as ``"reference"``; errors are against the first flag set. A flag set that does not compile raises
    its :class:`~aotbench.errors.CompileError`. ``result.fns[label]`` is each build (``.command``, ``.artifact``).
    For a cpu op, ``vectorization`` adds which source lines have loops GCC vectorized under each flag set (from
    each build's :meth:`~aotbench.op.op.Op.annotate`, one inspection build each): why one set is faster. A
    ``-fopenmp`` set is held to the copy on as many threads as its build uses (``roofline``: see :func:`compare`).
    """
    spec = getattr(op, "spec", None)
    if not isinstance(spec, OpSpec) or getattr(op, "artifact", None) is None:
        raise ArgumentValueError("compare_flags needs an op built from a source file by aotbench.Custom (a prebuilt "
                                 "library has no flags to change)")
    sets = _flag_sets(flag_sets)
    if reference is not None and (not callable(reference) or "reference" in sets):
        raise ArgumentTypeError("reference must be a callable, and no flag set may be labelled 'reference'")
    fns: dict[str, Callable] = {label: op.with_flags(flags) for label, flags in sets.items()}
    if reference is not None:
        fns["reference"] = reference
    result = compare(fns, *args, budget_ms=budget_ms, flush_cache=flush_cache, bytes_moved=bytes_moved,
                     roofline=roofline)
    if vectorization and not op.device.runs_elsewhere:
        result = replace(result, vectorized={label: vectorized_lines(fns[label].annotate()) for label in sets})
    return result


def vectorized_lines(annotation: Any) -> str:
    """``36, 38 (not: 32, 35)``: the lines with a vectorized loop, then those with a loop GCC could not vectorize."""
    done, failed = annotation.vectorized_lines, annotation.not_vectorized_lines
    text = ", ".join(map(str, done)) or "none"
    return f"{text} (not: {', '.join(map(str, failed))})" if failed else text


def _flag_sets(flag_sets: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    if flag_sets is None:
        return dict(DEFAULT_FLAG_SETS)
    if not isinstance(flag_sets, Mapping) or not flag_sets or not all(isinstance(k, str) for k in flag_sets):
        raise ArgumentTypeError("flag_sets must be a non-empty mapping of label -> flags, e.g. {'-O2': ['-O2']}")
    return {label: parse_flags(flags) for label, flags in flag_sets.items()}


__all__ = ["Comparison", "ComparisonRow", "check_positive", "compare", "compare_flags", "interleaved"]
