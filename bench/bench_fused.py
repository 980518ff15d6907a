"""Fused Add+ReduceSum on one core and on every core, measured side by side in one run (the machine is noisy: read
the ratios).

Two kernels on two 4096x4096 float32 inputs, both axes:
  one-core  ``examples/add_reduce_fast.cc``, built with ``-O3 -march=native``
  parallel  ``examples/add_reduce_parallel.cc``, built with ``-O3 -march=native -fopenmp`` (GNU OpenMP's threads:
            one per CPU of the affinity mask unless OMP_NUM_THREADS says otherwise; the run prints how many)
against numpy's ``(x1 + x2).sum(axis)`` and against the copy bandwidth, ``aotbench.tools.bandwidth.threaded_copy``
of the roofline's size (``default_copy_bytes()``: 256 MiB, or 4x the last-level cache if larger; a 256 MiB copy
on two threads stays near one thread's figure here, a 1 GiB and larger one doubles it) on 1 thread and on all
usable cores (``aotbench.run.threads.usable_cores``: the affinity mask, fewer
under a cgroup CPU quota), as bytes read + bytes written over the median time. A kernel's bandwidth is the bytes it
must move: both inputs read once, plus its output.

Targets, each axis:
  one-core vs numpy                               >= 2.5x faster
  one-core bandwidth vs the 1-thread copy         >= 75%
  parallel bandwidth vs the all-core copy         >= 80%
  parallel vs one-core                            >= 1.7x faster

Every side (the two copies, numpy, both kernels, both axes) is timed in turn, for several rounds, and each side's
median over the rounds is taken, so drift hits all sides alike. Both kernels are checked against numpy on fresh
inputs before anything is timed.

Usage: python bench/bench_fused.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

import aotbench
from aotbench.run.threads import core_use, thread_use
from aotbench.tools.bandwidth import default_copy_bytes, threaded_copy

ONE_CORE_FLAGS = ["-O3", "-march=native"]
PARALLEL_FLAGS = ONE_CORE_FLAGS + ["-fopenmp"]
KERNELS = {"one-core": ("add_reduce_fast.cc", ONE_CORE_FLAGS), "parallel": ("add_reduce_parallel.cc", PARALLEL_FLAGS)}
ROWS = COLS = 4096
COPY_BYTES = default_copy_bytes()  # the size the roofline's copy uses (tools.bandwidth)
SPEEDUP_TARGET = 2.5  # one-core fused vs numpy
BANDWIDTH_TARGET = 0.75  # one-core fused vs the 1-thread copy
PARALLEL_BANDWIDTH_TARGET = 0.80  # parallel fused vs the all-core copy
PARALLEL_SPEEDUP_TARGET = 1.7  # parallel fused vs one-core fused


def build(cache: Path, kernel: str, axis: int) -> aotbench.Op:
    source, flags = KERNELS[kernel]
    return aotbench.Custom(str(aotbench.examples_dir() / source) + ":CustomKernel", None, np.float32,
                           attrs={"axis": axis, "keep_dim": False}, flags=flags, cache_dir=cache)


def check(ops: dict[tuple[str, int], aotbench.Op], rng: np.random.Generator) -> None:
    """Every kernel agrees with numpy on fresh inputs before anything is timed (exits if not)."""
    x1 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    x2 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    for (kernel, axis), op in ops.items():
        want = (x1.astype(np.float64) + x2).sum(axis)
        # rtol for the typical sum (|sum| ~ 90); atol for the few near 0, about 10x the rounding of 4096 terms
        if not np.allclose(op(x1, x2), want, rtol=1e-4, atol=1e-6 * x1.shape[axis]):
            sys.exit(f"{KERNELS[kernel][0]} disagrees with numpy for axis={axis}: not timing a wrong kernel")


def measure(ops: dict[tuple[str, int], aotbench.Op], copy_threads: tuple[int, ...], rounds: int, budget_ms: float,
            rng: np.random.Generator) -> dict:
    """Median ns per call of every side, over ``rounds`` interleaved rounds of ``aotbench.bench``."""
    x1 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    x2 = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.zeros_like(src)  # written once here, so no copy times page faults
    sides: dict = {("copy", threads): (threaded_copy, dst, src, threads) for threads in copy_threads}
    for axis in sorted({axis for _, axis in ops}, reverse=True):
        sides[("numpy", axis)] = (lambda a, b, axis=axis: (a + b).sum(axis), x1, x2)
        for kernel in KERNELS:
            sides[(kernel, axis)] = (ops[(kernel, axis)], x1, x2)
    samples: dict = {key: [] for key in sides}
    for _ in range(rounds):
        for key, (fn, *args) in sides.items():
            samples[key].append(aotbench.bench(fn, *args, budget_ms=budget_ms).median_ns)
    return {key: statistics.median(values) for key, values in samples.items()}


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: other processes on the cores make a run's ratios less telling."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, smaller budgets (a smoke run)")
    args = parser.parse_args(argv)
    rounds, budget_ms = (2, 50.0) if args.quick else (7, 300.0)
    rng = np.random.default_rng()
    cores = core_use()
    copy_threads = (1, cores.count) if cores.count > 1 else (1,)
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="aotbench-bench-") as tmp:
        ops = {(kernel, axis): build(Path(tmp) / "cache", kernel, axis) for axis in (1, 0) for kernel in KERNELS}
        check(ops, rng)  # also loads GNU OpenMP, so the threads asked of it below are the ones the runs use
        kernel_threads = thread_use(ops[("parallel", 1)])
        ns = measure(ops, copy_threads, rounds, budget_ms, rng)
    copy_gbps = {threads: 2 * COPY_BYTES / ns[("copy", threads)] for threads in copy_threads}  # bytes/ns = GB/s
    all_cores = copy_threads[-1]

    print(f"aotbench {aotbench.__version__} fused Add+ReduceSum benchmark, {ROWS}x{COLS} float32, {rounds} rounds "
          f"(python {sys.version.split()[0]}, numpy {np.__version__})")
    print(f"  machine: {cores.source}; load average {load_before} before the run, {load_average()} after")
    print(f"  one-core: {KERNELS['one-core'][0]} {' '.join(ONE_CORE_FLAGS)}")
    print(f"  parallel: {KERNELS['parallel'][0]} {' '.join(PARALLEL_FLAGS)}, {kernel_threads}")
    for threads in copy_threads:
        label = f"copy, {threads} thread{'s' if threads > 1 else ''}"
        print(f"  {label:<18} {COPY_BYTES >> 20} MiB: {ns[('copy', threads)] / 1e6:6.2f} ms = "
              f"{copy_gbps[threads]:5.1f} GB/s")
    targets = []
    for axis in (1, 0):
        kernel_bytes = (2 * ROWS * COLS + (ROWS if axis == 1 else COLS)) * 4
        one, par, numpy_ns = ns[("one-core", axis)], ns[("parallel", axis)], ns[("numpy", axis)]
        print(f"  axis={axis}: numpy {numpy_ns / 1e6:6.2f} ms | one-core {one / 1e6:5.2f} ms = "
              f"{kernel_bytes / one:5.1f} GB/s | parallel {par / 1e6:5.2f} ms = {kernel_bytes / par:5.1f} GB/s")
        one_share, par_share = kernel_bytes / one / copy_gbps[1], kernel_bytes / par / copy_gbps[all_cores]
        targets += [
            (f"one-core vs numpy (axis={axis}): {numpy_ns / one:.2f}x (target >= {SPEEDUP_TARGET}x)",
             numpy_ns / one >= SPEEDUP_TARGET),
            (f"one-core bandwidth (axis={axis}): {100 * one_share:.0f}% of the 1-thread copy "
             f"(target >= {100 * BANDWIDTH_TARGET:.0f}%)", one_share >= BANDWIDTH_TARGET),
            (f"parallel bandwidth (axis={axis}): {100 * par_share:.0f}% of the {all_cores}-thread copy "
             f"(target >= {100 * PARALLEL_BANDWIDTH_TARGET:.0f}%)", par_share >= PARALLEL_BANDWIDTH_TARGET),
            (f"parallel vs one-core (axis={axis}): {one / par:.2f}x (target >= {PARALLEL_SPEEDUP_TARGET}x)",
             one / par >= PARALLEL_SPEEDUP_TARGET),
        ]
    for text, ok in targets:
        print(f"  {text} {'ok' if ok else 'MISSED'}")
    if all_cores == 1:
        print("  (one usable core: the parallel kernel has no second core to use here)")
    elif kernel_threads.count < all_cores:
        print(f"  (the parallel kernel runs on {kernel_threads.count} of {all_cores} usable cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
