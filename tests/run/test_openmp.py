"""OpenMP kernels (``-fopenmp``) through everything aotbench does with a cpu kernel: ``Custom``, a ``%%aot_kernel``
cell, the guarded first call, isolation, timing and ``compare_flags``; and the same answers, agreeing with numpy,
whatever ``OMP_NUM_THREADS`` says.

The kernels here are written for these tests (below); the fused example ``examples/add_reduce_parallel.cc`` is the
real-world one. Which threads ran is not guessed from timings: ``WhoRan`` writes into every element the number of
the OpenMP thread that wrote it. What happens after ``os.fork()`` is tested in tests/run/test_trust2_call.py.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench import ContractViolation, ContractWarning
from aotbench.run.threads import kernel_threads, thread_use, usable_cores
from aotbench.tools import bandwidth

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from ipython_shell import aotbench_shell

SIG = ("(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream, "
       "void *extra)")

KERNELS = f"""#include <cstdint>
#ifdef _OPENMP
#include <omp.h>
#endif

static int64_t elements(int ndims, const int64_t *shape) {{
  int64_t n = 1;
  for (int i = 0; i < ndims; i++) n *= shape[i];
  return n;
}}

// out = 2 x + y, the loop shared out between OpenMP's threads (one thread, the pragma ignored, without -fopenmp)
extern "C" int Affine{SIG} {{
  const float *x = static_cast<const float *>(params[0]);
  const float *y = static_cast<const float *>(params[1]);
  float *out = static_cast<float *>(params[2]);
  const int64_t n = elements(ndims[0], shapes[0]);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = 2.0f * x[i] + y[i];
  return 0;
}}

// out[i] = the number of the OpenMP thread that wrote element i (0 without -fopenmp)
extern "C" int WhoRan{SIG} {{
  float *out = static_cast<float *>(params[1]);
  const int64_t n = elements(ndims[0], shapes[0]);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {{
#ifdef _OPENMP
    out[i] = static_cast<float>(omp_get_thread_num());
#else
    out[i] = 0.0f;
#endif
  }}
  return 0;
}}

// Two bugs of a loop split by hand between exactly two threads, each made by one thread only (thread 1):
// FloorChunks gives each thread n / 2 elements, so with n odd the last element is never written;
// CeilChunks gives each thread (n + 1) / 2 and does not clamp the last chunk, so with n odd thread 1 writes one
// float past the end of the output.
static void copy_in_chunks(const float *x, float *out, int64_t n, bool round_up) {{
  const int64_t chunk = round_up ? (n + 1) / 2 : n / 2;
#pragma omp parallel num_threads(2)
  {{
#ifdef _OPENMP
    const int64_t t = omp_get_thread_num();
#else
    const int64_t t = 0;
#endif
    for (int64_t i = t * chunk; i < (t + 1) * chunk; i++) out[i] = x[i < n ? i : 0];
  }}
}}

extern "C" int FloorChunks{SIG} {{
  copy_in_chunks(static_cast<const float *>(params[0]), static_cast<float *>(params[1]),
                 elements(ndims[0], shapes[0]), false);
  return 0;
}}

