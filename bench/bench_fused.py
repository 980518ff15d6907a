"""Fused Add+ReduceSum speed targets, measured side by side in one run (the machine is noisy: read the ratios).

The kernel is ``examples/add_reduce_fast.cc`` built with ``-O3 -march=native``, on two 4096x4096 float32 inputs.

1. against numpy's ``(x1 + x2).sum(axis)``, for axis=1 and axis=0     (target: >= 2.5x faster, each axis)
2. memory bandwidth against a numpy copy, ``np.copyto(dst, src)`` of 256 MiB, as bytes read + bytes written
   over the median time; the kernel's is the bytes it must read (both inputs) plus its output
                                                                        (target: >= 75% of the copy's, each axis)

The kernel, numpy and the copy are timed in alternation for several rounds and each side's median is taken,
so drift hits all sides alike.

Usage: python bench/bench_fused.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

import aotbench

FLAGS = ["-O3", "-march=native"]
ROWS = COLS = 4096
COPY_BYTES = 256 << 20
SPEEDUP_TARGET = 2.5
BANDWIDTH_TARGET = 0.75


def build(cache: Path, axis: int) -> aotbench.Op:
    return aotbench.Custom(str(aotbench.examples_dir() / "add_reduce_fast.cc") + ":CustomKernel", None, np.float32,
                           attrs={"axis": axis, "keep_dim": False}, flags=FLAGS, cache_dir=cache)


def check(ops: dict[int, aotbench.Op], rng: np.random.Generator) -> None:
    """The kernel agrees with numpy on fresh inputs before anything is timed (exits if not)."""
    x1 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    x2 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    for axis, op in ops.items():
        want = (x1.astype(np.float64) + x2).sum(axis)
        # rtol for the typical sum (|sum| ~ 90); atol for the few near 0, about 10x the rounding of 4096 terms
        if not np.allclose(op(x1, x2), want, rtol=1e-4, atol=1e-6 * x1.shape[axis]):
            sys.exit(f"add_reduce_fast.cc disagrees with numpy for axis={axis}: not timing a wrong kernel")


def measure(ops: dict[int, aotbench.Op], rounds: int, budget_ms: float, rng: np.random.Generator) -> dict:
    """Median ns per call of every side, over ``rounds`` interleaved rounds of ``aotbench.bench``."""
    x1 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    x2 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.zeros_like(src)  # written once here, so the copy never times page faults
    sides = {("copy", None): (np.copyto, dst, src)}
    for axis, op in ops.items():
        sides[("kernel", axis)] = (op, x1, x2)
        sides[("numpy", axis)] = (lambda a, b, axis=axis: (a + b).sum(axis), x1, x2)
    samples: dict = {key: [] for key in sides}
    for _ in range(rounds):
        for key, (fn, *args) in sides.items():
            samples[key].append(aotbench.bench(fn, *args, budget_ms=budget_ms).median_ns)
    return {key: statistics.median(values) for key, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, smaller budgets (a smoke run)")
    args = parser.parse_args(argv)
    rounds, budget_ms = (2, 50.0) if args.quick else (7, 300.0)
    rng = np.random.default_rng()
    with tempfile.TemporaryDirectory(prefix="aotbench-bench-") as tmp:
        ops = {axis: build(Path(tmp) / "cache", axis) for axis in (1, 0)}
        check(ops, rng)
        ns = measure(ops, rounds, budget_ms, rng)
    copy_gbps = 2 * COPY_BYTES / ns[("copy", None)]  # bytes per ns = GB/s
    print(f"aotbench {aotbench.__version__} fused Add+ReduceSum benchmark, {ROWS}x{COLS} float32, flags "
          f"{' '.join(FLAGS)}, {rounds} rounds (python {sys.version.split()[0]}, numpy {np.__version__})")
    print(f"  np.copyto of {COPY_BYTES >> 20} MiB: {ns[('copy', None)] / 1e6:.2f} ms = {copy_gbps:.1f} GB/s")
    lines = []
    for axis in ops:
        kernel_ns, numpy_ns = ns[("kernel", axis)], ns[("numpy", axis)]
        kernel_gbps = (2 * ROWS * COLS + (ROWS if axis == 1 else COLS)) * 4 / kernel_ns
        print(f"  axis={axis}: fused {kernel_ns / 1e6:.2f} ms = {kernel_gbps:.1f} GB/s, numpy {numpy_ns / 1e6:.2f} ms")
        speedup, share = numpy_ns / kernel_ns, kernel_gbps / copy_gbps
        lines.append((f"fused vs numpy (axis={axis}): {speedup:.2f}x (target >= {SPEEDUP_TARGET}x)",
                      speedup >= SPEEDUP_TARGET))
        bandwidth = f"{100 * share:.0f}% of copy (target >= {100 * BANDWIDTH_TARGET:.0f}%)"
        lines.append((f"fused bandwidth (axis={axis}): {bandwidth}", share >= BANDWIDTH_TARGET))
    for text, ok in lines:
        print(f"  {text} {'ok' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
