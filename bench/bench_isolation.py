"""The per-call cost of crash isolation, measured side by side in one run (read the ratios: the machine is noisy).

For the same kernel (``bench/kernels/scale.cc``, out = 2x) and the same input, ``op(x)`` of an isolated op
(``isolate=True``: a request on a pipe, the input copied into shared memory, the output copied back out)
against the in-process op, on 4 floats and on 1M floats. Also the worker's start (first call) and the
restart after a crash are timed, once each.

Usage: python bench/bench_isolation.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

import aotbench

KERNEL = Path(__file__).resolve().parent / "kernels" / "scale.cc"
SIZES = (("4 x float32", 4), ("1M x float32", 1 << 20))


def per_call_us(fn, repeat: int) -> float:
    """Best-of-``repeat`` mean time per call in us, each run autoranged to at least 0.2 s."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 7
    rng = np.random.default_rng()
    rows = []
    with tempfile.TemporaryDirectory(prefix="aotbench-bench-") as tmp:
        cache = Path(tmp) / "cache"
        inproc = aotbench.Custom(f"{KERNEL}:Scale", lambda s: s, np.float32, cache_dir=cache)
        iso = aotbench.Custom(f"{KERNEL}:Scale", lambda s: s, np.float32, cache_dir=cache, isolate=True)
        x0 = np.ones(4, np.float32)
        t = time.perf_counter()
        iso(x0)
        start_ms = (time.perf_counter() - t) * 1e3
        for label, n in SIZES:
            x = rng.standard_normal(n).astype(np.float32)
            assert np.array_equal(iso(x), inproc(x)) and np.allclose(iso(x), 2 * x)
            ours, base = [], []
            for _ in range(repeat):  # interleave, so drift hits both sides alike
                base.append(per_call_us(lambda x=x: inproc(x), 1))
                ours.append(per_call_us(lambda x=x: iso(x), 1))
            rows.append((label, min(ours), min(base)))
        # the restart: kill the worker behind the op's back, then time the call that reports it and the next one
        iso._channel.worker.proc.kill()
        t = time.perf_counter()
        try:
            iso(x0)
        except aotbench.AotbenchError:
            pass
        iso(x0)
        restart_ms = (time.perf_counter() - t) * 1e3
        iso.close()
    print(f"aotbench {aotbench.__version__} isolation benchmark (python {sys.version.split()[0]}, "
          f"numpy {np.__version__})")
    for label, ours, base in rows:
        print(f"  per call: op(x), {label:14s} isolated {ours:9.1f} us   in-process {base:9.1f} us   "
              f"{ours / base:6.1f}x   (+{ours - base:.1f} us)")
    print(f"  worker start (first call)            {start_ms:7.0f} ms")
    print(f"  crash report + restart (two calls)   {restart_ms:7.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