extern "C" int CeilChunks{SIG} {{
  copy_in_chunks(static_cast<const float *>(params[0]), static_cast<float *>(params[1]),
                 elements(ndims[0], shapes[0]), true);
  return 0;
}}
"""

OPENMP = ["-O2", "-fopenmp"]
PARALLEL_EXAMPLE = str(aotbench.examples_dir() / "add_reduce_parallel.cc") + ":CustomKernel"
PARALLEL_FLAGS = ["-O3", "-march=native", "-fopenmp"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("openmp") / "openmp_kernels.cc"
    path.write_text(KERNELS)
    return path


def same_shape(x, *rest):
    return x


def affine(source, flags=OPENMP, **options) -> aotbench.Op:
    return aotbench.Custom(f"{source}:Affine", same_shape, np.float32, flags=flags, **options)


WHO_RAN_LENGTH = 4099


def who_ran(source, **options) -> aotbench.Op:
    # a fixed output shape: an isolated op's shape rule travels to its worker, and a test's function cannot
    return aotbench.Custom(f"{source}:WhoRan", (WHO_RAN_LENGTH,), np.float32, flags=OPENMP, **options)


def add_reduce(axis: int, flags=PARALLEL_FLAGS, **options) -> aotbench.Op:
    return aotbench.Custom(PARALLEL_EXAMPLE, None, np.float32, attrs={"axis": axis, "keep_dim": False}, flags=flags,
                           **options)


def rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def threads_that_ran(op) -> list[int]:
    """The OpenMP thread numbers a WhoRan op's call used (a static schedule gives every thread a block)."""
    return sorted({int(v) for v in op(np.zeros(WHO_RAN_LENGTH, np.float32))})


def exact_sums(x1, x2, axis):
    return (x1.astype(np.float64) + x2).sum(axis)


# -- Custom ---------------------------------------------------------------------------------------------------
def test_an_openmp_op_runs_on_openmps_threads_and_matches_numpy(source, rng):
    op = affine(source)
    assert op.library.openmp  # the build links GNU OpenMP's runtime
    x, y = rand(rng, 517, 33), rand(rng, 517, 33)
    np.testing.assert_allclose(op(x, y), 2 * x + y, rtol=1e-6, atol=1e-6)
    threads = kernel_threads(op)  # asked of the libgomp the op loaded: omp_get_max_threads()
    assert threads >= 1 and "omp_get_max_threads()" in thread_use(op).source
    assert threads_that_ran(who_ran(source)) == list(range(threads))


def test_the_same_source_without_fopenmp_is_a_correct_one_thread_op(source, rng):
    op = affine(source, flags=["-O2"])
    assert not op.library.openmp
    assert thread_use(op).count == 1 and thread_use(op).source == "no OpenMP"
    x, y = rand(rng, 300, 7), rand(rng, 300, 7)
    np.testing.assert_allclose(op(x, y), 2 * x + y, rtol=1e-6, atol=1e-6)


# -- a cell ---------------------------------------------------------------------------------------------------
def test_an_openmp_cell(tmp_path, rng):
    cell = KERNELS.split("// out[i] = the number")[0]  # the includes, elements() and Affine
    with aotbench_shell(tmp_path) as ip:
        ip.user_ns["same_shape"] = same_shape
        op = ip.run_cell_magic("aot_kernel", 'cpu --flags "-O2 -fopenmp" --name omp_affine --out-shape same_shape',
                               cell)
        assert ip.user_ns["omp_affine"] is op
        assert op.library.openmp and "-fopenmp" in op.spec.flags
        ip.user_ns["cx"], ip.user_ns["cy"] = rand(rng, 1000), rand(rng, 1000)
        result = ip.run_cell("omp_affine(cx, cy)")
        assert result.error_in_exec is None
        np.testing.assert_allclose(result.result, 2 * ip.user_ns["cx"] + ip.user_ns["cy"], rtol=1e-6, atol=1e-6)


# -- the guarded first call -----------------------------------------------------------------------------------
def test_a_write_past_the_end_by_one_thread_is_caught(source, rng):
    op = aotbench.Custom(f"{source}:CeilChunks", same_shape, np.float32, flags=OPENMP)
    with pytest.raises(ContractViolation, match=r"wrote 4 bytes past the end of its 4004-byte buffer"):
        op(rand(rng, 1001))
    with warnings.catch_warnings():  # an even length splits exactly: nothing to report
        warnings.simplefilter("error")
        x = rand(rng, 1000)
        np.testing.assert_array_equal(op(x), x)


def test_an_unwritten_tail_is_found(source, rng):
    op = aotbench.Custom(f"{source}:FloorChunks", same_shape, np.float32, flags=OPENMP)
    x = rand(rng, 1001)
    with pytest.warns(ContractWarning, match=r"1 of 1001 elements were never written \(first at \(1000,\)\)"):
        out = op(x)
    np.testing.assert_array_equal(out[:1000], x[:1000])


