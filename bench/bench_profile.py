"""What sampling costs a kernel: op.profile's calls against the same calls unsampled, side by side in one run.

The kernel (``examples/add_reduce_fast.cc``, axis=1, 2048x2048 float32, -O3 -march=native) runs in rounds: a
stretch of unsampled calls, then a profile of the same length, alternating, so drift hits both sides. Both sides
are the calling thread's CPU time per call (the signal handler's time included), which other processes' load
changes far less than wall time. Printed: the median of each side, the overhead (target: < 10% at the default 1 ms
interval; 4-6% measured in this VM), the samples per second and the cost per sample it implies, and the share
of samples in the kernel's hottest line.

Usage: python bench/bench_profile.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import aotbench

FLAGS = ["-O3", "-march=native"]
SHAPE = (2048, 2048)
OVERHEAD_TARGET = 0.10  # a signal costs ~24 us of CPU in this VM (a few on bare metal), and a streaming kernel
# also loses its prefetch streams at each one: 4-6% measured here at 1 kHz


def unsampled_ns_per_call(op, args, seconds: float) -> float:
    """CPU time of the calling thread per call (other processes' load changes it far less than wall time)."""
    calls, start, cpu = 0, time.perf_counter_ns(), time.thread_time_ns()
    while calls < 3 or time.perf_counter_ns() - start < seconds * 1e9:
        op(*args)
        calls += 1
    return (time.thread_time_ns() - cpu) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds (a smoke run)")
    args = parser.parse_args(argv)
    rounds, seconds = (2, 0.3) if args.quick else (7, 1.0)
    rng = np.random.default_rng()
    x, y = (rng.standard_normal(SHAPE, dtype=np.float32) for _ in range(2))
    with tempfile.TemporaryDirectory(prefix="aotbench-bench-") as tmp:
        op = aotbench.Custom(str(aotbench.examples_dir() / "add_reduce_fast.cc") + ":CustomKernel", None,
                             np.float32, attrs={"axis": 1, "keep_dim": False}, flags=FLAGS,
                             cache_dir=Path(tmp) / "cache")
        if not np.allclose(op(x, y), (x.astype(np.float64) + y).sum(1), rtol=1e-4, atol=1e-6 * SHAPE[1]):
            sys.exit("add_reduce_fast.cc disagrees with numpy: not profiling a wrong kernel")
        plain, sampled, rates, hot = [], [], [], []
        for _ in range(rounds):
            plain.append(unsampled_ns_per_call(op, (x, y), seconds))
            p = op.profile(x, y, seconds=seconds, min_samples=1, counters=False, hot_loop=False)
            sampled.append(p.raw.thread_cpu_ns[0] / p.calls)  # the calling thread's CPU time, handler included
            rates.append((p.samples + p.waiting_samples) / p.seconds)
            hot.append(p.hottest(1)[0][1] if p.by_line else 0.0)
    base, with_sampling = statistics.median(plain), statistics.median(sampled)
    overhead = with_sampling / base - 1
    rate = statistics.median(rates)
    print(f"aotbench {aotbench.__version__} sampling-profiler overhead, add_reduce_fast.cc axis=1 {SHAPE[0]}x{SHAPE[1]} "
          f"float32, {rounds} rounds of {seconds:g} s (python {sys.version.split()[0]})")
    print(f"  CPU time per call: unsampled {base / 1e3:.1f} us; sampled every 1 ms {with_sampling / 1e3:.1f} us")
    # An overhead of f of each second, spread over `rate` samples a second: f / rate seconds per sample.
    print(f"  {rate:.0f} samples/s; implied cost per sample: {max(overhead, 0) * 1e6 / rate:.1f} us")
    print(f"  hottest line's share: {100 * statistics.median(hot):.0f}% of the samples")
    ok = overhead < OVERHEAD_TARGET
    print(f"  overhead: {100 * overhead:+.1f}% (target < {100 * OVERHEAD_TARGET:.0f}%) {'ok' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
