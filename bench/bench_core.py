"""Core speed targets, measured side by side in one run (the machine is noisy: read the ratios).

1. per-call overhead: ``op(x)`` on a 4-element float32 input against a raw ctypes call of the same library
   function with prebuilt arguments and no ``argtypes``           (target: ratio <= 8); the same for a kernel
   with a workspace (each call holds the plan's workspaces while it runs, so threads never share them)
2. cache-hit construction: ``aotbench.Custom(...)`` when the library is cached  (target: <= 2 ms)
3. cold construction: ``aotbench.Custom(...)`` on a never-seen source against the bare compiler command on an
   equally new source, interleaved                                (target: ratio <= 1.15)
   (with the precompiled header off: this row is aotbench's own cost around the compiler)
4. the compile loop: a cell's rebuild (``aotbench.Custom`` on ``add_reduce.cc`` as a just-edited cell, so a
   cache miss, with the precompiled header of its flag set already built) against the bare documented command
   on the same file, interleaved                                  (target: ratio <= 0.6)

Usage: python bench/bench_core.py [--quick]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

import aotbench
from aotbench.build import cells, pch, toolchain

KERNEL = Path(__file__).resolve().parent / "kernels" / "scale.cc"
KERNEL_WS = KERNEL.with_name("scale_ws.cc")


def per_call_ns(fn, repeat: int) -> float:
    """Best-of-``repeat`` mean time per call in ns, each run autoranged to at least 0.2 s."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e9


def bench_call(cache: Path, repeat: int, kernel: Path = KERNEL, func: str = "Scale") -> tuple[float, float]:
    op = aotbench.Custom(f"{kernel}:{func}", lambda s: s, np.float32, cache_dir=cache)
    x = np.random.default_rng().standard_normal(4).astype(np.float32)
    assert np.allclose(op(x), 2 * x)
    # The raw baseline: the same function, arguments built once, called with no argtypes.
    out = np.empty(4, np.float32)
    lib = ctypes.CDLL(str(op.artifact.path))
    fn = getattr(lib, func)
    workspace = np.empty(4, np.float32)
    params = (ctypes.c_void_p * 3)(x.ctypes.data, out.ctypes.data, workspace.ctypes.data)
    nparam = 3 if func == "ScaleWs" else 2
    ndims = (ctypes.c_int * 2)(1, 1)
    dims = (ctypes.c_int64 * 1)(4)
    shapes = (ctypes.POINTER(ctypes.c_int64) * 2)(dims, dims)
    dtypes = (ctypes.c_char_p * 2)(b"float32", b"float32")
    fn(nparam, params, ndims, shapes, dtypes, None, None)
    assert np.allclose(out, 2 * x)
    raw, ours = [], []
    for _ in range(repeat):  # interleave, so drift hits both sides alike
        raw.append(per_call_ns(lambda: fn(nparam, params, ndims, shapes, dtypes, None, None), 1))
        ours.append(per_call_ns(lambda: op(x), 1))
    return min(ours), min(raw)


def bench_hit(cache: Path, repeat: int) -> float:
    aotbench.Custom(f"{KERNEL}:Scale", lambda s: s, np.float32, cache_dir=cache)  # make sure it is cached
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        op = aotbench.Custom(f"{KERNEL}:Scale", lambda s: s, np.float32, cache_dir=cache)
        samples.append(time.perf_counter() - t)
        assert op.artifact.cache_hit
    return statistics.median(samples) * 1e3


def _fresh_source(kernel: Path, folder: Path, tag: str) -> Path:
    src = folder / f"{kernel.stem}_{tag}.cc"
    src.write_text(kernel.read_text() + f"\n// unique build {tag}\nextern \"C\" int Tag_{tag}() {{ return 0; }}\n")
    return src


def bench_cold(cache: Path, work: Path, repeat: int, kernel: Path, func: str) -> tuple[float, float]:
    """Median cold ``Custom`` time and median bare-compiler time, each on never-seen sources: aotbench's own cost
    around the compiler, so with the precompiled header off (row 4 measures what it saves)."""
    previous = os.environ.get(pch.SWITCH)
    os.environ[pch.SWITCH] = "0"
    try:
        return _bench_cold(cache, work, repeat, kernel, func)
    finally:
        if previous is None:
            os.environ.pop(pch.SWITCH, None)
        else:
            os.environ[pch.SWITCH] = previous


