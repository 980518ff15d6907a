"""Plots of timings, sweeps and errors (the UI layer: matplotlib is imported inside each function).

Every function draws on a new :class:`matplotlib.figure.Figure` (``ax=None``) or on the axes given, and returns
the figure. pyplot is never used and nothing is shown: no global state, so plots are safe in threads and in
widgets (the interactive panel puts :func:`to_png` in an image widget; a notebook displays a returned Figure).
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .tools.timing import Timing, format_ns, shown_label
from .errors import ArgumentTypeError, ArgumentValueError
from .tools.accuracy import max_errors
from .tools.comparison import Comparison
from .tools.sweeping import Sweep

MAX_SCATTER_POINTS = 2000
LABEL_WIDTH = 14  # characters per line of a bar's label
MAX_INDEX_TICKS = 10  # per axis of an image of a 2-D array
TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))


def _figure_and_axes(ax: Any, figsize: tuple[float, float] = (6.4, 4.0)):
    """The axes to draw on: ``ax`` and its figure, or a fresh figure (no pyplot) with one axes."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def fixed_figure(width_px: int = 560, height_px: int = 320, dpi: int = 100):
    """A figure of this size in pixels (at ``dpi``) with one axes and fixed margins: no layout engine, which
    halves the drawing time of a small plot that is redrawn on every change (the explore panel's)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    fig.subplots_adjust(left=0.13, right=0.96, bottom=0.15, top=0.89)
    fig.add_subplot()
    return fig


def time_unit(max_ns: float) -> tuple[str, float]:
    """The unit (and ns per unit) that keeps the largest time readable: ``ns``, ``us``, ``ms`` or ``s``."""
    for unit, scale in TIME_UNITS:
        if max_ns >= scale:
            return unit, scale
    return "ns", 1.0


def _labelled_timings(data: Any) -> list[tuple[str, Timing]]:
    """(label, Timing) pairs from a Comparison, a Mapping label -> Timing, a Timing or a sequence of them."""
    if isinstance(data, Sweep):
        raise ArgumentTypeError("plots.timings draws one bar per entry; plot a Sweep with plots.scaling(sweep)")
    if isinstance(data, Comparison):
        return [(shown_label(row.label, row.timing), row.timing) for row in data.rows]
    if isinstance(data, Timing):
        data = [data]
    if isinstance(data, Mapping):
        pairs = [(str(label), t) for label, t in data.items()]
    elif isinstance(data, Sequence) and not isinstance(data, str):
        pairs = [(t.label if isinstance(t, Timing) else "", t) for t in data]
    else:
        pairs = []
    if not pairs or not all(isinstance(t, Timing) for _, t in pairs):
        raise ArgumentTypeError("plots.timings needs a Comparison, a mapping label -> Timing or a list of Timing "
                                f"(from aotbench.bench), got {type(data).__name__}")
    return [(shown_label(label or f"#{i}", t), t) for i, (label, t) in enumerate(pairs)]


def timings(data: Any, ax: Any = None, title: str | None = None):
    """A bar per entry: the median time per call, with the quartiles (q1..q3) as whiskers; for a Comparison,
    a dashed line across each bar at the time its roofline allows (the copy on as many threads as that entry's
    kernel used), labelled with the copy it is."""
    pairs = _labelled_timings(data)
    fig, ax = _figure_and_axes(ax)
    unit, scale = time_unit(max(t.median_ns for _, t in pairs))
    x = np.arange(len(pairs))
    medians = np.array([t.median_ns for _, t in pairs]) / scale
    below = medians - np.array([t.q1_ns for _, t in pairs]) / scale
    above = np.array([t.q3_ns for _, t in pairs]) / scale - medians
    ax.bar(x, medians, color="C0", label="median")
    ax.errorbar(x, medians, yerr=np.vstack([below, above]), fmt="none", ecolor="black", capsize=4,
                label="IQR (q1..q3)")
    ax.set_xticks(x, [textwrap.fill(label, LABEL_WIDTH) for label, _ in pairs])  # long labels wrap, not overlap
    for xi, t, top in zip(x, medians, medians + above):  # the median's value above its whisker, clear of it
        ax.annotate(format_ns(t * scale), (xi, top), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize="small")
    if isinstance(data, Comparison) and data.rooflines:
        _roofline_marks(ax, data, scale)
    ax.set_ylabel(f"time per call ({unit})")
    ax.margins(y=0.12)  # room above the tallest whisker for its bar's value
    ax.set_title(title if title is not None else "median time per call, whiskers: IQR")
    return fig


def _roofline_marks(ax: Any, comparison: Comparison, scale: float) -> None:
    """Across each entry's bar, a dashed line at the time its roofline allows (bytes moved / bandwidth): one
    colour and one legend entry per distinct roofline (a serial and an OpenMP entry are held to different ones)."""
    groups: dict[Any, list[int]] = {}
    for i, row in enumerate(comparison.rows):
        line = comparison.rooflines.get(row.label)
        if line is not None and line.gbps > 0:
            groups.setdefault(line, []).append(i)
    for k, (line, xs) in enumerate(groups.items()):
        floor_ns = comparison.bytes_moved / line.gbps
        x = np.asarray(xs, float)
        ax.hlines(np.full(x.size, floor_ns / scale), x - 0.45, x + 0.45, linestyles="--",
                  colors="gray" if k == 0 else f"C{k + 1}",
                  label=f"{roofline_label(line.source, line.gbps, line.note)} = {format_ns(floor_ns)}")
    if groups:
        ax.legend(fontsize="small")


def scaling(sweep: Sweep, ax: Any = None):
    """Log-log time per call against bytes moved, with the memory roofline (time = bytes / bandwidth), and the
    achieved GB/s against bytes with the bandwidth as a horizontal line.

    ``ax=None`` makes a figure with the two side by side; ``ax`` may be one axes (GB/s goes on a twin) or a pair.
    """
    if not isinstance(sweep, Sweep) or not sweep.points:
        raise ArgumentTypeError(
            f"plots.scaling needs the Sweep that aotbench.sweep returns, got {type(sweep).__name__}")
    twin = False
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 4.0), layout="constrained")
        time_ax, rate_ax = fig.subplots(1, 2)
    elif isinstance(ax, (tuple, list)) and len(ax) == 2:
        time_ax, rate_ax = ax
        fig = time_ax.figure
    else:
        fig, time_ax, rate_ax, twin = ax.figure, ax, ax.twinx(), True
    _time_panel(time_ax, sweep)
    _rate_panel(rate_ax, sweep, twin)
    return fig


def _series(sweep: Sweep) -> dict[str, tuple[np.ndarray, list[Timing]]]:
    """label -> (bytes, timings) for the op and, where measured, the reference."""
    series = {sweep.label or "op": (np.array([p.bytes_moved for p in sweep.points], float),
                                    [p.timing for p in sweep.points])}
    ref = [p for p in sweep.points if p.reference_timing is not None]
    if ref:
        series["reference"] = (np.array([p.bytes_moved for p in ref], float), [p.reference_timing for p in ref])
    return series


def roofline_label(source: str, gbps: float, note: str = "") -> str:
    """A roofline's legend entry: ``roofline: numpy copy on 2 threads, 46.3 GB/s`` (flagged when its
    measurement is in doubt: the note itself is in the table's caption)."""
    doubt = " (measured while the cores were busy)" if note else ""
    return f"roofline: {source}, {gbps:.1f} GB/s{doubt}"


