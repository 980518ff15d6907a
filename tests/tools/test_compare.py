"""compare, compare_flags and sweep: real kernels, fresh random inputs, tiny budgets (the memory bandwidth itself:
test_bandwidth.py)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import aotbench
from aotbench.tools import bandwidth
from aotbench.errors import ArgumentError, CompileError
from aotbench.tools import accuracy, comparison, sweeping

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"
BUDGET_MS = 4.0
ROWS, COLS = 64, 96


# Module level so that ops and references pickle by reference into a worker process.
def same_shape_as_x(x, y):
    """out_shape rule of the axpy kernel: the output has x's shape."""
    return x


def axpy_reference(x, y):
    return np.float32(2.5) * x + y


def add_reduce_reference(x, y):
    return (x.astype(np.float64) + y).sum(axis=1)


def matrix_inputs(size, rng):
    """Two float32 matrices of shape ``size`` for add_reduce."""
    return tuple(rng.standard_normal(size, dtype=np.float32) for _ in range(2))


def artifact_in_worker(op):
    """Runs in a worker: what the unpickled op was built from."""
    return os.getpid(), str(op.artifact.path), op.artifact.cache_hit


@pytest.fixture(scope="module")
def add_reduce():
    return aotbench.Custom(str(aotbench.examples_dir() / "add_reduce.cc") + ":CustomKernel", None, np.float32,
                           attrs={"axis": 1, "keep_dim": False})


@pytest.fixture(scope="module")
def axpy():
    return aotbench.Custom(f"{KERNELS / 'hot_axpy.cc'}:Axpy", same_shape_as_x, None, attrs={"a": 2.5})


@pytest.fixture
def matrices(rng):
    return matrix_inputs((ROWS, COLS), rng)


# --- compare ---------------------------------------------------------------------------------------------------
def test_compare_reports_errors_speedups_and_throughput(add_reduce, matrices):
    """A deliberately wrong entry shows its error; speed-ups and GB/s follow from the medians and the bytes."""
    x, y = matrices
    result = comparison.compare({"op": add_reduce, "numpy": add_reduce_reference,
                          "numpy + 1e-3": lambda a, b: add_reduce_reference(a, b) + 1e-3}, x, y, budget_ms=BUDGET_MS)
    assert [r.label for r in result.rows] == ["op", "numpy", "numpy + 1e-3"]
    assert list(result.timings) == ["op", "numpy", "numpy + 1e-3"]
    first, numpy_row, wrong = result.rows
    assert (first.max_abs_error, first.max_rel_error, first.speedup) == (0.0, 0.0, 1.0)
    assert numpy_row.max_abs_error < 1e-4 and numpy_row.mismatch is None
    assert wrong.max_abs_error == pytest.approx(1e-3, abs=1e-4)
    assert result.bytes_moved == x.nbytes + y.nbytes + ROWS * 4 and result.bytes_automatic
    for row in result.rows:
        assert row.timing.label == row.label and row.timing.count >= 10  # two rounds of at least 5 samples
        assert row.speedup == pytest.approx(first.timing.median_ns / row.timing.median_ns)
        assert row.gbps == pytest.approx(result.bytes_moved / row.timing.median_ns)
    text = str(result)
    assert all(label in text for label in result.timings) and "(baseline)" in text


def test_compare_flags_nan_and_shape_mismatch_without_crashing(add_reduce, matrices):
    """NaN where the first has a number is an infinite error (counted); a wrong shape is a sentence, not a crash."""
    x, y = matrices

    def half_nan(a, b):
        out = add_reduce_reference(a, b).astype(np.float32)
        out[::2] = np.nan
        return out

    result = comparison.compare({"op": add_reduce, "nan": half_nan, "columns": lambda a, b: (a + b).sum(axis=0)}, x, y,
                         budget_ms=BUDGET_MS)
    _, nan_row, shape_row = result.rows
    assert nan_row.max_abs_error == np.inf and nan_row.max_rel_error == np.inf
    assert nan_row.nonfinite == ROWS // 2 and "NaN" in nan_row.error_text()
    assert shape_row.mismatch and f"({COLS},)" in shape_row.mismatch and f"({ROWS},)" in shape_row.mismatch
    assert np.isnan(shape_row.max_abs_error) and shape_row.mismatch in str(result)


