"""The plots: assertions on the artists (bars, whiskers, lines, labels, legends, image data), never on pixels."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure

import aotbench
from aotbench import plots
from aotbench.tools.timing import Timing
from aotbench.errors import ArgumentError
from aotbench.tools import comparison, sweeping, timing

ROOT = Path(__file__).resolve().parents[2]


def _timing(rng, center_ns, spread_ns, label="", count=41):
    return Timing(tuple(rng.uniform(center_ns - spread_ns, center_ns + spread_ns, count)), label=label)


def _legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _lines_by_label(ax):
    return {line.get_label(): line for line in ax.get_lines()}


# --- timings ---------------------------------------------------------------------------------------------------
def test_timings_bars_are_medians_with_iqr_whiskers(rng):
    data = {"fast": _timing(rng, 3_000, 500), "slow": _timing(rng, 40_000, 8_000), "mid": _timing(rng, 9_000, 100)}
    fig = plots.timings(data, title="three")
    assert isinstance(fig, Figure)
    [ax] = fig.axes
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    [whiskers] = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    medians_us = [t.median_ns / 1e3 for t in data.values()]
    np.testing.assert_allclose([b.get_height() for b in bars], medians_us)
    segments = whiskers.lines[2][0].get_segments()
    for seg, t, x in zip(segments, data.values(), range(3)):
        np.testing.assert_allclose(seg, [[x, t.q1_ns / 1e3], [x, t.q3_ns / 1e3]])
    assert [t.get_text() for t in ax.get_xticklabels()] == list(data)
    assert ax.get_ylabel() == "time per call (us)" and ax.get_title() == "three"


def test_timings_bar_values_sit_above_their_whiskers(rng):
    """Each bar's value is drawn clear of its whisker (above the q3 end, not across the IQR line) and inside the
    axes, read from the laid-out text extents of the real figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    data = {f"#{i}": _timing(rng, float(c), float(c) * float(rng.uniform(0.1, 0.6)), count=9)
            for i, c in enumerate(rng.uniform(1_000, 50_000, size=4))}
    fig = plots.timings(data)
    [ax] = fig.axes
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    [whiskers] = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    labels = [t for t in ax.texts if t.get_text()]
    assert [t.get_text() for t in labels] == [timing.format_ns(t.median_ns) for t in data.values()]
    box = ax.get_window_extent(renderer)
    for text, seg in zip(labels, whiskers.lines[2][0].get_segments()):
        top = ax.transData.transform((seg[1][0], seg[1][1]))[1]  # the whisker's upper end, in display units
        extent = text.get_window_extent(renderer)
        assert extent.y0 >= top, (text.get_text(), extent.y0, top)
        assert extent.y1 <= box.y1, text.get_text()