def _roofline_label(sweep: Sweep) -> str:
    return roofline_label(sweep.roofline_source, sweep.bandwidth_gbps, sweep.roofline_note)


def _time_panel(ax: Any, sweep: Sweep) -> None:
    series = _series(sweep)
    unit, scale = time_unit(max(t.median_ns for _, ts in series.values() for t in ts))
    for i, (label, (nbytes, ts)) in enumerate(series.items()):
        ax.plot(nbytes, [t.median_ns / scale for t in ts], "o-", color=f"C{i}", label=label)
    if sweep.bandwidth_gbps:
        span = np.geomspace(min(p.bytes_moved for p in sweep.points), max(p.bytes_moved for p in sweep.points), 50)
        ax.plot(span, span / sweep.bandwidth_gbps / scale, "--", color="gray", label=_roofline_label(sweep))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes moved per call")
    ax.set_ylabel(f"time per call ({unit})")
    ax.set_title(f"{sweep.label or 'op'}: time per call")
    ax.legend()


def _rate_panel(ax: Any, sweep: Sweep, twin: bool = False) -> None:
    for i, (label, (nbytes, ts)) in enumerate(_series(sweep).items()):
        rates = [n / t.median_ns for n, t in zip(nbytes, ts)]
        ax.plot(nbytes, rates, "s:" if twin else "o-", color=f"C{i}", label=f"{label} GB/s")
    if sweep.bandwidth_gbps:
        ax.axhline(sweep.bandwidth_gbps, linestyle="--", color="gray", label=_roofline_label(sweep))
    ax.set_xscale("log")
    ax.set_xlabel("bytes moved per call")
    ax.set_ylabel("achieved GB/s")
    if not twin:
        ax.set_title(f"{sweep.label or 'op'}: throughput")
    ax.legend(loc="lower right" if twin else "best")


def _real_pair(output: Any, reference: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    out, ref = np.asarray(output), np.asarray(reference)
    if out.shape != ref.shape:
        raise ArgumentValueError(f"plots.{name}: output has shape {out.shape} but reference {ref.shape}; compare "
                                 "arrays of the same shape (one output at a time)")
    if out.dtype.kind not in "biuf" or ref.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"plots.{name} draws real numbers, got {out.dtype} and {ref.dtype}")
    return out.astype(np.float64), ref.astype(np.float64)


def _subsample(n: int, keep: int, limit: int = MAX_SCATTER_POINTS) -> np.ndarray:
    """At most ``limit`` evenly spaced indices of ``range(n)``, always including ``keep``."""
    if n <= limit:
        return np.arange(n)
    return np.union1d(np.linspace(0, n - 1, limit - 1).astype(np.int64), [keep])