# -- isolation, and the thread count from the environment -----------------------------------------------------
def test_isolated_workers_follow_omp_num_threads_and_agree(monkeypatch, source, rng):
    """Each isolated op's worker starts with this process's environment, so OMP_NUM_THREADS=n gives its kernel n
    threads; the fused example's answers agree with numpy and are the same, bit for bit, for 1 and 2 threads."""
    affine(source)(np.ones(4, np.float32), np.ones(4, np.float32))  # OpenMP has run in this process: no matter
    x1, x2 = rand(rng, 777, 1000), rand(rng, 777, 1000)
    sums = {}
    for threads in (1, 2):
        monkeypatch.setenv("OMP_NUM_THREADS", str(threads))
        assert threads_that_ran(who_ran(source, isolate=True)) == list(range(threads))
        for axis in (0, 1):
            op = add_reduce(axis, isolate=True)
            assert thread_use(op).count == threads and f"OMP_NUM_THREADS={threads}" in thread_use(op).source
            sums[threads, axis] = op(x1, x2)
            np.testing.assert_allclose(sums[threads, axis], exact_sums(x1, x2, axis), rtol=1e-4,
                                       atol=1e-5 * x1.shape[axis])
    for axis in (0, 1):
        np.testing.assert_array_equal(sums[1, axis], sums[2, axis])


# -- timing ---------------------------------------------------------------------------------------------------
def test_a_timing_records_the_threads(source, rng):
    x, y = rand(rng, 4096), rand(rng, 4096)
    timing = affine(source).bench(x, y, budget_ms=20)
    assert timing.median_ns > 0
    assert timing.threads == kernel_threads(affine(source)) and "omp_get_max_threads()" in timing.thread_source
    plain = affine(source, flags=["-O2"]).bench(x, y, budget_ms=20)
    assert plain.threads == 1 and plain.thread_source == "no OpenMP"


# -- compare_flags --------------------------------------------------------------------------------------------
def test_compare_flags_shows_the_openmp_build_beside_the_plain_one(monkeypatch, rng):
    """The plain build of an OpenMP source ignores the pragmas and is still right: for the fused example it gives
    the same answer, bit for bit, as the -fopenmp build. Each build is held to the copy on its own thread count."""
    # the copy bandwidth is not measured here (seconds of copying: tests/tools/test_bandwidth.py does that)
    monkeypatch.setattr(bandwidth, "bandwidth_record", lambda threads=1, **_: {"gbps": 10.0 * threads})
    op = add_reduce(0)
    x1, x2 = rand(rng, 513, 700), rand(rng, 513, 700)
    result = aotbench.compare_flags(op, x1, x2, flag_sets={"-fopenmp": PARALLEL_FLAGS, "plain": PARALLEL_FLAGS[:-1]},
                                    reference=lambda a, b: (a + b).sum(0), budget_ms=20, vectorization=False)
    rows = {row.label: row for row in result.rows}
    assert list(rows) == ["-fopenmp", "plain", "reference"]
    assert result.fns["-fopenmp"].library.openmp and not result.fns["plain"].library.openmp
    assert rows["plain"].max_abs_error == 0.0  # errors are against the first entry, the -fopenmp build
    # numpy's float32 sums round differently; against column sums near zero only an absolute bound is fair
    assert rows["reference"].max_abs_error < 1e-5 * 513
    assert rows["plain"].timing.threads == 1 and rows["-fopenmp"].timing.threads == kernel_threads(op)
    assert result.rooflines["plain"].threads == 1
    assert result.rooflines["-fopenmp"].threads == min(kernel_threads(op), usable_cores())
    np.testing.assert_allclose(result.fns["plain"](x1, x2), exact_sums(x1, x2, 0), rtol=1e-4, atol=1e-5 * 513)