def test_heatmaps_tick_whole_row_and_column_indices_only(rng):
    """A 1 x n image has one row tick, 0 (not -0.4 ... 0.4); every tick label is a whole index inside the
    array, read from the drawn figure's tick labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    cols = int(rng.integers(20, 60))
    ref = rng.standard_normal((1, cols))
    for fig in (plots.error_heatmap(ref + 0.01, ref), plots.values(ref)):
        ax = fig.axes[0]
        FigureCanvasAgg(fig).draw()
        assert [t.get_text() for t in ax.get_yticklabels()] == ["0"]
        shown = [int(t.get_text()) for t in ax.get_xticklabels()]
        assert shown[0] == 0 and shown[-1] < cols and 2 <= len(shown) <= plots.MAX_INDEX_TICKS
        assert len({b - a for a, b in zip(shown, shown[1:])}) == 1  # evenly spaced
    rows = int(rng.integers(2, 9))
    ax = plots.error_heatmap(np.zeros((rows, 3)), np.ones((rows, 3))).axes[0]
    FigureCanvasAgg(ax.figure).draw()
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(i) for i in range(rows)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]


@pytest.mark.parametrize("center_ns, unit, scale", [(300, "ns", 1), (4e6, "ms", 1e6), (3e9, "s", 1e9)])
def test_timings_picks_a_readable_unit(rng, center_ns, unit, scale):
    t = _timing(rng, center_ns, center_ns / 10, label="only")
    [ax] = plots.timings([t]).axes
    assert ax.get_ylabel() == f"time per call ({unit})"
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert bars[0].get_height() == pytest.approx(t.median_ns / scale)
    assert [x.get_text() for x in ax.get_xticklabels()] == ["only"]


def test_timings_of_a_real_comparison_on_given_axes(rng):
    """A Comparison plots one bar per row, in order, onto the axes it is given (and returns their figure)."""
    op = aotbench.Custom(str(aotbench.examples_dir() / "add_reduce.cc") + ":CustomKernel", None, np.float32,
                         attrs={"axis": 1, "keep_dim": False})
    x, y = rng.standard_normal((2, 32, 48), dtype=np.float32)
    result = comparison.compare({"op": op, "numpy": lambda a, b: (a + b).sum(1)}, x, y, budget_ms=4)
    fig = Figure()
    ax = fig.add_subplot()
    assert result.plot(ax=ax) is fig
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    _, scale = plots.time_unit(max(r.timing.median_ns for r in result.rows))
    np.testing.assert_allclose([b.get_height() for b in bars], [r.timing.median_ns / scale for r in result.rows])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["op", "numpy"]


def test_a_comparison_draws_each_entrys_roofline_across_its_bar(rng):
    """Serial entries and an OpenMP entry are held to different copies: one dashed line per bar at bytes /
    bandwidth, one legend entry per roofline, saying which copy it is."""
    from aotbench.tools.bandwidth import Roofline

    nbytes = int(rng.integers(1_000_000, 50_000_000))
    labels = ["serial", "parallel", "numpy"]
    rows = tuple(comparison.ComparisonRow(label, _timing(rng, center, center / 10, label), 1.0, nbytes / center, 0.0,
                                          0.0) for label, center in zip(labels, rng.uniform(1e5, 1e7, 3)))
    one, two = Roofline(24.0, "numpy copy on 1 thread", 1), Roofline(46.0, "numpy copy on 2 threads", 2)
    result = comparison.Comparison(rows, nbytes, rooflines={"serial": one, "parallel": two, "numpy": one})
    [ax] = plots.timings(result).axes
    _, scale = plots.time_unit(max(r.timing.median_ns for r in rows))
    marks = {c.get_label(): c for c in ax.collections if c.get_label().startswith("roofline")}
    assert set(marks) == {f"roofline: numpy copy on 1 thread, 24.0 GB/s = {timing.format_ns(nbytes / 24.0)}",
                          f"roofline: numpy copy on 2 threads, 46.0 GB/s = {timing.format_ns(nbytes / 46.0)}"}
    for label, (line, bars) in zip(sorted(marks), ((one, [0, 2]), (two, [1]))):
        segments = marks[label].get_segments()
        assert len(segments) == len(bars)
        for seg, x in zip(segments, bars):
            np.testing.assert_allclose(seg[:, 1], nbytes / line.gbps / scale)
            assert seg[0, 0] < x < seg[1, 0]
    assert set(marks) <= set(_legend_texts(ax))
    bare = comparison.Comparison(rows, nbytes)
    [ax] = plots.timings(bare).axes
    assert not [c for c in ax.collections if c.get_label().startswith("roofline")] and ax.get_legend() is None


def test_timings_refuses_what_it_cannot_draw(rng):
    sweep = sweeping.Sweep((_point(1000, rng),), 10.0, "op")
    with pytest.raises(ArgumentError, match="scaling"):
        plots.timings(sweep)
    for bad in ([], {"a": 3.0}, "text", 42):
        with pytest.raises(ArgumentError):
            plots.timings(bad)


# --- scaling ---------------------------------------------------------------------------------------------------
def _point(nbytes, rng, with_reference=True):
    ns = nbytes / 5.0  # 5 GB/s
    return sweeping.SweepPoint(size=nbytes // 12, shapes=((nbytes // 12,),) * 2, bytes_moved=nbytes,
                          timing=_timing(rng, ns, ns / 20), gbps=5.0,
                          reference_timing=_timing(rng, ns / 2, ns / 20, "reference") if with_reference else None,
                          max_abs_error=0.0 if with_reference else None)


def test_scaling_draws_roofline_points_and_throughput(rng):
    sweep = sweeping.Sweep(tuple(_point(n, rng) for n in (12_000, 120_000, 1_200_000, 12_000_000)), 20.0, "Axpy",
                           "numpy copy on 2 threads")
    fig = plots.scaling(sweep)
    time_ax, rate_ax = fig.axes
    assert (time_ax.get_xscale(), time_ax.get_yscale()) == ("log", "log")
    nbytes = [p.bytes_moved for p in sweep.points]
    unit, scale = plots.time_unit(max(p.timing.median_ns for p in sweep.points))
    assert time_ax.get_ylabel() == f"time per call ({unit})" and "bytes" in time_ax.get_xlabel()
    lines = _lines_by_label(time_ax)
    op_line, ref_line = lines["Axpy"], lines["reference"]
    np.testing.assert_allclose(op_line.get_xdata(), nbytes)
    np.testing.assert_allclose(op_line.get_ydata(), [p.timing.median_ns / scale for p in sweep.points])
    np.testing.assert_allclose(ref_line.get_ydata(), [p.reference_timing.median_ns / scale for p in sweep.points])
    [roof] = [line for label, line in lines.items() if "roofline" in label]
    assert roof.get_label() == "roofline: numpy copy on 2 threads, 20.0 GB/s"
    np.testing.assert_allclose(roof.get_ydata(), np.asarray(roof.get_xdata()) / 20.0 / scale)
    assert roof.get_xdata()[0] == pytest.approx(nbytes[0]) and roof.get_xdata()[-1] == pytest.approx(nbytes[-1])
    assert set(_legend_texts(time_ax)) == set(lines)

    rates = _lines_by_label(rate_ax)
    np.testing.assert_allclose(rates["Axpy GB/s"].get_ydata(),
                               [p.bytes_moved / p.timing.median_ns for p in sweep.points])
    assert "reference GB/s" in rates
    [ceiling] = [line for label, line in rates.items() if "numpy copy" in label]
    np.testing.assert_allclose(ceiling.get_ydata(), [20.0, 20.0])
    assert rate_ax.get_ylabel() == "achieved GB/s"
    assert "roofline: numpy copy on 2 threads, 20.0 GB/s" in _legend_texts(rate_ax)
    doubtful = plots.scaling(replace(sweep, roofline_note="measured while other processes held the cores"))
    assert "(measured while the cores were busy)" in _legend_texts(doubtful.axes[0])[-1]


def test_scaling_on_one_axes_uses_a_twin_and_skips_what_is_missing(rng):
    sweep = sweeping.Sweep(tuple(_point(n, rng, with_reference=False) for n in (1200, 12_000)), None, "op")
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.scaling(sweep, ax=ax) is fig
    assert len(fig.axes) == 2  # the axes given and its twin for GB/s
    assert list(_lines_by_label(ax)) == ["op"]  # no reference, no bandwidth: no roofline
    assert list(_lines_by_label(fig.axes[1])) == ["op GB/s"]
    with pytest.raises(ArgumentError):
        plots.scaling({"not": "a sweep"})


def test_scaling_of_a_real_sweep(rng):
    op = aotbench.Custom(f"{Path(__file__).parents[1] / 'support' / 'kernels' / 'hot_axpy.cc'}:Axpy", lambda x, y: x, None,
                         attrs={"a": 1.0})
    result = sweeping.sweep(op, [256, 4096], reference=np.add, budget_ms=2, seed=1)
    fig = result.plot()
    time_ax, rate_ax = fig.axes
    assert {"Axpy", "reference"} <= set(_lines_by_label(time_ax))
    assert any("numpy copy" in text for text in _legend_texts(rate_ax))


# --- outputs against a reference ------------------------------------------------------------------------------
def test_output_vs_reference_scatter_and_identity_line(rng):
    ref = rng.standard_normal(300)
    out = ref + rng.normal(0, 1e-3, 300)
    out[17] += 0.25
    [ax] = plots.output_vs_reference(out, ref).axes
    np.testing.assert_allclose(ax.collections[0].get_offsets(), np.column_stack([ref, out]))
    identity = _lines_by_label(ax)["y = x"]
    np.testing.assert_allclose(identity.get_xdata(), identity.get_ydata())
    assert f"{np.abs(out - ref).max():.3g}" in ax.get_title()
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("reference", "output")


def test_output_vs_reference_subsamples_keeping_the_worst_point(rng):
    ref = rng.standard_normal((100, 120))
    out = ref.copy()
    out[73, 41] += 2.0
    [ax] = plots.output_vs_reference(out, ref).axes
    offsets = ax.collections[0].get_offsets()
    assert len(offsets) <= plots.MAX_SCATTER_POINTS
    assert any(np.allclose(o, [ref[73, 41], out[73, 41]]) for o in offsets)
    assert "2" in ax.get_title() and "of 12000 points" in ax.get_title()


def test_output_vs_reference_nan_and_shape_errors(rng):
    ref = rng.standard_normal(50)
    out = ref.copy()
    out[3] = np.nan
    [ax] = plots.output_vs_reference(out, ref).axes
    assert "inf" in ax.get_title()
    with pytest.raises(ArgumentError, match="shape"):
        plots.output_vs_reference(ref, ref[:-1])


def test_error_heatmap_image_is_the_absolute_error(rng):
    ref = rng.standard_normal((12, 20)).astype(np.float32)
    out = ref + rng.normal(0, 1e-3, ref.shape).astype(np.float32)
    out[4, 5] = np.nan
    fig = plots.error_heatmap(out, ref)
    ax = fig.axes[0]
    assert len(fig.axes) == 2  # the heatmap and its colorbar
    image = ax.images[0].get_array()
    expected = np.abs(out.astype(np.float64) - ref)
    assert image.mask[4, 5] and image.mask.sum() == 1
    np.testing.assert_allclose(image.filled(0)[~image.mask], expected[~image.mask])
    assert "inf" in ax.get_title() and "1 NaN/inf" in ax.get_title()
    finite = plots.error_heatmap(ref + 0.5, ref).axes[0]
    assert "0.5" in finite.get_title()
    with pytest.raises(ArgumentError, match="2-D"):
        plots.error_heatmap(ref.ravel(), ref.ravel())


def test_values_without_a_reference(rng):
    vector = rng.standard_normal(5000)
    vector[10] = np.nan
    [ax] = plots.values(vector).axes
    [points] = ax.get_lines()
    idx = np.asarray(points.get_xdata()).astype(int)
    assert len(idx) <= plots.MAX_SCATTER_POINTS and int(np.nanargmax(np.abs(vector))) in idx
    np.testing.assert_array_equal(points.get_ydata(), vector[idx])
    assert "(5000,)" in ax.get_title() and "1 NaN/inf" in ax.get_title()
    matrix = rng.standard_normal((6, 9)).astype(np.float32)
    fig = plots.values(matrix)
    assert len(fig.axes) == 2
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), matrix)
    with pytest.raises(ArgumentError):
        plots.values(np.array(["a"]))


# --- rendering -------------------------------------------------------------------------------------------------
def test_to_png_renders_figures_from_threads(rng):
    def render(i):
        t = {f"#{i}": _timing(np.random.default_rng(i), 1000.0 * (i + 1), 50.0)}
        return plots.to_png(plots.timings(t))

    with ThreadPoolExecutor(max_workers=2) as pool:
        images = list(pool.map(render, range(4)))
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000 for png in images)


@pytest.mark.slow
def test_plots_never_import_pyplot():
    code = ("import sys, numpy as np; from aotbench import plots; from aotbench.tools.timing import Timing; "
            "fig = plots.timings([Timing((1.0, 2.0, 3.0), label='a')]); plots.to_png(fig); "
            "plots.error_heatmap(np.ones((3, 3)), np.eye(3)); "
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)
