"""A learner's corpus of CUDA kernels (tests/support/kernels/emulator/*.cu) run on aotbench's CUDA emulator against
numpy, on fresh random inputs of awkward sizes (1 element, primes, sizes that are not a multiple of the block), and
the buggy kernels whose errors the emulator must name (issue 25, section 6).

The ops of one .cu file share its library, built once: the module's autouse fixture builds all five files before
the first test (about 8 s of g++ on 2 cores), so the whole module is marked slow.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import aotbench
from aotbench.errors import EmulatorError, KernelError

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "support" / "kernels" / "emulator"

# Sizes every 1-D kernel sees: one element, primes that no block size used here (64, 96, 100, 128, 192, 256)
# divides (31, 97, 257, 1021, 4099), and exactly one block of 256.
SIZES = [1, 31, 97, 256, 257, 1021, 4099]


def emulated(source: str, name: str, out_shape, out_dtype, **attrs) -> aotbench.Op:
    return aotbench.Custom(f"{CORPUS / source}:{name}", out_shape=out_shape, out_dtype=out_dtype,
                           attrs=attrs or None, emulate=True)


def blocks(n: int, size: int) -> int:
    return -(-n // size)


def per_block(x: np.ndarray, size: int, reduce=np.add) -> np.ndarray:
    """``reduce`` over each consecutive ``size`` elements of ``x`` (the last group may be short)."""
    return reduce.reduceat(x, np.arange(0, x.size, size))


def marked_line(source: str, mark: str) -> int:
    """The line of ``source`` that carries the comment ``// line: <mark>``."""
    lines = (CORPUS / source).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"// line: {mark}"))


@pytest.fixture(scope="module", autouse=True)
def built():
    """Build every corpus file before the first test (so no single test carries a g++ run's time)."""
    for source, name in [("reductions.cu", "BlockTreeSum"), ("scans.cu", "InclusiveScan"),
                         ("layout.cu", "Transpose"), ("numerics.cu", "HalfAxpy"), ("faults.cu", "DeviceAssert")]:
        emulated(source, name, lambda *s: s[0], None)


# -- reductions.cu -------------------------------------------------------------------------------------------------

def test_block_tree_sum_in_static_shared_memory(rng):
    op = emulated("reductions.cu", "BlockTreeSum", lambda x: (blocks(x[0], 256),), np.float32)
    for n in SIZES:
        x = rng.standard_normal(n, dtype=np.float32)
        want = per_block(x.astype(np.float64), 256)
        np.testing.assert_allclose(op(x), want, rtol=1e-5, atol=1e-5 * np.sqrt(min(n, 256)))


def test_warp_shuffle_sum_of_ints_is_exact(rng):
    op = emulated("reductions.cu", "WarpShuffleSum", lambda x: (1,), np.int32)
    for n in [*SIZES, 12345]:  # 12345: more than 7 blocks of 192, so the grid-stride loop goes round
        x = rng.integers(-1000, 1000, n, dtype=np.int32)
        assert op(x)[0] == x.sum(dtype=np.int64)


def test_butterfly_max_gives_every_lane_its_warps_max(rng):
    op = emulated("reductions.cu", "ButterflyMax", lambda x: x, np.float32)
    for n in SIZES:
        x = rng.standard_normal(n, dtype=np.float32)
        padded = np.concatenate([x, np.full(-n % 32, -np.inf, np.float32)])
        want = np.repeat(padded.reshape(-1, 32).max(axis=1), 32)[:n]
        np.testing.assert_array_equal(op(x), want)


def test_cooperative_groups_block_sum(rng):
    op = emulated("reductions.cu", "CgBlockSum", lambda x: (blocks(x[0], 128),), np.int32)
    for n in SIZES:
        x = rng.integers(-50_000, 50_000, n, dtype=np.int32)
        np.testing.assert_array_equal(op(x), per_block(x.astype(np.int64), 128))


def test_ballot_and_popc_count_the_positive_elements_of_each_block(rng):
    op = emulated("reductions.cu", "BallotCount", lambda x: (blocks(x[0], 256),), np.int32)
    for n in SIZES:
        x = rng.standard_normal(n, dtype=np.float32)
        np.testing.assert_array_equal(op(x), per_block((x > 0).astype(np.int64), 256))


