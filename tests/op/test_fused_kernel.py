"""The fused Add+ReduceSum examples against numpy on fresh random inputs: ``examples/add_reduce_fast.cc`` (one
core, built with ``-O3 -march=native``) and ``examples/add_reduce_parallel.cc`` (OpenMP, the same flags plus
``-fopenmp``); both axes, keep_dim, shapes that leave tails of every length after the vector loops and the blocks
of rows, shapes large enough to be shared between threads, and the error codes for inputs they refuse.

(OpenMP kernels through the rest of aotbench, and the parallel example under OMP_NUM_THREADS=1 and 2:
tests/run/test_openmp.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aotbench

SRC = str(aotbench.examples_dir() / "add_reduce_fast.cc") + ":CustomKernel"
FLAGS = ["-O3", "-march=native"]
PARALLEL_SRC = str(aotbench.examples_dir() / "add_reduce_parallel.cc") + ":CustomKernel"
PARALLEL_FLAGS = FLAGS + ["-fopenmp"]
KERNELS = {"one-core": (SRC, FLAGS), "parallel": (PARALLEL_SRC, PARALLEL_FLAGS)}
# odd shapes, vector tails of every kind (32 floats a step), blocks of 4 rows with 0-3 rows left (axis=0)
SHAPES = [(1, 1), (1, 37), (41, 1), (3, 17), (129, 65), (2, 32), (5, 31), (7, 33), (300, 1000), (0, 5), (5, 0),
          (1, 4099), (3, 4100), (6, 4111), (4, 64), (8, 95)]
# large enough for the parallel example to share out (65536 elements a thread, 64 columns a strip for axis=0),
# with strips that end inside a vector step and rows left over after the blocks of 4
PARALLEL_SHAPES = [(1030, 131), (513, 257), (2, 70000), (70001, 3), (777, 1000)]


def fused(cache, axis, keep_dim, kernel="one-core") -> aotbench.Op:
    src, flags = KERNELS[kernel]
    return aotbench.Custom(src, None, np.float32, attrs={"axis": axis, "keep_dim": keep_dim}, flags=flags,
                           cache_dir=cache)


def expected(x1, x2, axis, keep_dim):
    """The exact sum (float64), so that only the kernel's own float32 rounding is measured."""
    return (x1.astype(np.float64) + x2).sum(axis, keepdims=keep_dim)


def assert_close(got, want, reduced):
    assert got.dtype == np.float32 and got.shape == want.shape
    # float32 sums of `reduced` terms: relative error for the large sums, an absolute bound for those near 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(reduced, 1))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("keep_dim", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_matches_numpy(session_cache, rng, shape, axis, keep_dim, kernel):
    op = fused(session_cache, axis, keep_dim, kernel)
    x1 = rng.standard_normal(shape, dtype=np.float32)
    x2 = rng.standard_normal(shape, dtype=np.float32)
    got = op(x1, x2)
    assert_close(got, expected(x1, x2, axis, keep_dim), shape[axis])
    assert_close(got, (x1 + x2).sum(axis, keepdims=keep_dim), shape[axis])  # and numpy's own float32 answer


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape", PARALLEL_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_parallel_matches_numpy_and_the_one_core_kernel(session_cache, rng, shape, axis):
    """Shared out between threads, every sum is still added in the one-core kernel's order: the same answer, bit
    for bit (as add_reduce_parallel.cc promises)."""
    x1 = rng.standard_normal(shape, dtype=np.float32)
    x2 = rng.standard_normal(shape, dtype=np.float32)
    got = fused(session_cache, axis, False, "parallel")(x1, x2)
    assert_close(got, expected(x1, x2, axis, False), shape[axis])
    np.testing.assert_array_equal(got, fused(session_cache, axis, False)(x1, x2))


@pytest.mark.parametrize("kernel", KERNELS)
def test_no_workspace_and_views(session_cache, rng, kernel):
    op = fused(session_cache, 1, False, kernel)
    x1 = rng.standard_normal((64, 80), dtype=np.float32)
    x2 = rng.standard_normal((80, 64), dtype=np.float32).T  # a Fortran-order view: converted before the call
    assert op.plan_info(x1, x2)["workspaces"] == []
    assert_close(op(x1, x2), expected(x1, x2, 1, False), 80)
    assert_close(op(x1[:, ::2], x2[:, 1::2]), expected(x1[:, ::2], x2[:, 1::2], 1, False), 40)


@pytest.mark.parametrize("kernel", KERNELS)
def test_infer_shape(session_cache, kernel):
    assert fused(session_cache, 0, False, kernel).infer_shape((4, None), (4, None)) == (None,)
    assert fused(session_cache, 1, True, kernel).infer_shape((4, None), (4, None)) == (4, 1)
    assert fused(session_cache, 0, True, kernel).infer_shape((4, 7), (4, 7)) == (1, 7)
    assert fused(session_cache, 1, False, kernel).infer_shape(None, None) is None


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("axis", [0, 1])
def test_refuses_bad_inputs(session_cache, rng, axis, kernel):
    op = fused(session_cache, axis, False, kernel)
    x = rng.standard_normal((6, 5), dtype=np.float32)
    cases = [
        ((x, rng.standard_normal((6, 4), dtype=np.float32)), 3),  # different shapes
        ((x, rng.standard_normal((5, 5), dtype=np.float32)), 3),
        ((x.astype(np.float64), x.astype(np.float64)), 1),  # float64
        ((x, x.astype(np.float64)), 1),
        ((x[None], x[None]), 1),  # 3-D
        ((x, x[None]), 1),
        ((x[0], x[0]), 1),  # 1-D
    ]
    for args, status in cases:
        with pytest.raises(aotbench.KernelError) as info:
            op(*args)
        assert info.value.status == status, [a.shape for a in args]


@pytest.mark.parametrize("kernel", KERNELS)
def test_refuses_bad_axis(session_cache, rng, kernel):
    x = rng.standard_normal((3, 4), dtype=np.float32)
    for axis in (2, -1):
        with pytest.raises(aotbench.KernelError) as info:
            fused(session_cache, axis, False, kernel)(x, x)
        assert info.value.status == 2


@pytest.mark.slow
def test_the_benchmarking_notebook_ships_this_very_kernel():
    """03_benchmarking.ipynb's fused cell is examples/add_reduce_fast.cc, so the bench measures what it shows."""
    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / "03_benchmarking.ipynb", as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%aot_kernel")
             and "--name fused" in c.source.splitlines()[0]]
    assert len(cells) == 1
    magic, _, body = cells[0].partition("\n")
    assert '--flags "-O3 -march=native"' in magic
    assert body.strip() == (aotbench.examples_dir() / "add_reduce_fast.cc").read_text().strip()
