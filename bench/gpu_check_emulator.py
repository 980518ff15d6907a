"""The emulator phase of ``bench/gpu_check.py`` (issue 25, item 7): every CUDA example and every corpus kernel
built twice, for aotbench's CUDA emulator (``emulate=True``: g++, numpy arrays) and for the GPU (``emulate=False``:
nvcc, cupy arrays), run on the same fresh random inputs, and compared:

    python bench/gpu_check_emulator.py --out DIR [--quick] [--seed N] [--emulator-only]

Bit for bit where the arithmetic is exact (integer outputs, atomics, max, transposes, ballots, fmaf, conversions,
scans of small integers held in float). Elsewhere each case states the error it allows, element by element, and
why: nvcc builds with ``--use_fast_math`` (``build.nvcc.cuda_command``), which implies ``--fmad=true`` (``a * x +
y`` contracted into one fma), ``--ftz=true`` (results below float32's smallest normal flushed to zero),
``--prec-div=false`` and ``--prec-sqrt=false`` (approximate division and square root), and turns ``expf`` and
friends into the fast intrinsics (``__expf``). The emulator's g++ build takes none of nvcc's flags (a user's
``--use_fast_math`` is dropped: ``build.emulator_build.host_flags``), targets baseline x86-64 (no fma instruction,
so every product is rounded) and makes the fast intrinsics the precise functions. Neither build reorders
additions: a kernel whose order is fixed should agree bit for bit even where the rule allows more, and
``bit_exact`` in each row says whether it did.

One row per case is appended to ``DIR/rows.jsonl`` (phase "emulator", written by ``gpu_check_device.RowLog``):
the kernel, its attributes, the input shapes, the rule, the largest absolute and relative error, the largest
error as a share of what the rule allows, ``bit_exact``, ``ok``; then a summary row. ``--emulator-only`` (no GPU
needed) runs the emulator half alone and compares it with each case's numpy reference under the same rule, so
this script is tested where there is no GPU (``tests/project/test_gpu_check_emulator.py``). With a GPU, the
emulator is compared with the GPU and, as ``reference_ok``, with numpy. Exit status: 0 when every case agreed,
1 when one did not, 2 when a GPU was needed and none is usable.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for _path in (str(ROOT), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from gpu_check_device import RowLog  # noqa: E402 - bench/ is on the path only from here

CORPUS = Path("tests") / "support" / "kernels" / "emulator"
EXAMPLES = Path("aotbench") / "examples"
EPS = float(np.finfo(np.float32).eps)  # 2^-23: one ulp of 1.0, and k ulp of v <= k * EPS * |v|
TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32: what --ftz=true may flush to zero
EXACT = "bit for bit"


@dataclass(frozen=True)
class Case:
    """One kernel with one set of attributes: how to draw its inputs, numpy's answer, and the error allowed.

    ``allowed(args, want)`` gives the largest absolute error allowed for each element of the output (``want`` is
    the emulator's output when the GPU is compared with it, numpy's answer otherwise); None means bit for
    bit. ``why`` says where the rule comes from."""

    name: str
    source: Path  # relative to the checkout
    function: str
    out_shape: Callable
    out_dtype: object
    draw: Callable[[np.random.Generator, bool], list[tuple]]
    reference: Callable[..., np.ndarray]
    allowed: Callable[[tuple, np.ndarray], np.ndarray] | None = None
    why: str = ""
    attrs: dict = field(default_factory=dict)
    needs: str = ""  # a module the case needs (ml_dtypes for bfloat16)
    device: str = ""  # why the GPU half cannot run, if it cannot

    @property
    def rule(self) -> str:
        return EXACT if self.allowed is None else f"within a stated bound: {self.why}"


# -- inputs ---------------------------------------------------------------------------------------------------------

def sizes(quick: bool) -> list[int]:
    """One element, primes no block size here divides, one block of 256 exactly; and, unless quick, 2^16 + 3:
    hundreds of blocks, so that the GPU runs many at once."""
    return [1, 31, 97, 256, 257, 1021, 4099] + ([] if quick else [65539])


def aligned(a: np.ndarray, alignment: int = 64) -> np.ndarray:
    """``a`` copied into a buffer aligned as a cupy allocation is (at least 16 bytes): kernels that take a float4
    path only for aligned tensors (saxpy, add_reduce's row sums) then take the same path on both sides."""
    raw = np.empty(a.nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def normals(rng: np.random.Generator, shape, scale: float = 1.0) -> np.ndarray:
    return aligned((rng.standard_normal(shape) * scale).astype(np.float32))


def ints(rng: np.random.Generator, shape, low: int, high: int, dtype=np.int32) -> np.ndarray:
    return aligned(rng.integers(low, high, shape, dtype=dtype))


def blocks(n: int, size: int) -> int:
    return -(-n // size)


def per_block(x: np.ndarray, size: int, reduce=np.add) -> np.ndarray:
    """``reduce`` over each consecutive ``size`` elements of ``x`` (the last group may be short)."""
    return reduce.reduceat(x.ravel(), np.arange(0, x.size, size))


def summed(terms: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """What a float32 sum of ``count`` terms whose magnitudes add up to ``terms`` may be off by, in any order of
    addition: each of two such sums is within (count - 1) u ``terms`` of the exact sum (u = EPS / 2), so they are
    within (count - 1) EPS ``terms`` of each other; two EPS more for the rounding of the terms themselves, and
    FTZ's floor."""
    return (np.asarray(count) + 1) * EPS * terms + TINY


# -- the cases --------------------------------------------------------------------------------------------------------

def example_cases() -> list[Case]:
    a = np.float32(1.7)  # not a power of two: a * x is inexact, so the fma contraction shows
    cases = [Case(
        "saxpy.cu Saxpy a=1.7", EXAMPLES / "saxpy.cu", "Saxpy", lambda x, y: x, np.float32,
        lambda rng, quick: [(normals(rng, s), normals(rng, s)) for s in
                            [(1,), (3,), (4,), (5,), (1031,), (4099,), (7, 13)] + ([] if quick else [(1 << 20) + 3,])],
        lambda x, y: np.float64(a) * x + y,
        # nvcc contracts a * x + y into one fma (--fmad=true); the emulator rounds a * x first. The two differ by
        # at most u |a x| + 2 u |a x + y| <= 1.5 EPS (|a x| + |y|), with no relative bound where a x + y cancels.
        lambda args, want: 2 * EPS * (np.abs(np.float64(a) * args[0]) + np.abs(args[1])) + TINY,
        "fma contraction: 2 EPS (|a x| + |y|)", {"a": float(a)})]
    shapes = [(1, 1), (1, 700), (700, 1), (5, 12), (33, 257), (2, 513), (1000, 3), (67, 64)]
    for axis in (0, 1):
        for keep_dim in (False, True):
            cases.append(Case(
                f"add_reduce.cu AddReduce axis={axis} keep_dim={keep_dim}", EXAMPLES / "add_reduce.cu", "AddReduce",
                None, np.float32,
                lambda rng, quick: [(normals(rng, s), normals(rng, s)) for s in shapes + ([] if quick else
                                                                                         [(1031, 2052)])],
                lambda p, q, axis=axis, keep_dim=keep_dim: (p.astype(np.float64) + q).sum(axis=axis,
                                                                                          keepdims=keep_dim),
                # the kernel fixes the order of its additions (a shuffle tree, partial rows added in order), so
                # the two builds should agree bit for bit; allowed: the bound for summing in any order
                lambda args, want, axis=axis, keep_dim=keep_dim: summed(
                    (np.abs(args[0].astype(np.float64)) + np.abs(args[1])).sum(axis=axis, keepdims=keep_dim),
                    args[0].shape[axis] * 2),
                "a sum of n terms: (2n + 1) EPS sum |a| + |b|", {"axis": axis, "keep_dim": keep_dim}))
    return cases


def corpus_cases(rng: np.random.Generator) -> list[Case]:
    R, S, L, N = (CORPUS / f for f in ("reductions.cu", "scans.cu", "layout.cu", "numerics.cu"))

    def one_d(make, extra=()):
        return lambda rng, quick: [make(rng, n) for n in sizes(quick) + list(extra)]

    cases = [
        Case("reductions.cu BlockTreeSum", R, "BlockTreeSum", lambda x: (blocks(x[0], 256),), np.float32,
             one_d(lambda rng, n: (normals(rng, n),)), lambda x: per_block(x.astype(np.float64), 256),
             lambda args, want: summed(per_block(np.abs(args[0].astype(np.float64)), 256), 256),
             "a tree sum of 256 floats per block: 257 EPS sum |x|"),
        Case("reductions.cu WarpShuffleSum", R, "WarpShuffleSum", lambda x: (1,), np.int32,
             one_d(lambda rng, n: (ints(rng, n, -1000, 1000),), [12345]),
             lambda x: np.array([x.sum(dtype=np.int64)])),
        Case("reductions.cu ButterflyMax", R, "ButterflyMax", lambda x: x, np.float32,
             one_d(lambda rng, n: (normals(rng, n),)),
             lambda x: np.repeat(np.concatenate([x, np.full(-x.size % 32, -np.inf, np.float32)])
                                 .reshape(-1, 32).max(axis=1), 32)[:x.size]),
        Case("reductions.cu CgBlockSum", R, "CgBlockSum", lambda x: (blocks(x[0], 128),), np.int32,
             one_d(lambda rng, n: (ints(rng, n, -50_000, 50_000),)), lambda x: per_block(x.astype(np.int64), 128)),
        Case("reductions.cu BallotCount", R, "BallotCount", lambda x: (blocks(x[0], 256),), np.int32,
             one_d(lambda rng, n: (normals(rng, n),)), lambda x: per_block((x > 0).astype(np.int64), 256)),
        Case("reductions.cu BarrierVotes limit=2", R, "BarrierVotes", lambda x: (blocks(x[0], 100), 2), np.int32,
             one_d(lambda rng, n: (normals(rng, n),)),
             lambda x: np.stack([per_block((x > 0).astype(np.int64), 100),
                                 per_block((x > 2.0).astype(np.int64), 100, np.maximum)], axis=1),
             attrs={"limit": 2.0}),
        Case("reductions.cu Atomics wrap=6", R, "Atomics", lambda x, y: (4,), np.int32,
             one_d(lambda rng, n: (ints(rng, n, -2**31, 2**31 - 1), normals(rng, n))),
             lambda x, y: np.array([x.max(), x.min(), y.max().view(np.int32), x.size % 7], np.int64),
             attrs={"wrap": 6}),
    ]
    for threads in (128, 200):
        cases.append(Case(
            f"scans.cu InclusiveScan threads={threads}", S, "InclusiveScan", lambda x: x, np.float32,
            # small integers held in float: every partial sum (at most 8 * 200) is exact in float32, so the scan
            # is exact in any order and the two builds must agree bit for bit
            one_d(lambda rng, n: (ints(rng, n, -8, 9).astype(np.float32),)),
            lambda x, threads=threads: np.concatenate([np.cumsum(x[i:i + threads], dtype=np.float64)
                                                       for i in range(0, x.size, threads)]),
            attrs={"threads": threads}))
    for threads in (64, 256):
        cases.append(Case(
            f"scans.cu ExclusiveScan threads={threads}", S, "ExclusiveScan", lambda x: x, np.int32,
            one_d(lambda rng, n: (ints(rng, n, -1000, 1000),)),
            lambda x, threads=threads: np.concatenate([np.cumsum(x[i:i + threads]) - x[i:i + threads]
                                                       for i in range(0, x.size, threads)]),
            attrs={"threads": threads}))
    for bins in (7, 256):
        cases.append(Case(
            f"scans.cu Histogram bins={bins}", S, "Histogram", lambda x, bins=bins: (bins,), np.uint32,
            one_d(lambda rng, n, bins=bins: (ints(rng, n, 0, bins),), [20011]),
            lambda x, bins=bins: np.bincount(x, minlength=bins), attrs={"bins": bins}))
    softmax_shapes = [(1, 1), (1, 31), (5, 33), (13, 97), (4, 128), (37, 257)]
    cases += [
        Case("scans.cu WarpSoftmax", S, "WarpSoftmax", lambda x: x, np.float32,
             lambda rng, quick: [(normals(rng, s),) for s in softmax_shapes + ([] if quick else [(301, 1000)])],
             _softmax,
             # on the GPU expf is __expf, whose error grows with |x| (2 + about 1.2 |x| ulp in CUDA's table of
             # intrinsics; x - max lies in [-spread, 0], spread = the row's max - min), the division is approximate
             # (2 ulp) and the sum carries its terms' errors: (16 + 3 spread + 2 cols) EPS of each output
             lambda args, want: (16 + 3 * np.ptp(args[0], axis=1, keepdims=True)
                                 + 2 * args[0].shape[1]) * EPS * np.abs(want) + TINY,
             "__expf and approximate division: (16 + 3 spread + 2 cols) EPS |out|"),
        Case("layout.cu Transpose", L, "Transpose", lambda x: (x[1], x[0]), np.float32,
             lambda rng, quick: [(normals(rng, s),) for s in
                                 [(1, 1), (1, 67), (67, 1), (33, 31), (97, 45), (64, 96)]
                                 + ([] if quick else [(1000, 517)])],
             lambda x: x.T),
        Case("layout.cu Matmul", L, "Matmul", lambda a, b: (a[0], b[1]), np.float32,
             lambda rng, quick: [(normals(rng, (m, k)), normals(rng, (k, n))) for m, k, n in
                                 [(1, 1, 1), (17, 3, 5), (31, 47, 29), (16, 16, 16), (67, 33, 1)]
                                 + ([] if quick else [(200, 300, 100)])],
             lambda a, b: a.astype(np.float64) @ b,
             # a dot product of k terms, contracted into fmas by nvcc, rounded product by product by the emulator
             lambda args, want: summed(np.abs(args[0].astype(np.float64)) @ np.abs(args[1]), args[0].shape[1] + 1),
             "a dot product of k terms, fma contraction: (k + 2) EPS sum |a| |b|"),
        Case("layout.cu Index3d", L, "Index3d", lambda x: x, np.int32,
             lambda rng, quick: [(ints(rng, s, -100, 100),) for s in
                                 [(1, 1, 1), (3, 5, 17), (7, 2, 9), (2, 13, 31)] + ([] if quick else [(9, 37, 65)])],
             lambda x: x + np.indices(x.shape)[0] * 10000 + np.indices(x.shape)[1] * 100 + np.indices(x.shape)[2]),
        # fmaf is one rounding on both sides (the emulator's is the C library's fmaf): bit for bit
        Case("layout.cu Affine4 a=1.75 b=-0.5", L, "Affine4", lambda x: x, np.float32,
             lambda rng, quick: [(normals(rng, n),) for n in [1, 2, 3, 4, 5, 99, 2563, 4099]
                                 + ([] if quick else [65539])],
             lambda x: np.float64(1.75) * x - 0.5, attrs={"a": 1.75, "b": -0.5}),
        Case("layout.cu TemplateSumFloat", L, "TemplateSumFloat", lambda x: (blocks(x[0], 128),), np.float32,
             one_d(lambda rng, n: (normals(rng, n),)), lambda x: per_block(x.astype(np.float64), 128),
             lambda args, want: summed(per_block(np.abs(args[0].astype(np.float64)), 128), 128),
             "a tree sum of 128 floats per block: 129 EPS sum |x|"),
        Case("layout.cu TemplateSumInt", L, "TemplateSumInt", lambda x: (blocks(x[0], 64),), np.int32,
             one_d(lambda rng, n: (ints(rng, n, -10_000, 10_000),)), lambda x: per_block(x.astype(np.int64), 64)),
    ]
    taps = [float(t) for t in rng.standard_normal(5).astype(np.float32)]
    cases.append(Case(
        "layout.cu ConstantFilter taps=5", L, "ConstantFilter", lambda x: x, np.float32,
        lambda rng, quick: [(normals(rng, n),) for n in [1, 2, 7, 97, 1021] + ([] if quick else [65539])],
        lambda x: _filter(x, taps),
        # five products added in order: fma contraction on the GPU
        lambda args, want: summed(_filter(np.abs(args[0]), np.abs(taps)), len(taps) + 1),
        "a dot product of 5 taps, fma contraction: 7 EPS sum |t| |x|", {"taps": taps}))
    half_a = 0.7998046875  # a float16 value: a * x is exact in float32, so contraction changes nothing
    cases += [
        Case("numerics.cu HalfAxpy", N, "HalfAxpy", lambda x, y: x, np.float16,
             lambda rng, quick: [tuple(aligned((rng.standard_normal(n) * 8).astype(np.float16)) for _ in range(2))
                                 for n in [1, 2, 3, 97, 256, 1021] + ([] if quick else [65537])],
             lambda x, y: np.float32(half_a) * x.astype(np.float32) + y.astype(np.float32), attrs={"a": half_a}),
        Case("numerics.cu Bf16ToFloat", N, "Bf16ToFloat", lambda x: x, np.float32,
             lambda rng, quick: [(aligned((rng.standard_normal(n) * 100).astype(_bf16())),) for n in [1, 97, 1021]],
             lambda x: x.astype(np.float32), needs="ml_dtypes", device="cupy has no bfloat16 arrays"),
        Case("numerics.cu FloatToBf16", N, "FloatToBf16", lambda x: x, "bfloat16",
             lambda rng, quick: [(normals(rng, n, 100.0),) for n in [1, 97, 1021]],
             lambda x: x.astype(_bf16()), needs="ml_dtypes", device="cupy has no bfloat16 arrays"),
        Case("numerics.cu FloatIntrinsics", N, "FloatIntrinsics", lambda x, y: (x[0], 5), np.float32,
             lambda rng, quick: [(aligned(rng.uniform(-4, 4, n).astype(np.float32)),
                                  aligned(rng.uniform(0.01, 100, n).astype(np.float32)))
                                 for n in [1, 95, 1021] + ([] if quick else [65539])],
             lambda x, y: np.stack([np.exp(x.astype(np.float64)), x.astype(np.float64) / y,
                                    1 / np.sqrt(y.astype(np.float64)),
                                    (x.astype(np.float64) * y + 1).astype(np.float32), np.clip(x, 0, 1)], axis=1),
             # per column: __expf within 2 + about 1.2 |x| ulp (6 for |x| <= 4), __fdividef and rsqrtf within 2
             # ulp, against the emulator's precise functions (within 1 ulp); fmaf and __saturatef exact
             lambda args, want: np.array([16.0, 8.0, 8.0, 0.0, 0.0]) * EPS * np.abs(want)
             + np.array([TINY, TINY, TINY, 0.0, 0.0]),
             "per column: __expf 16, __fdividef 8, rsqrtf 8 EPS |out|; fmaf and __saturatef bit for bit"),
        Case("numerics.cu BitIntrinsics", N, "BitIntrinsics", lambda x: (x[0], 3), np.int32,
             lambda rng, quick: [(_with_zero(ints(rng, n, -2**31, 2**31 - 1)),) for n in [1, 95, 1021]],
             _bits),
        Case("numerics.cu Hello tag=5 (device printf)", N, "Hello", lambda x: x, np.int32,
             lambda rng, quick: [(np.zeros(n, np.int32),) for n in (1, 7)], lambda x: np.arange(x.size),
             attrs={"tag": 5}),
        Case("numerics.cu BinMean nbins=13", N, "BinMean", lambda bins, w: (13,), np.float32,
             lambda rng, quick: [(ints(rng, n, 0, 13), normals(rng, n)) for n in [1, 12, 97, 1021]
                                 + ([] if quick else [65539])],
             _bin_mean,
             # float atomicAdd: the order of the additions into a bin is the GPU's schedule's (it differs from
             # run to run), and the division is approximate (2 ulp)
             lambda args, want: _bin_bound(*args), "atomicAdd order: (count + 5) EPS sum |w| / count per bin",
             {"nbins": 13}),
    ]
    return cases


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _filter(x: np.ndarray, taps) -> np.ndarray:
    """out[i] = sum_k taps[k] x[i + k - len(taps) // 2], zeros outside x, in float64."""
    n = x.size
    padded = np.concatenate([np.zeros(len(taps) // 2), x.astype(np.float64), np.zeros(len(taps))])
    return sum(np.float64(np.float32(t)) * padded[k:k + n] for k, t in enumerate(taps))


def _with_zero(x: np.ndarray) -> np.ndarray:
    x[0] = 0  # __clz(0) is 32, __ffs(0) is 0
    return x


def _bits(x: np.ndarray) -> np.ndarray:
    u = [int(v) & 0xFFFFFFFF for v in x]
    return np.array([[bin(v).count("1"), 32 - v.bit_length(), (v & -v).bit_length()] for v in u], np.int64)


def _bin_mean(bins: np.ndarray, w: np.ndarray) -> np.ndarray:
    counts = np.bincount(bins, minlength=13)
    sums = np.bincount(bins, weights=w.astype(np.float64), minlength=13)
    return np.divide(sums, counts, out=np.zeros(13), where=counts > 0)


def _bin_bound(bins: np.ndarray, w: np.ndarray) -> np.ndarray:
    counts = np.bincount(bins, minlength=13)
    magnitude = np.bincount(bins, weights=np.abs(w.astype(np.float64)), minlength=13)
    return summed(magnitude, counts + 4) / np.maximum(counts, 1)


def all_cases(seed: int) -> list[Case]:
    return example_cases() + corpus_cases(np.random.default_rng([seed, 0]))


# -- comparing --------------------------------------------------------------------------------------------------------

def compare(got: np.ndarray, want: np.ndarray, allowed: np.ndarray | None) -> dict:
    """How ``got`` differs from ``want``: ``bit_exact`` (same shape, dtype and bytes once ``want`` is cast to
    ``got``'s dtype), the largest absolute and relative error (in float64), the largest error as a share of what
    is allowed (None for a bit-for-bit rule), and ``ok``."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return {"ok": False, "bit_exact": False, "problem": f"shape {got.shape}, expected {want.shape}"}
    same = want.astype(got.dtype) if want.dtype != got.dtype else want
    bit_exact = bool(np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(same).tobytes())
    # bit for bit: the errors against the answer rounded to the output's type (0 when bit-exact)
    g, w = got.astype(np.float64), (same if allowed is None else want).astype(np.float64)
    diff = np.abs(g - w)
    scale = np.abs(w)
    stats = {"bit_exact": bit_exact,
             "max_abs_error": float(np.max(diff)) if diff.size else 0.0,
             "max_rel_error": float(np.max(np.where(scale > 0, diff / np.where(scale > 0, scale, 1), 0)))
             if diff.size else 0.0}
    if allowed is None:
        stats["ok"] = bit_exact
        stats["of_allowed"] = None
    else:
        bound = np.broadcast_to(np.asarray(allowed, np.float64), diff.shape)
        within = (diff <= bound) | (g == w)  # g == w: equal infinities
        stats["ok"] = bool(np.all(within))
        stats["of_allowed"] = float(np.max(np.where(bound > 0, diff / np.where(bound > 0, bound, 1),
                                                    np.where(diff > 0, np.inf, 0.0)))) if diff.size else 0.0
    return stats


def merge(into: dict, one: dict) -> dict:
    """The worst of several draws: errors maxed, ``ok`` and ``bit_exact`` only if every draw had them."""
    if not into:
        return dict(one)
    out = {"ok": into["ok"] and one["ok"], "bit_exact": into["bit_exact"] and one["bit_exact"]}
    for key in ("max_abs_error", "max_rel_error", "of_allowed"):
        values = [d[key] for d in (into, one) if d.get(key) is not None]
        out[key] = max(values) if values else None
    problems = [d["problem"] for d in (into, one) if d.get("problem")]
    if problems:
        out["problem"] = problems[0]
    return out


# -- running ----------------------------------------------------------------------------------------------------------

def make_op(case: Case, emulate: bool):
    import aotbench

    dtype = _bf16() if case.out_dtype == "bfloat16" else case.out_dtype
    return aotbench.Custom(f"{ROOT / case.source}:{case.function}", case.out_shape, dtype,
                           attrs=case.attrs or None, emulate=emulate)


def run_case(log: RowLog, case: Case, index: int, seed: int, quick: bool, device: bool) -> dict:
    """Build, run and compare one case; its row is written whatever happens. Returns the row's fields (all but
    its name)."""
    on_device = device and not case.device
    against = "gpu" if on_device else "numpy"
    with log.case(case.name, kernel=f"{case.source.name}:{case.function}", attrs=case.attrs, rule=case.rule,
                  against=against, target=f"emulator and {against} agree {case.rule.split(':')[0]}") as row:
        if case.needs:
            try:
                __import__(case.needs)
            except ImportError:
                row.update(ok=None, result=f"not run: {case.needs} is not installed")
                return row
        started = time.monotonic()
        emulated = make_op(case, emulate=True)
        gpu = make_op(case, emulate=False) if on_device else None
        row["build_s"] = round(time.monotonic() - started, 2)
        rng = np.random.default_rng([seed, index + 1])
        draws = case.draw(rng, quick)
        main: dict = {}
        reference: dict = {}
        for args in draws:
            mine = np.asarray(emulated(*args))
            want = case.reference(*args)
            reference = merge(reference, compare(mine, want, None if case.allowed is None
                                                 else case.allowed(args, want)))
            if gpu is not None:
                import cupy

                theirs = cupy.asnumpy(gpu(*(cupy.asarray(a) for a in args)))
                main = merge(main, compare(theirs, mine, None if case.allowed is None
                                           else case.allowed(args, mine.astype(np.float64))))
        stats = main if gpu is not None else reference
        shapes = [[list(np.shape(a)) for a in args] for args in draws]
        row.update(stats, shapes=shapes, draws=len(draws), seed=seed)
        if gpu is not None:
            row["reference_ok"] = reference["ok"]
            row["ok"] = stats["ok"] and reference["ok"]
        exact = "bit-exact" if stats["bit_exact"] else "not bit-exact"
        share = f", {100 * stats['of_allowed']:.0f}% of the bound" if stats.get("of_allowed") is not None else ""
        note = f"; {case.device}: emulator against numpy only" if device and case.device else ""
        problem = f"; {stats['problem']}" if stats.get("problem") else ""
        versus = ("" if gpu is None or reference["ok"] else "; the emulator disagrees with numpy")
        row["result"] = (f"{'agree' if row['ok'] else 'DISAGREE'} over {len(draws)} draws against {against}: "
                         f"{exact}, max |err| {stats.get('max_abs_error', float('nan')):.3g}, max rel "
                         f"{stats.get('max_rel_error', float('nan')):.3g}{share}{problem}{versus}{note}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder of rows.jsonl")
    parser.add_argument("--quick", action="store_true", help="leave out the largest input of each case")
    parser.add_argument("--seed", type=int, default=None, help="seed of every case's inputs (default: fresh)")
    parser.add_argument("--emulator-only", action="store_true",
                        help="no GPU: run the emulator half only, against each case's numpy reference")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    device = not args.emulator_only
    if device:
        from aotbench.run.gpu_availability import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason is not None:
            print(f"no usable GPU here: {reason} (--emulator-only runs the emulator half alone)")
            return 2
    seed = args.seed if args.seed is not None else secrets.randbits(32)
    print(f"seed {seed} (rerun: --seed {seed}); comparing the emulator with "
          f"{'the GPU' if device else 'numpy'}", flush=True)
    log = RowLog(out, "emulator")
    started = time.monotonic()
    rows = [{**run_case(log, case, i, seed, args.quick, device), "case": case.name}
            for i, case in enumerate(all_cases(seed)) if args.only in case.name]
    ran = [r for r in rows if r.get("ok") is not None]
    failed = [r["case"] for r in ran if not r["ok"]]
    exact = sum(1 for r in ran if r.get("bit_exact"))
    against = "the GPU" if device else "numpy"
    log.row(case="emulator summary", against="gpu" if device else "numpy", cases=len(rows), ran=len(ran),
            agreed=len(ran) - len(failed), bit_exact_cases=exact, failed=failed, seed=seed,
            seconds=round(time.monotonic() - started, 1), ok=not failed, target="every case agrees",
            result=(f"{len(ran) - len(failed)} of {len(ran)} cases agree with {against} ({exact} bit for bit); "
                    f"{len(rows) - len(ran)} not run" + (f"; DISAGREE: {', '.join(failed)}" if failed else "")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
