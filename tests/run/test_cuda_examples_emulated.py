"""The CUDA examples (``aotbench/examples/saxpy.cu``, ``add_reduce.cu``) run on aotbench's CUDA emulator against
numpy, on fresh random inputs of awkward shapes: both kernels of each (saxpy's float4 loop and its scalar tail;
add_reduce's row sums with and without float4 loads, and its two-pass column sums with the workspace Init asks
for). Every test builds or reuses an emulated library with g++, so the module is marked slow."""

from __future__ import annotations

import numpy as np
import pytest

import aotbench

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def saxpy():
    return aotbench.Custom(f"{aotbench.examples_dir() / 'saxpy.cu'}:Saxpy", out_shape=lambda x, y: x,
                           out_dtype=np.float32, attrs={"a": 1.5}, emulate=True)


def add_reduce(axis: int, keep_dim: bool) -> aotbench.Op:
    return aotbench.Custom(f"{aotbench.examples_dir() / 'add_reduce.cu'}:AddReduce", None, np.float32,
                           attrs={"axis": axis, "keep_dim": keep_dim}, emulate=True)


def test_the_examples_run_emulated(saxpy):
    assert saxpy.emulated
    assert "emulated on the CPU" in repr(saxpy)


# 1, 2, 3: the tail alone; 4, 1024: float4 alone; 5, 1031, 4099: both; (7, 13) and (1, 9): 2-D tensors
@pytest.mark.parametrize("shape", [(1,), (2,), (3,), (4,), (5,), (1024,), (1031,), (4099,), (7, 13), (1, 9),
                                   (9, 1)])
def test_saxpy_matches_numpy(saxpy, rng, shape):
    x, y = (rng.standard_normal(shape, dtype=np.float32) for _ in range(2))
    got = saxpy(x, y)
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got, np.float32(1.5) * x + y, rtol=1e-6, atol=1e-6)


def test_saxpy_of_unaligned_views_takes_the_scalar_kernel(saxpy, rng):
    # views one float into their buffers: not 16-byte aligned, so the host function runs the scalar kernel only
    for n in [1, 6, 257]:
        bx, by = (rng.standard_normal(n + 1, dtype=np.float32) for _ in range(2))
        x, y = bx[1:], by[1:]
        np.testing.assert_allclose(saxpy(x, y), np.float32(1.5) * x + y, rtol=1e-6, atol=1e-6)


SHAPES = [(1, 1), (1, 700), (700, 1), (5, 12), (33, 257), (2, 513), (1000, 3), (67, 64)]


@pytest.mark.parametrize("keep_dim", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_add_reduce_matches_numpy(rng, axis, keep_dim):
    op = add_reduce(axis, keep_dim)
    # (5, 12), (67, 64): rows a multiple of 4 long, so axis=1 reads float4; the others read floats
    shapes = [*SHAPES, (int(rng.integers(1, 300)), int(rng.integers(1, 300)))]
    for rows, cols in shapes:
        a, b = (rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(2))
        got = op(a, b)
        want = (a.astype(np.float64) + b).sum(axis=axis, keepdims=keep_dim)
        assert got.shape == want.shape
        n = rows if axis == 0 else cols
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.sqrt(n))


def test_add_reduce_column_workspace_is_what_init_asks_for(rng):
    op = add_reduce(0, False)
    for rows, cols in [(1, 1), (33, 257), (1000, 3), (2, 513)]:
        workspace = op.plan_info(np.zeros((rows, cols), np.float32),
                                 np.zeros((rows, cols), np.float32))["workspaces"][0]["requested"]
        chunks = workspace // (4 * cols)
        assert workspace == 4 * cols * chunks and 1 <= chunks <= min(rows, 32)