def test_syncthreads_count_and_or_in_blocks_of_100(rng):
    op = emulated("reductions.cu", "BarrierVotes", lambda x: (blocks(x[0], 100), 2), np.int32, limit=2.0)
    for n in SIZES:
        x = rng.standard_normal(n, dtype=np.float32)
        count = per_block((x > 0).astype(np.int64), 100)
        above = per_block((x > 2.0).astype(np.int64), 100, np.maximum)
        np.testing.assert_array_equal(op(x), np.stack([count, above], axis=1))


def test_atomic_max_min_cas_float_max_and_wrapping_inc(rng):
    wrap = 6
    op = emulated("reductions.cu", "Atomics", lambda x, y: (4,), np.int32, wrap=wrap)
    for n in SIZES:
        x = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
        y = rng.standard_normal(n, dtype=np.float32)
        got = op(x, y)
        assert got[0] == x.max() and got[1] == x.min()
        assert got[2:3].view(np.float32)[0] == y.max()
        assert got[3] == n % (wrap + 1)  # atomicInc counts 0, 1, ..., wrap, 0, ...


# -- scans.cu ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [128, 200])
def test_inclusive_scan_in_dynamic_shared_memory(rng, threads):
    op = emulated("scans.cu", "InclusiveScan", lambda x: x, np.float32, threads=threads)
    for n in SIZES:
        x = rng.standard_normal(n, dtype=np.float32)
        want = np.concatenate([np.cumsum(x[i:i + threads], dtype=np.float64) for i in range(0, n, threads)])
        np.testing.assert_allclose(op(x), want, rtol=1e-5, atol=1e-5 * np.sqrt(threads))


@pytest.mark.parametrize("threads", [64, 256])
def test_exclusive_scan_with_shfl_up(rng, threads):
    op = emulated("scans.cu", "ExclusiveScan", lambda x: x, np.int32, threads=threads)
    for n in SIZES:
        x = rng.integers(-1000, 1000, n, dtype=np.int32)
        want = np.concatenate([np.cumsum(x[i:i + threads]) - x[i:i + threads] for i in range(0, n, threads)])
        np.testing.assert_array_equal(op(x), want)


@pytest.mark.parametrize("bins", [1, 7, 256])
def test_histogram_with_shared_then_global_atomics(rng, bins):
    op = emulated("scans.cu", "Histogram", lambda x: (bins,), np.uint32, bins=bins)
    for n in [*SIZES, 20011]:
        x = rng.integers(0, bins, n, dtype=np.int32)
        got = op(x)
        assert got.dtype == np.uint32
        np.testing.assert_array_equal(got, np.bincount(x, minlength=bins))