def output_vs_reference(output: Any, reference: Any, ax: Any = None):
    """A scatter of output against reference values (flattened, at most ~2000 points including the worst one)
    with the line y = x, titled with the max abs error."""
    out, ref = _real_pair(output, reference, "output_vs_reference")
    out, ref = out.ravel(), ref.ravel()
    err = max_errors(out, ref)
    with np.errstate(invalid="ignore"):
        gap = np.where(np.isnan(out) != np.isnan(ref), np.inf, np.abs(out - ref))
    keep = int(np.nanargmax(gap)) if out.size and not np.all(np.isnan(gap)) else 0
    idx = _subsample(out.size, keep)
    fig, ax = _figure_and_axes(ax, (4.8, 4.4))
    ax.scatter(ref[idx], out[idx], s=8, alpha=0.6, label="elements")
    finite = np.concatenate([ref[np.isfinite(ref)], out[np.isfinite(out)]])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    ax.plot([lo, hi], [lo, hi], "-", color="gray", linewidth=1, label="y = x")
    ax.set_xlabel("reference")
    ax.set_ylabel("output")
    shown = f" ({idx.size} of {out.size} points)" if idx.size < out.size else ""
    ax.set_title(f"max abs error {err.max_abs:.3g}{shown}")
    ax.legend(loc="upper left")
    return fig


def error_heatmap(output: Any, reference: Any, ax: Any = None):
    """An image of ``|output - reference|`` for 2-D arrays, with a colorbar, titled with the max; elements where
    only one side is NaN are infinite errors, left blank and counted in the title."""
    out, ref = _real_pair(output, reference, "error_heatmap")
    if out.ndim != 2:
        raise ArgumentValueError(f"plots.error_heatmap needs 2-D arrays, got shape {out.shape}: use "
                                 "plots.output_vs_reference for other shapes, or reshape to 2-D")
    err = max_errors(out, ref)
    with np.errstate(invalid="ignore"):
        both_nan = np.isnan(out) & np.isnan(ref)
        diff = np.where(out == ref, 0.0, np.abs(out - ref))
        diff = np.where(both_nan, 0.0, np.where(np.isnan(diff), np.inf, diff))
    fig, ax = _figure_and_axes(ax, (6.0, 4.8))
    image = ax.imshow(np.ma.masked_invalid(diff), aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(image, ax=ax, label="|output - reference|")
    index_ticks(ax, *diff.shape)
    infinite = int(np.count_nonzero(~np.isfinite(diff)))
    blank = f", {infinite} NaN/inf left blank" if infinite else ""
    ax.set_title(f"max |output - reference| = {err.max_abs:.3g}{blank}")
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    return fig


def index_ticks(ax: Any, rows: int, cols: int, most: int = MAX_INDEX_TICKS) -> None:
    """Ticks on an image of a ``rows`` x ``cols`` array at whole row and column indices only, labelled with
    them (matplotlib's own ticks put -0.4 ... 0.4 beside a single row): every 1, 2, 5, 10, 20 ... indices, the
    smallest step that gives at most ``most`` ticks."""
    for axis, n in ((ax.yaxis, rows), (ax.xaxis, cols)):
        step = 1
        while -(-n // step) > most:
            step = next(s * 10 ** k for k in range(20) for s in (1, 2, 5) if s * 10 ** k > step)
        ticks = list(range(0, max(n, 1), step))
        axis.set_ticks(ticks, [str(t) for t in ticks])


def values(output: Any, ax: Any = None):
    """The output alone, when there is no reference: an image with a colorbar for a 2-D array, else the values
    against their flat index (at most ~2000 points, including the largest in magnitude); NaN/inf are counted."""
    out = np.asarray(output)
    if out.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"plots.values draws real numbers, got {out.dtype}")
    data = out.astype(np.float64)
    fig, ax = _figure_and_axes(ax, (6.0, 4.4))
    finite = np.isfinite(data)
    if data.ndim == 2:
        image = ax.imshow(np.ma.masked_invalid(data), aspect="auto", interpolation="nearest", cmap="viridis")
        fig.colorbar(image, ax=ax, label="value")
        index_ticks(ax, *data.shape)
        ax.set_xlabel("column")
        ax.set_ylabel("row")
    else:
        flat = data.ravel()
        keep = int(np.argmax(np.where(np.isfinite(flat), np.abs(flat), -1.0))) if flat.size else 0
        idx = _subsample(flat.size, keep)
        ax.plot(idx, flat[idx], ".", markersize=3, label="output")
        ax.set_xlabel("flat index")
        ax.set_ylabel("value")
    bad = int(data.size - np.count_nonzero(finite))
    span = f", min {data[finite].min():.3g}, max {data[finite].max():.3g}" if finite.any() else ""
    ax.set_title(f"output {out.shape}{span}" + (f", {bad} NaN/inf" if bad else ""))
    return fig


def to_png(fig: Any, dpi: int = 100) -> bytes:
    """The figure rendered to PNG bytes by the Agg canvas (no pyplot, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    canvas.print_figure(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


__all__ = ["error_heatmap", "fixed_figure", "index_ticks", "output_vs_reference", "roofline_label", "scaling",
           "time_unit", "timings", "to_png", "values"]
