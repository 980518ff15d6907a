"""CUDA emulator speed targets, measured side by side in one run (the machine is noisy: read the ratios).

The kernels are ``bench/kernels/emulator_bench.cu`` built with ``emulate=True`` (g++ at the emulator's flags,
``aotbench.build.emulator_build.EMULATOR_FLAGS``); every call goes through the op, so each side's time includes
the op's own work (argument checks, allocating the output), as a learner's call does.

1. elementwise, no barrier: ``Scale`` (out = 2 * x, one element per thread, 256-thread blocks) on 2^24 float32,
   on every usable core, against the same loop as plain C++ (``bench/kernels/scale.cc``, a cpu op built at the
   emulator's optimisation level, -O2)                              (target: emulator <= 5x the plain loop)
   The same ratio with the emulator on one CPU thread is printed too (no target).
2. block reduction: ``BlockSum`` (256-thread blocks, a tree in static __shared__ memory, exactly 8 __syncthreads
   per block) on 2^22 float32. The figure is the whole call's time divided by (threads x barriers), so it also
   carries the loads, the adds and the call itself: an upper bound on the barrier's cost. On every usable core it
   is wall-clock time (the cores share the work)                    (target: <= 20 ns per thread per barrier)
   The one-thread figure (the cost on one core) is printed too (no target).
3. scaling: the reduction on one CPU thread against every usable core (the core count is printed)
                                                                    (target: >= 1.7x, for 2 cores)
4. fiber-stack memory: the bound (each CUDA thread that waits at a barrier keeps a fiber stack region of
   AOTB_EMU_STACK_BYTES address space, read from the emulator's header; regions are reused across blocks and
   launches, so a CPU thread running blocks holds at most one per thread of the largest block; only touched pages
   are resident) and this process's peak RSS growth (``ru_maxrss``) over the first call of ``BlockSum1024``
   (1024-thread blocks, 10 barriers each) on every usable core, made before any other emulated call and before the
   large inputs exist, so that the peak is the process's size then                              (no target)

Every kernel is checked against numpy on fresh random inputs before anything is timed. The sides are timed in
alternation for several rounds (``aotbench.bench``, each side's median per round) and the median of the rounds
is taken, so drift hits all sides alike. ``--quick`` (a smoke run) times 16x smaller inputs for fewer rounds.

Usage: python bench/bench_emulator.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import re
import resource
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

import aotbench
from aotbench.build.emulator_build import EMULATOR_FLAGS, include_dir
from aotbench.run import emulation

KERNELS = Path(__file__).resolve().parent / "kernels"
EMULATED = KERNELS / "emulator_bench.cu"
PLAIN = KERNELS / "scale.cc"
OPT_FLAGS = [flag for flag in EMULATOR_FLAGS if flag.startswith("-O")]  # the plain loop's flags: ["-O2"] now
ELEMENTS = 1 << 24
REDUCED = 1 << 22
BLOCK = 256
BARRIERS = 8  # BlockSum's __syncthreads per block
MEMORY_BLOCK = 1024
MEMORY_BLOCKS = 64
RATIO_TARGET = 5.0
BARRIER_TARGET_NS = 20.0
SCALING_TARGET = 1.7


def build(cache: Path) -> dict[str, aotbench.Op]:
    def per_block(threads: int):
        return lambda shape: (-(-shape[0] // threads),)

    return {
        "scale": aotbench.Custom(f"{EMULATED}:Scale", lambda shape: shape, np.float32, emulate=True, cache_dir=cache),
        "plain": aotbench.Custom(f"{PLAIN}:Scale", lambda shape: shape, np.float32, flags=OPT_FLAGS,
                                 cache_dir=cache),
        "sum": aotbench.Custom(f"{EMULATED}:BlockSum", per_block(BLOCK), np.float32, emulate=True, cache_dir=cache),
    }


def block_sums(x: np.ndarray, threads: int) -> np.ndarray:
    padded = np.zeros(-(-x.size // threads) * threads, np.float64)
    padded[:x.size] = x
    return padded.reshape(-1, threads).sum(axis=1)


def check(ops: dict[str, aotbench.Op], elements: int, reduced: int, rng: np.random.Generator) -> None:
    """Every kernel agrees with numpy on fresh inputs (odd sizes too) before anything is timed (exits if not)."""
    for n in (elements, 1000003):
        x = rng.standard_normal(n, dtype=np.float32)
        for name in ("scale", "plain"):
            if not np.array_equal(ops[name](x), 2 * x):  # exact: doubling a float32 does not round
                sys.exit(f"{name} disagrees with numpy for n={n}: not timing a wrong kernel")
    for n in (reduced, 100003):
        x = rng.standard_normal(n, dtype=np.float32)
        # a sum of 256 standard normals is about 16: float32 rounding of its tree is a few 1e-6
        if not np.allclose(ops["sum"](x), block_sums(x, BLOCK), rtol=1e-5, atol=1e-4):
            sys.exit(f"BlockSum disagrees with numpy for n={n}: not timing a wrong kernel")


def measure(ops: dict[str, aotbench.Op], cores: int, elements: int, reduced: int, rounds: int, budget_ms: float,
            rng: np.random.Generator) -> dict[str, float]:
    """Median ns per call of every side over ``rounds`` alternating rounds; ``emulation.configure`` sets each
    emulated side's CPU threads right before it is timed (after the op's runner has configured it)."""
    x = rng.standard_normal(elements, dtype=np.float32)
    xr = rng.standard_normal(reduced, dtype=np.float32)
    sides = {  # name: (callable, input, emulator CPU threads; None: not emulated)
        "scale_all": (ops["scale"], x, cores),
        "scale_one": (ops["scale"], x, 1),
        "plain": (ops["plain"], x, None),
        "numpy": (lambda a: np.multiply(a, 2.0, dtype=np.float32), x, None),
        "sum_all": (ops["sum"], xr, cores),
        "sum_one": (ops["sum"], xr, 1),
    }
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, (fn, arg, threads) in sides.items():
            if threads is not None:
                emulation.configure(fn.library, threads=threads)
            samples[name].append(aotbench.bench(fn, arg, budget_ms=budget_ms, min_samples=3).median_ns)
    return {name: statistics.median(values) for name, values in samples.items()}


def stack_bytes() -> int:
    """AOTB_EMU_STACK_BYTES of a plain (unsanitized) emulated build, as the emulator's header defines it."""
    text = (Path(include_dir()) / "aotbench_cuda_emu.h").read_text()
    sizes = re.findall(r"#define AOTB_EMU_STACK_BYTES \(([\du *]+)\)", text)
    if not sizes:
        sys.exit("AOTB_EMU_STACK_BYTES not found in aotbench_cuda_emu.h: update bench_emulator.stack_bytes")
    return math.prod(int(factor) for factor in re.findall(r"\d+", sizes[-1]))  # the last: the #else branch