def test_warp_per_row_softmax(rng):
    op = emulated("scans.cu", "WarpSoftmax", lambda x: x, np.float32)
    for rows, cols in [(1, 1), (1, 31), (5, 33), (13, 97), (4, 128), (37, 257)]:
        x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
        e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(op(x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


# -- layout.cu -----------------------------------------------------------------------------------------------------

def test_tiled_transpose_of_rectangular_odd_shapes(rng):
    op = emulated("layout.cu", "Transpose", lambda x: (x[1], x[0]), np.float32)
    for shape in [(1, 1), (1, 67), (67, 1), (33, 31), (97, 45), (64, 96)]:
        x = rng.standard_normal(shape, dtype=np.float32)
        np.testing.assert_array_equal(op(x), x.T)


def test_tiled_matmul_with_odd_sizes(rng):
    op = emulated("layout.cu", "Matmul", lambda a, b: (a[0], b[1]), np.float32)
    for m, k, n in [(1, 1, 1), (17, 3, 5), (31, 47, 29), (16, 16, 16), (67, 33, 1)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        want = a.astype(np.float64) @ b
        np.testing.assert_allclose(op(a, b), want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_3d_grid_and_3d_blocks(rng):
    op = emulated("layout.cu", "Index3d", lambda x: x, np.int32)
    for shape in [(1, 1, 1), (3, 5, 17), (7, 2, 9), (2, 13, 31)]:
        x = rng.integers(-100, 100, shape, dtype=np.int32)
        z, y, w = np.indices(shape)
        np.testing.assert_array_equal(op(x), x + 10000 * z + 100 * y + w)


def test_grid_stride_float4_loop_and_scalar_tail(rng):
    a, b = 1.75, -0.5
    op = emulated("layout.cu", "Affine4", lambda x: x, np.float32, a=a, b=b)
    # 1, 2, 3: the tail only; 4: one float4 only; 2563: 640 float4s, one for each of the 5 x 128 threads, and a
    # tail of 3; 4099: more float4s than threads (the loop strides)
    for n in [1, 2, 3, 4, 5, 99, 2563, 4099]:
        x = rng.standard_normal(n, dtype=np.float32)
        want = (np.float64(a) * x + b).astype(np.float32)  # fmaf: the exact a x + b, rounded once
        np.testing.assert_array_equal(op(x), want)


def test_template_kernel_float_with_deduced_arguments(rng):
    op = emulated("layout.cu", "TemplateSumFloat", lambda x: (blocks(x[0], 128),), np.float32)
    for n in SIZES:
        x = rng.standard_normal(n, dtype=np.float32)
        np.testing.assert_allclose(op(x), per_block(x.astype(np.float64), 128), rtol=1e-5, atol=1e-5 * 12)


def test_template_kernel_int_with_explicit_arguments(rng):
    op = emulated("layout.cu", "TemplateSumInt", lambda x: (blocks(x[0], 64),), np.int32)
    for n in SIZES:
        x = rng.integers(-10_000, 10_000, n, dtype=np.int32)
        np.testing.assert_array_equal(op(x), per_block(x.astype(np.int64), 64))


@pytest.mark.parametrize("ntaps", [1, 5, 15])
def test_filter_with_taps_in_constant_memory(rng, ntaps):
    taps = [float(t) for t in rng.standard_normal(ntaps).astype(np.float32)]
    op = emulated("layout.cu", "ConstantFilter", lambda x: x, np.float32, taps=taps)
    for n in [1, 2, 7, 97, 1021]:
        x = rng.standard_normal(n, dtype=np.float32)
        padded = np.concatenate([np.zeros(ntaps // 2), x.astype(np.float64), np.zeros(ntaps)])
        want = sum(np.float32(t) * padded[k:k + n] for k, t in enumerate(taps))
        np.testing.assert_allclose(op(x), want, rtol=1e-5, atol=1e-5 * ntaps)


# -- numerics.cu ---------------------------------------------------------------------------------------------------

def test_half_axpy_with_half2(rng):
    a = 0.7998046875  # a float16 value: a * x is then exact in float32
    op = emulated("numerics.cu", "HalfAxpy", lambda x, y: x, np.float16, a=a)
    for n in [1, 2, 3, 97, 256, 1021]:
        x, y = ((rng.standard_normal(n) * 8).astype(np.float16) for _ in range(2))
        # the kernel computes in float32 (a * x exact, one rounding for the addition), then rounds to half
        want = (np.float32(a) * x.astype(np.float32) + y.astype(np.float32)).astype(np.float16)
        got = op(x, y)
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_bfloat16_conversions(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    to_float = emulated("numerics.cu", "Bf16ToFloat", lambda x: x, np.float32)
    to_bf16 = emulated("numerics.cu", "FloatToBf16", lambda x: x, bf16)
    for n in [1, 97, 1021]:
        x = (rng.standard_normal(n) * 100).astype(np.float32)
        x[0] = np.float32(1.00390625)  # halfway between two bfloat16 values: rounds to the even one, 1.0
        want = x.astype(bf16)  # ml_dtypes rounds to nearest even, as __float2bfloat16_rn
        got = to_bf16(x)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        np.testing.assert_array_equal(to_float(want), want.astype(np.float32))


def test_float_intrinsics(rng):
    op = emulated("numerics.cu", "FloatIntrinsics", lambda x, y: (x[0], 5), np.float32)
    for n in [1, 95, 1021]:
        x = rng.uniform(-4, 4, n).astype(np.float32)
        y = rng.uniform(0.01, 100, n).astype(np.float32)
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        got = op(x, y)
        # the emulator's fast intrinsics are the precise functions; a GPU's are within a few ulp of these
        np.testing.assert_allclose(got[:, 0], np.exp(x64), rtol=1e-6)
        np.testing.assert_allclose(got[:, 1], x64 / y64, rtol=1e-6)
        np.testing.assert_allclose(got[:, 2], 1 / np.sqrt(y64), rtol=1e-6)
        np.testing.assert_array_equal(got[:, 3], (x64 * y64 + 1).astype(np.float32))
        np.testing.assert_array_equal(got[:, 4], np.clip(x, 0, 1))


def test_bit_intrinsics(rng):
    op = emulated("numerics.cu", "BitIntrinsics", lambda x: (x[0], 3), np.int32)
    for n in [1, 95, 1021]:
        x = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
        x[0] = 0
        u = [int(v) & 0xFFFFFFFF for v in x]
        want = np.array([[bin(v).count("1"), 32 - v.bit_length(), (v & -v).bit_length()] for v in u], np.int32)
        np.testing.assert_array_equal(op(x), want)


def test_device_printf_comes_out_in_block_order(capfd):
    op = emulated("numerics.cu", "Hello", lambda x: x, np.int32, tag=5)
    nblocks = 7
    capfd.readouterr()
    got = op(np.zeros(nblocks, np.int32))
    out = capfd.readouterr().out
    np.testing.assert_array_equal(got, np.arange(nblocks))
    lines = [line for line in out.splitlines() if line.startswith("tag 5 ")]
    assert lines == [f"tag 5 block {b} thread {t} of 40" for b in range(nblocks) for t in (0, 1)]


def test_memset_output_and_init_workspace_before_atomics(rng):
    nbins = 13
    op = emulated("numerics.cu", "BinMean", lambda bins, w: (nbins,), np.float32, nbins=nbins)
    assert op.plan_info(np.zeros(3, np.int32), np.zeros(3, np.float32))["workspaces"][0]["requested"] == 4 * nbins
    for n in [1, 12, 97, 1021]:
        bins = rng.integers(0, nbins, n, dtype=np.int32)
        w = rng.standard_normal(n, dtype=np.float32)
        counts = np.bincount(bins, minlength=nbins)
        sums = np.bincount(bins, weights=w.astype(np.float64), minlength=nbins)
        want = np.divide(sums, counts, out=np.zeros(nbins), where=counts > 0)
        for _ in range(2):  # the second call reuses output and workspace: both are zeroed again
            np.testing.assert_allclose(op(bins, w), want, rtol=1e-5, atol=1e-6 * np.sqrt(n))


# -- faults.cu: what the emulator must stop and name -----------------------------------------------------------------

def fault(name: str, n: int) -> tuple[aotbench.Op, np.ndarray]:
    return emulated("faults.cu", name, lambda x: x, np.float32), np.zeros(n, np.float32)


def test_syncthreads_in_both_branches_names_both_lines_and_the_block():
    op, x = fault("DivergentBarrier", 256)
    with pytest.raises(EmulatorError) as info:
        op(x)
    text = str(info.value)
    assert info.value.error == "cudaErrorLaunchFailure"
    assert f"faults.cu:{marked_line('faults.cu', 'first barrier')}" in text
    assert f"faults.cu:{marked_line('faults.cu', 'second barrier')}" in text
    assert re.search(r"block \(\d,0,0\)", text) and "not reached by every thread" in text


def test_unchecked_launch_of_2048_threads_is_invalid_configuration():
    op, x = fault("HugeBlockUnchecked", 2048)
    with pytest.raises(EmulatorError) as info:
        op(x)
    assert info.value.error == "cudaErrorInvalidConfiguration"
    assert "2048 threads" in str(info.value) and "fill" in str(info.value)


def test_checked_launch_of_2048_threads_returns_the_host_functions_own_code():
    op, x = fault("HugeBlockChecked", 2048)
    with pytest.raises(KernelError) as info:
        op(x)
    assert not isinstance(info.value, EmulatorError)
    assert info.value.status == 7


def test_device_assert_is_cuda_error_assert_at_its_line():
    op, x = fault("DeviceAssert", 32)
    with pytest.raises(EmulatorError) as info:
        op(x)
    text = str(info.value)
    assert info.value.error == "cudaErrorAssert"
    assert f"faults.cu:{marked_line('faults.cu', 'assert')}" in text and "thread (3,0,0)" in text


def test_full_mask_shuffle_in_a_block_of_48_names_the_missing_lanes():
    op, x = fault("PartialWarpShuffle", 48)
    with pytest.raises(EmulatorError) as info:
        op(x)
    text = str(info.value)
    assert f"faults.cu:{marked_line('faults.cu', 'shuffle')}" in text
    assert "do not exist" in text and "0xffff0000" in text and "warp 1" in text


def test_a_failed_call_does_not_stop_the_next_one(rng):
    bad, x = fault("DeviceAssert", 32)
    with pytest.raises(EmulatorError):
        bad(x)
    good = emulated("reductions.cu", "CgBlockSum", lambda x: (blocks(x[0], 128),), np.int32)
    v = rng.integers(-5, 5, 300, dtype=np.int32)
    np.testing.assert_array_equal(good(v), per_block(v.astype(np.int64), 128))
    with pytest.raises(EmulatorError):
        bad(x)