def test_compare_tuple_outputs_and_bytes_override(rng):
    """Several outputs are compared one by one; ``bytes_moved`` replaces the automatic count."""
    x = rng.standard_normal(500)
    exact = lambda a: (a + 1.0, a * 2.0)
    off = lambda a: (a + 1.0, a * 2.0 + 0.5)
    result = comparison.compare({"exact": exact, "off": off, "one": lambda a: a + 1.0}, x, budget_ms=BUDGET_MS,
                         bytes_moved=1e6)
    assert result.rows[1].max_abs_error == pytest.approx(0.5)
    assert "1 output(s)" in result.rows[2].mismatch
    assert result.bytes_moved == 10**6 and not result.bytes_automatic
    assert result.rows[1].gbps == pytest.approx(1e6 / result.rows[1].timing.median_ns)
    automatic = comparison.compare({"exact": exact}, x, budget_ms=BUDGET_MS)
    assert automatic.bytes_moved == 3 * x.nbytes


def test_compare_html_lists_every_label_escaped(rng):
    x = rng.standard_normal(64).astype(np.float32)
    result = comparison.compare({"plain": np.sort, "<b>bold</b> & co": lambda a: np.sort(a)[::-1]}, x, budget_ms=BUDGET_MS)
    page = result._repr_html_()
    assert "plain" in page and "&lt;b&gt;bold&lt;/b&gt; &amp; co" in page and "<b>bold" not in page
    for column in ("median", "IQR", "speed-up", "GB/s", "error"):
        assert column in page


def test_max_errors_is_nan_aware():
    ref = np.array([1.0, np.nan, np.inf, 0.0, 4.0])
    assert accuracy.max_errors(ref.copy(), ref) == accuracy.Errors(0.0, 0.0, 0)
    out = np.array([1.5, np.nan, np.inf, 0.0, 4.0])
    assert accuracy.max_errors(out, ref) == accuracy.Errors(0.5, 0.5, 0)
    err = accuracy.max_errors(np.array([np.nan, 1.0, np.inf, 0.0, 4.0]), ref)
    assert (err.max_abs, err.nonfinite) == (np.inf, 1)  # NaN where ref is 1.0, and 1.0 where ref is NaN
    assert accuracy.max_errors(np.array([0.0, 0.0, 1.0]), np.zeros(3)).max_rel == np.inf
    assert "shape" in accuracy.max_errors(np.zeros(3), np.zeros((3, 1))).mismatch


@pytest.mark.parametrize("fns, options", [({}, {}), ({"x": 3}, {}), ({1: np.sort}, {}),
                                          ({"x": np.sort}, {"budget_ms": 0}),
                                          ({"x": np.sort}, {"bytes_moved": -1})])
def test_compare_rejects_bad_arguments(fns, options, rng):
    with pytest.raises(ArgumentError):
        comparison.compare(fns, rng.standard_normal(8), **options)