def memory_probe(cache: Path, cores: int) -> dict:
    """Peak RSS growth over the first call of BlockSum1024 on ``cores`` CPU threads. Run before this process makes
    any other emulated call or allocates the timed inputs: ``ru_maxrss`` is a peak, so the growth shows only while
    the process is still at its peak (a child process would not do: it starts with its parent's peak)."""
    op = aotbench.Custom(f"{EMULATED}:BlockSum1024", lambda shape: (-(-shape[0] // MEMORY_BLOCK),), np.float32,
                         emulate=True, cache_dir=cache, guard=False)  # no guard: the first call is the plain one
    x = np.random.default_rng().standard_normal(MEMORY_BLOCK * MEMORY_BLOCKS, dtype=np.float32)
    warm = aotbench.Custom(f"{PLAIN}:Scale", lambda shape: shape, np.float32, flags=OPT_FLAGS, cache_dir=cache,
                           guard=False)
    warm(x)  # the Python side of a call, warmed on a cpu op (no emulator fibers)
    emulation.configure(op.library, threads=cores)
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    got = op(x)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if not np.allclose(got, block_sums(x, MEMORY_BLOCK), rtol=1e-5, atol=2e-4):
        sys.exit("BlockSum1024 disagrees with numpy: not reporting its memory")
    return {"before_kib": before, "after_kib": after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16x smaller inputs, fewer rounds (a smoke run)")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    scale = 16 if args.quick else 1
    elements, reduced = ELEMENTS // scale, REDUCED // scale
    rounds, budget_ms = (2, 20.0) if args.quick else (5, 200.0)
    rng = np.random.default_rng()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="aotbench-bench-") as tmp:
        cache = Path(tmp) / "cache"
        ops = build(cache)
        memory = memory_probe(cache, cores)  # first: before any other emulated call and the large inputs
        check(ops, elements, reduced, rng)
        ns = measure(ops, cores, elements, reduced, rounds, budget_ms, rng)
    load_after = os.getloadavg()[0]

    print(f"aotbench {aotbench.__version__} CUDA emulator benchmark, {cores} usable cores, emulator flags "
          f"{' '.join(EMULATOR_FLAGS)}, plain loop {' '.join(OPT_FLAGS)}, {rounds} rounds"
          f"{' (--quick: 16x smaller inputs)' if args.quick else ''} (python {sys.version.split()[0]}, "
          f"numpy {np.__version__}); 1-minute load average {load_before:.2f} before the run, {load_after:.2f} "
          f"after (the run itself adds up to {cores})")
    ms = {name: value / 1e6 for name, value in ns.items()}
    print(f"  elementwise out = 2 * x, {elements} float32, 256-thread blocks: emulator {ms['scale_all']:.1f} ms "
          f"({cores} cores), {ms['scale_one']:.1f} ms (1 thread); plain C++ loop {ms['plain']:.1f} ms; "
          f"numpy 2 * x {ms['numpy']:.1f} ms")
    thread_barriers = reduced * BARRIERS
    print(f"  block reduction, {reduced} float32, {BLOCK}-thread blocks, {BARRIERS} __syncthreads each: "
          f"{ms['sum_all']:.1f} ms ({cores} cores), {ms['sum_one']:.1f} ms (1 thread)")
    ratio, ratio_one = ns["scale_all"] / ns["plain"], ns["scale_one"] / ns["plain"]
    per_barrier, per_barrier_one = ns["sum_all"] / thread_barriers, ns["sum_one"] / thread_barriers
    scaling = ns["sum_one"] / ns["sum_all"]
    lines = [  # (the measured figure and its target, met or not, what is printed after it without a target)
        (f"elementwise, emulator ({cores} cores) vs plain loop: {ratio:.2f}x (target <= {RATIO_TARGET:g}x)",
         ratio <= RATIO_TARGET, f"on 1 thread {ratio_one:.2f}x"),
        (f"block reduction: {per_barrier:.1f} ns per thread per barrier on {cores} cores, whole call's wall clock "
         f"/ (threads x barriers) (target <= {BARRIER_TARGET_NS:g} ns)", per_barrier <= BARRIER_TARGET_NS,
         f"on 1 thread {per_barrier_one:.1f} ns"),
        (f"scaling, block reduction, 1 thread -> {cores} cores: {scaling:.2f}x (target >= {SCALING_TARGET:g}x)",
         scaling >= SCALING_TARGET, "" if cores > 1 else "(the target needs 2 usable cores; this process has 1)"),
    ]
    for text, ok, extra in lines:
        print(f"  {text} {'met' if ok else 'MISSED'}{'; ' + extra if extra else ''}")
    stack = stack_bytes()
    fibers = cores * MEMORY_BLOCK
    bound_mib = fibers * stack / 2**20
    growth = memory["after_kib"] - memory["before_kib"]
    print(f"  fiber stacks: bound = CPU threads x threads per block x {stack // 1024} KiB of address space "
          f"(only touched pages resident); {MEMORY_BLOCKS} blocks of {MEMORY_BLOCK} threads (10 barriers each) on "
          f"{cores} cores: at most {fibers} regions = {bound_mib:.0f} MiB of address space; peak RSS (ru_maxrss) "
          f"{memory['before_kib'] / 1024:.1f} -> {memory['after_kib'] / 1024:.1f} MiB over the first call, "
          f"+{growth / 1024:.1f} MiB = {growth / fibers:.1f} KiB per region (no target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