def _bench_cold(cache: Path, work: Path, repeat: int, kernel: Path, func: str) -> tuple[float, float]:
    compiler = toolchain.find_cxx()
    ours, bare = [], []
    for i in range(repeat):
        src = _fresh_source(kernel, work, f"a{i}_{time.time_ns()}")
        t = time.perf_counter()
        op = aotbench.Custom(f"{src}:{func}", lambda *s: s[0], np.float32, cache_dir=cache)
        ours.append(time.perf_counter() - t)
        assert not op.artifact.cache_hit
        src2 = _fresh_source(kernel, work, f"b{i}_{time.time_ns()}")
        argv = toolchain.cxx_command(compiler, src2, work / f"bare{i}.so")
        t = time.perf_counter()
        subprocess.run(argv, check=True)
        bare.append(time.perf_counter() - t)
    return statistics.median(ours), statistics.median(bare)


def bench_rebuild(cache: Path, work: Path, repeat: int, kernel: Path, func: str) -> tuple[float, float]:
    """Median time of a cell's rebuild through aotbench (its source written as ``%%aot_kernel`` writes it, the
    precompiled header in use) and of the bare documented command on that same file; the order alternates."""
    compiler = toolchain.find_cxx()
    text = kernel.read_text()

    def ours(src: Path) -> float:
        t = time.perf_counter()
        op = aotbench.Custom(f"{src}:{func}", lambda *s: s[0], np.float32, cache_dir=cache)
        elapsed = time.perf_counter() - t
        assert not op.artifact.cache_hit and "-include" in op.command, op.command  # a miss, with the PCH
        return elapsed

    def bare(src: Path) -> float:
        argv = toolchain.cxx_command(compiler, src, work / "bare.so")
        t = time.perf_counter()
        subprocess.run(argv, check=True)
        return time.perf_counter() - t

    def edited(tag: str) -> Path:
        return cells.write_cell_source(f"{text}\n// {tag} {time.time_ns()}\n", kernel.stem, "cpu", cache_dir=cache)

    for i in range(pch.BUILD_ON_MISS):  # the last of these misses makes the flag set's precompiled header
        ours(edited(f"warm-up {i}"))
    samples: dict = {ours: [], bare: []}
    for i in range(repeat):
        src = edited(f"edit {i}")
        for fn in ((ours, bare) if i % 2 == 0 else (bare, ours)):
            samples[fn].append(fn(src))
    return statistics.median(samples[ours]), statistics.median(samples[bare])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 7
    with tempfile.TemporaryDirectory(prefix="aotbench-bench-") as tmp:
        cache, work = Path(tmp) / "cache", Path(tmp) / "src"
        work.mkdir()
        ours_ns, raw_ns = bench_call(cache, repeat)
        ws_ns, ws_raw_ns = bench_call(cache, repeat, KERNEL_WS, "ScaleWs")
        hit_ms = bench_hit(cache, repeat * 7)
        cold_s, bare_s = bench_cold(cache, work, repeat, KERNEL, "Scale")
        cold2_s, bare2_s = bench_cold(cache, work, repeat, aotbench.examples_dir() / "add_reduce.cc", "CustomKernel")
        loop_s, loop_bare_s = bench_rebuild(cache, work, repeat, aotbench.examples_dir() / "add_reduce.cc",
                                            "CustomKernel")
    rows = [
        ("per call: op(x), 4 x float32", f"{ours_ns / 1e3:.2f} us", f"raw ctypes {raw_ns / 1e3:.2f} us",
         f"{ours_ns / raw_ns:.1f}x", "<= 8x", ours_ns / raw_ns <= 8),
        ("per call: with a workspace", f"{ws_ns / 1e3:.2f} us", f"raw ctypes {ws_raw_ns / 1e3:.2f} us",
         f"{ws_ns / ws_raw_ns:.1f}x", "<= 8x", ws_ns / ws_raw_ns <= 8),
        ("construction, cache hit", f"{hit_ms:.2f} ms", "", "", "<= 2 ms", hit_ms <= 2),
        ("construction, cold (scale.cc)", f"{cold_s * 1e3:.0f} ms", f"bare g++ {bare_s * 1e3:.0f} ms",
         f"{cold_s / bare_s:.2f}x", "<= 1.15x", cold_s / bare_s <= 1.15),
        ("construction, cold (add_reduce.cc)", f"{cold2_s * 1e3:.0f} ms", f"bare g++ {bare2_s * 1e3:.0f} ms",
         f"{cold2_s / bare2_s:.2f}x", "<= 1.15x", cold2_s / bare2_s <= 1.15),
        ("rebuild, edited cell (add_reduce.cc)", f"{loop_s * 1e3:.0f} ms", f"bare g++ {loop_bare_s * 1e3:.0f} ms",
         f"{loop_s / loop_bare_s:.2f}x", "<= 0.6x", loop_s / loop_bare_s <= 0.6),
    ]
    print(f"aotbench {aotbench.__version__} core benchmark (python {sys.version.split()[0]}, numpy {np.__version__})")
    for name, value, base, ratio, target, ok in rows:
        print(f"  {name:36s} {value:>10s}  {base:>22s}  {ratio:>7s}  target {target:9s} {'ok' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