# --- compare_flags -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_compare_flags_builds_each_flag_set_and_agrees(add_reduce, matrices):
    x, y = matrices
    result = comparison.compare_flags(add_reduce, x, y, budget_ms=BUDGET_MS, reference=add_reduce_reference)
    labels = ["documented (-O0)", "-O2", "-O3 -march=native", "reference"]
    assert [r.label for r in result.rows] == labels
    builds = [result.fns[label] for label in labels[:3]]
    assert len({b.artifact.path for b in builds}) == 3
    documented, o2, o3 = (b.command for b in builds)
    assert not any(f.startswith("-O") for f in documented)
    assert "-O2" in o2 and {"-O3", "-march=native"} <= set(o3) and "-O2" not in o3
    assert result.fns["reference"] is add_reduce_reference
    for row in result.rows[1:]:
        assert row.max_abs_error < 1e-3, row
    expected = add_reduce_reference(x, y)
    for build in builds:
        np.testing.assert_allclose(build(x, y), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_compare_flags_sets_replace_the_op_flags(matrices):
    op = aotbench.Custom(str(aotbench.examples_dir() / "add_reduce.cc") + ":CustomKernel", None, np.float32,
                         attrs={"axis": 1, "keep_dim": False}, flags=["-O1"])
    result = comparison.compare_flags(op, *matrices, flag_sets={"plain": [], "O2 as a string": "-O2 -DAOTBENCH_UNUSED=1"},
                               budget_ms=BUDGET_MS)
    plain, o2 = result.fns["plain"].command, result.fns["O2 as a string"].command
    assert "-O1" not in plain and "-O1" not in o2
    assert {"-O2", "-DAOTBENCH_UNUSED=1"} <= set(o2)


def test_compare_flags_bad_flags_raise_the_compile_error(add_reduce, matrices):
    with pytest.raises(CompileError) as info:
        comparison.compare_flags(add_reduce, *matrices, flag_sets={"bad": ["-fno-such-option-aotbench"]},
                          budget_ms=BUDGET_MS)
    assert "-fno-such-option-aotbench" in info.value.argv


def test_compare_flags_rejects_what_it_cannot_rebuild(add_reduce, matrices):
    with pytest.raises(ArgumentError, match="built from a source"):
        comparison.compare_flags(add_reduce_reference, *matrices)
    with pytest.raises(ArgumentError, match="reference"):
        comparison.compare_flags(add_reduce, *matrices, flag_sets={"reference": []}, reference=add_reduce_reference)
    with pytest.raises(ArgumentError, match="flag_sets"):
        comparison.compare_flags(add_reduce, *matrices, flag_sets={})


# --- sweep -----------------------------------------------------------------------------------------------------
SIZES = [300, 4000, (20, 30)]


def _check_axpy_points(result, sizes):
    assert [p.size for p in result.points] == sizes
    for point, size in zip(result.points, sizes):
        shape = (size,) if isinstance(size, int) else size
        assert point.shapes == (shape, shape)
        assert point.bytes_moved == 3 * 4 * int(np.prod(shape))  # x and y read, the output written, float32
        assert point.gbps == pytest.approx(point.bytes_moved / point.timing.median_ns)
        assert point.reference_timing is not None and point.reference_timing.label == "reference"
        assert point.max_abs_error is not None and point.max_abs_error < 1e-5
    assert result.label == "Axpy" and result.bandwidth_gbps > 0


@pytest.mark.slow
def test_sweep_in_process(axpy):
    result = sweeping.sweep(axpy, SIZES, reference=axpy_reference, budget_ms=BUDGET_MS, seed=7)
    _check_axpy_points(result, SIZES)
    text, page = str(result), result._repr_html_()
    assert "20x30" in text and "20x30" in page and "max abs error" in text


def test_sweep_custom_inputs_and_registration_arity(add_reduce):
    """``inputs(size, rng)`` builds the arrays; the default inputs count the registration's inputs."""
    result = sweeping.sweep(add_reduce, [(8, 16), (32, 16)], inputs=matrix_inputs, reference=add_reduce_reference,
                       budget_ms=BUDGET_MS)
    assert [p.bytes_moved for p in result.points] == [2 * 8 * 16 * 4 + 8 * 4, 2 * 32 * 16 * 4 + 32 * 4]
    assert all(p.max_abs_error < 1e-4 for p in result.points)
    reg = (aotbench.CustomRegOp("axpy").input(0, "x").input(0, "y").output(0, "out")
           .dtype_format(aotbench.DataType.None_None, aotbench.DataType.None_None, aotbench.DataType.None_None)
           .target("CPU").get_op_info())
    registered = aotbench.Custom(f"{KERNELS / 'hot_axpy.cc'}:Axpy", same_shape_as_x, None, reg_info=reg,
                                 attrs={"a": 2.5})
    points = sweeping.sweep(registered, [100], budget_ms=BUDGET_MS).points
    assert points[0].shapes == ((100,), (100,)) and points[0].reference_timing is None


def test_sweep_with_a_thread_pool_keeps_size_order(axpy):
    sizes = [5000, 100, 2000, 700]
    with ThreadPoolExecutor(max_workers=2) as pool:
        result = sweeping.sweep(axpy, sizes, reference=axpy_reference, executor=pool, budget_ms=BUDGET_MS)
    _check_axpy_points(result, sizes)


def test_sweep_with_a_process_pool_rebuilds_the_op_from_the_cache(axpy, session_cache):
    """The op travels pickled (its recipe); the worker inherits AOTBENCH_CACHE_DIR and loads the cached build."""
    assert os.environ["AOTBENCH_CACHE_DIR"] == str(session_cache)
    with ProcessPoolExecutor(max_workers=1) as pool:
        pid, path, hit = pool.submit(artifact_in_worker, axpy).result()
        result = sweeping.sweep(axpy, SIZES, reference=axpy_reference, executor=pool, budget_ms=BUDGET_MS, seed=3)
    assert pid != os.getpid() and path == str(axpy.artifact.path) and hit
    _check_axpy_points(result, SIZES)


class FakeBar:
    """Stands in for tqdm: records the bars made and their updates."""

    made: ClassVar[list[FakeBar]] = []

    def __init__(self, total, **options):
        self.total, self.updates, self.closed = total, 0, False
        FakeBar.made.append(self)

    def update(self, n):
        self.updates += n

    def close(self):
        self.closed = True


@pytest.mark.parametrize("count, progress, expect_bar", [(8, None, True), (3, None, False), (8, False, False),
                                                          (2, True, True)])
def test_sweep_progress_bar(axpy, monkeypatch, count, progress, expect_bar):
    tqdm_auto = pytest.importorskip("tqdm.auto")
    monkeypatch.setattr(tqdm_auto, "tqdm", FakeBar)
    FakeBar.made.clear()
    sweeping.sweep(axpy, [64 * (i + 1) for i in range(count)], reference=axpy_reference, budget_ms=1.0,
              progress=progress)
    if expect_bar:
        [bar] = FakeBar.made
        assert (bar.total, bar.updates, bar.closed) == (count, count, True)
    else:
        assert FakeBar.made == []


@pytest.mark.parametrize("sizes", [[], [0], [(4, 0)], "100", [2.5], None])
def test_sweep_rejects_bad_sizes(axpy, sizes):
    with pytest.raises(ArgumentError):
        sweeping.sweep(axpy, sizes, reference=axpy_reference, budget_ms=BUDGET_MS)


def test_sweep_needs_to_know_the_input_count(axpy):
    with pytest.raises(ArgumentError, match="how many inputs"):
        sweeping.sweep(axpy, [10], budget_ms=BUDGET_MS)
    with pytest.raises(ArgumentError, match="how many inputs"):
        sweeping.sweep(axpy, [10], reference=lambda *arrays: arrays[0], budget_ms=BUDGET_MS)

    def scaled(x, y, a=2.5):  # a parameter with a default is not an input
        return np.float32(a) * x + y

    [point] = sweeping.sweep(axpy, [10], reference=scaled, budget_ms=BUDGET_MS).points
    assert point.shapes == ((10,), (10,)) and point.max_abs_error < 1e-5
    with pytest.raises(ArgumentError, match="progress"):
        sweeping.sweep(axpy, [10], reference=axpy_reference, progress="yes")
    with pytest.raises(ArgumentError, match="executor"):
        sweeping.sweep(axpy, [10], reference=axpy_reference, executor=object(), budget_ms=BUDGET_MS)


def test_results_repr_as_their_tables_and_sweeps_take_a_label(axpy):
    result = sweeping.sweep(axpy, [8, 16], reference=axpy_reference, budget_ms=BUDGET_MS, label="my axpy")
    assert result.label == "my axpy" and repr(result) == str(result)
    assert "sweep of my axpy" in repr(result) and "samples_ns" not in repr(result)
    with pytest.raises(ArgumentError, match="label"):
        sweeping.sweep(axpy, [8], reference=axpy_reference, budget_ms=BUDGET_MS, label=3)
    x = np.random.default_rng().standard_normal(64)
    cmp = comparison.compare({"sort": np.sort, "again": np.sort}, x, budget_ms=BUDGET_MS)
    assert repr(cmp) == str(cmp) and "again" in repr(cmp) and "samples_ns" not in repr(cmp)


# --- the roofline each entry is held to -------------------------------------------------------------------------
def fake_records(refresh=False, cache_dir=None, nbytes=None, threads=1):
    """Stands in for bandwidth.bandwidth_record: 10 GB/s per copying thread, measured on idle cores."""
    return {"gbps": 10.0 * threads, "threads": threads, "cpu_share": 1.0}


def test_compare_holds_each_entry_to_the_copy_on_its_own_threads(rng, monkeypatch):
    """A serial entry, an entry on three threads and a Python callable: the table gives each its threads and its
    share of its own roofline, and the caption names both rooflines and whose each is."""
    from aotbench.run.threads import ThreadUse
    from aotbench.tools import timing

    monkeypatch.setattr(bandwidth, "bandwidth_record", fake_records)
    monkeypatch.setattr(bandwidth, "usable_cores", lambda: 4)

    def serial(a):
        return a + 1

    def parallel(a):
        return a + 1

    uses = {serial: ThreadUse(1, "no OpenMP"), parallel: ThreadUse(3, "OMP_NUM_THREADS=3")}
    monkeypatch.setattr(timing, "callable_thread_use", lambda fn: uses.get(fn))
    x = rng.standard_normal(int(rng.integers(1000, 4000))).astype(np.float32)
    result = comparison.compare({"serial": serial, "parallel": parallel, "numpy": lambda a: a + 1}, x,
                                budget_ms=BUDGET_MS)
    assert [r.timing.threads for r in result.rows] == [1, 3, None]
    lines = result.rooflines
    assert [(lines[k].threads, lines[k].gbps) for k in ("serial", "parallel", "numpy")] == [(1, 10.0), (3, 30.0),
                                                                                              (1, 10.0)]
    header, body = result._table()
    share, threads_column = header.index("of roofline"), header.index("threads")
    for row, cells in zip(result.rows, body):
        line = lines[row.label]
        assert cells[share] == f"{100 * row.gbps / line.gbps:.0f}% of the {line.threads}-thread copy"
    assert [cells[threads_column] for cells in body] == ["1", "3", "?"]
    text = str(result)
    assert ("rooflines: numpy copy on 1 thread, 10.0 GB/s (serial, numpy); numpy copy on 3 threads, 30.0 GB/s "
            "(parallel)") in text
    assert "threads: serial: 1 thread (no OpenMP); parallel: 3 threads (OMP_NUM_THREADS=3)" in text
    assert "threads ?: numpy" in text and "held to the 1-thread copy" in text
    assert "OMP_NUM_THREADS=3" in result._repr_html_() and "of roofline" in result._repr_html_()

    one = comparison.compare({"serial": serial, "again": serial}, x, budget_ms=BUDGET_MS)
    assert "; roofline: numpy copy on 1 thread, 10.0 GB/s" in str(one)
    share = one._table()[0].index("of roofline")
    assert all(cells[share].endswith("%") for cells in one._table()[1])
    bare = comparison.compare({"serial": serial, "parallel": parallel}, x, budget_ms=BUDGET_MS, roofline=False)
    assert not bare.rooflines and "roofline" not in str(bare) and "threads" in str(bare)


PARALLEL_AXPY = r"""
#include <cstdint>
extern "C" int Axpy(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
                    void *extra) {
  int64_t n = 1;
  for (int d = 0; d < ndims[0]; d++) n *= shapes[0][d];
  const float *x = static_cast<const float *>(params[0]), *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = 2.5f * x[i] + y[i];
  return 0;
}
"""


def test_an_openmp_kernel_is_held_to_the_copy_on_its_threads_in_compare_and_sweep(axpy, rng, tmp_path,
                                                                                  monkeypatch):
    from aotbench.run import threads

    monkeypatch.setattr(bandwidth, "bandwidth_record", fake_records)
    source = tmp_path / "parallel_axpy.cc"
    source.write_text(PARALLEL_AXPY)
    parallel = aotbench.Custom(f"{source}:Axpy", same_shape_as_x, None, flags=["-O2", "-fopenmp"])
    used = threads.kernel_threads(parallel)
    copy = min(used, threads.usable_cores())
    x, y = rng.standard_normal((2, int(rng.integers(500, 3000)))).astype(np.float32)
    result = comparison.compare({"serial": axpy, "parallel": parallel}, x, y, budget_ms=BUDGET_MS)
    assert result.rows[1].max_abs_error < 1e-5
    assert [r.timing.threads for r in result.rows] == [1, used]
    assert result.rooflines["serial"].threads == 1 and result.rooflines["parallel"].threads == copy
    assert result.rooflines["parallel"].gbps == 10.0 * copy

    swept = sweeping.sweep(parallel, [64, 4096], reference=axpy_reference, budget_ms=BUDGET_MS)
    assert swept.threads == used and swept.bandwidth_gbps == 10.0 * copy
    assert swept.roofline_source == f"numpy copy on {copy} thread{'' if copy == 1 else 's'}"
    assert f"the op ran on {used} thread" in str(swept) and f"roofline: {swept.roofline_source}, " in str(swept)
    serial = sweeping.sweep(axpy, [64], reference=axpy_reference, budget_ms=BUDGET_MS)
    assert serial.threads == 1 and serial.roofline_source == "numpy copy on 1 thread"
    plain = sweeping.sweep(axpy_reference, [64], reference=axpy_reference, budget_ms=BUDGET_MS)
    assert plain.threads is None and plain.roofline_source == "numpy copy on 1 thread"
    assert "the op ran on" not in str(plain)
