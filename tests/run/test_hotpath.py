"""The per-call path: buffers read in C, conversions when needed, thread safety, pickling."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

import aotbench

KERNELS = Path(__file__).resolve().parents[1] / "support" / "kernels"


@pytest.fixture(scope="module")
def axpy():
    return aotbench.Custom(f"{KERNELS / 'hot_axpy.cc'}:Axpy", lambda x, y: x, None, attrs={"a": 1.5})


def test_repeated_calls_reuse_one_plan_and_stay_correct(axpy, rng):
    """Many calls of one signature give fresh, correct outputs and create a single plan."""
    x, y = rng.standard_normal((2, 33)).astype(np.float32)
    first = axpy(x, y)
    for _ in range(50):
        x, y = rng.standard_normal((2, 33)).astype(np.float32)
        out = axpy(x, y)
        np.testing.assert_allclose(out, 1.5 * x + y, rtol=1e-6)
    assert out is not first
    sigs = [k for k in axpy._plans if k[0][0] == (33,)]
    assert len(sigs) == 1


def test_views_readonly_and_fortran_inputs(axpy, rng):
    """Inputs the buffer protocol refuses (strided, Fortran order) are converted; read-only inputs are fine."""
    base = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal((3, 8)).astype(np.float32)
    strided = base[::2]
    np.testing.assert_allclose(axpy(strided, y), 1.5 * strided + y, rtol=1e-6)
    fortran = np.asfortranarray(base[:3])
    np.testing.assert_allclose(axpy(fortran, y), 1.5 * base[:3] + y, rtol=1e-6)
    ro = base[:3].copy()
    ro.flags.writeable = False
    np.testing.assert_allclose(axpy(ro, y), 1.5 * ro + y, rtol=1e-6)


def test_bfloat16_goes_through_the_pointer_fallback(axpy, rng):
    """numpy cannot export bfloat16 through the buffer protocol; the op still passes the right pointers."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = rng.integers(0, 2**16, size=(2, 17), dtype=np.uint16)
    x, y = (b.view(ml_dtypes.bfloat16) for b in bits)
    out = axpy(x, y)
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), bits[0] ^ bits[1])


def test_concurrent_calls_from_threads_do_not_mix_arguments(axpy):
    """Threads sharing one op and one signature each get results computed from their own arrays."""
    errors: list[str] = []

    def worker(seed: int) -> None:
        local = np.random.default_rng(seed)
        for _ in range(300):
            x, y = local.standard_normal((2, 257)).astype(np.float32)
            if not np.allclose(axpy(x, y), 1.5 * x + y, rtol=1e-6):
                errors.append(f"thread {seed} got another thread's result")
                return

    threads = [threading.Thread(target=worker, args=(s,)) for s in np.random.default_rng().integers(0, 2**31, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_non_zero_status_on_fast_path_raises_and_op_recovers(axpy, rng):
    """A kernel error code on a cached plan raises KernelError with the code; the next valid call works."""
    xi = rng.integers(0, 100, 5).astype(np.int32)
    with pytest.raises(aotbench.KernelError) as info:
        axpy(xi, xi)
    with pytest.raises(aotbench.KernelError):
        axpy(xi, xi)  # second time through the cached plan
    assert info.value.status == 7 and info.value.function == "Axpy"
    x, y = rng.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(axpy(x, y), 1.5 * x + y, rtol=1e-6)


def test_op_pickles_as_its_recipe(rng):
    """An op pickles as its build recipe and unpickles into a working op (cache hit, same library)."""
    op = aotbench.Custom(f"{KERNELS / 'hot_axpy.cc'}:Axpy", (4,), np.float32, attrs={"a": -0.25})
    clone = pickle.loads(pickle.dumps(op))
    assert clone is not op and clone.artifact.path == op.artifact.path and clone.artifact.cache_hit
    x, y = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(clone(x, y), -0.25 * x + y, rtol=1e-6)
