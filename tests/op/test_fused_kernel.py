"""The fused Add+ReduceSum example (``examples/add_reduce_fast.cc``, built with ``-O3 -march=native``) against
numpy on fresh random inputs: both axes, keep_dim, shapes that leave tails of every length after the vector
loops, and the error codes for inputs it refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import aotbench

SRC = str(aotbench.examples_dir() / "add_reduce_fast.cc") + ":CustomKernel"
FLAGS = ["-O3", "-march=native"]
# odd shapes and vector tails of every kind; rows wider than 4096 take the two-rows-per-pass path of axis=0
SHAPES = [(1, 1), (1, 37), (41, 1), (3, 17), (129, 65), (2, 32), (5, 31), (7, 33), (300, 1000), (0, 5), (5, 0),
          (1, 4099), (3, 4100), (6, 4111)]


def fused(cache, axis, keep_dim) -> aotbench.Op:
    return aotbench.Custom(SRC, None, np.float32, attrs={"axis": axis, "keep_dim": keep_dim}, flags=FLAGS,
                           cache_dir=cache)


def expected(x1, x2, axis, keep_dim):
    """The exact sum (float64), so that only the kernel's own float32 rounding is measured."""
    return (x1.astype(np.float64) + x2).sum(axis, keepdims=keep_dim)


def assert_close(got, want, reduced):
    assert got.dtype == np.float32 and got.shape == want.shape
    # float32 sums of `reduced` terms: relative error for the large sums, an absolute bound for those near 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(reduced, 1))


@pytest.mark.parametrize("keep_dim", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_matches_numpy(session_cache, rng, shape, axis, keep_dim):
    op = fused(session_cache, axis, keep_dim)
    x1 = rng.standard_normal(shape, dtype=np.float32)
    x2 = rng.standard_normal(shape, dtype=np.float32)
    got = op(x1, x2)
    assert_close(got, expected(x1, x2, axis, keep_dim), shape[axis])
    assert_close(got, (x1 + x2).sum(axis, keepdims=keep_dim), shape[axis])  # and numpy's own float32 answer


def test_no_workspace_and_views(session_cache, rng):
    op = fused(session_cache, 1, False)
    x1 = rng.standard_normal((64, 80), dtype=np.float32)
    x2 = rng.standard_normal((80, 64), dtype=np.float32).T  # a Fortran-order view: converted before the call
    assert op.plan_info(x1, x2)["workspaces"] == []
    assert_close(op(x1, x2), expected(x1, x2, 1, False), 80)
    assert_close(op(x1[:, ::2], x2[:, 1::2]), expected(x1[:, ::2], x2[:, 1::2], 1, False), 40)


def test_infer_shape(session_cache):
    assert fused(session_cache, 0, False).infer_shape((4, None), (4, None)) == (None,)
    assert fused(session_cache, 1, True).infer_shape((4, None), (4, None)) == (4, 1)
    assert fused(session_cache, 0, True).infer_shape((4, 7), (4, 7)) == (1, 7)
    assert fused(session_cache, 1, False).infer_shape(None, None) is None


@pytest.mark.parametrize("axis", [0, 1])
def test_refuses_bad_inputs(session_cache, rng, axis):
    op = fused(session_cache, axis, False)
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


def test_refuses_bad_axis(session_cache, rng):
    x = rng.standard_normal((3, 4), dtype=np.float32)
    for axis in (2, -1):
        with pytest.raises(aotbench.KernelError) as info:
            fused(session_cache, axis, False)(x, x)
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
