"""The machine's memory bandwidth, as a large numpy copy achieves it: the roofline of a memory-bound kernel.

One figure per thread count: a kernel on one core is held to the copy one core achieves, an OpenMP kernel on n
threads to the copy on min(n, usable cores) threads (:func:`threaded_copy`: numpy releases the GIL while it
copies, so Python threads copy in parallel). Measured once per machine and thread count and kept in the aotbench
cache directory (``bandwidth.json``), so a sweep's plot or a benchmark notebook does not pay for a copy of
gigabytes every time. :func:`roofline` is what sweep and compare draw: the figure and its source in words.
"""

from __future__ import annotations

import functools
import json
import math
import platform
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..build import cache
from ..errors import ArgumentTypeError, ArgumentValueError
from ..run import devices as seam
from ..run.threads import usable_cores
from .timing import _llc_bytes, gbps

MIN_COPY_BYTES = 256 << 20
COPY_REPEATS = 5
COPY_ATTEMPTS = 3  # a copy measured while other processes held the cores is tried again, this many times in all
BUSY_SHARE = 0.9  # below this share of the wall time on a CPU, a copy's threads were kept waiting
BANDWIDTH_FILE = "bandwidth.json"
HOST_COPY = "numpy copy"


def default_copy_bytes() -> int:
    """Bytes per array of the bandwidth copy: 256 MiB, or 4x the last-level cache if that is larger."""
    return max(MIN_COPY_BYTES, 4 * _llc_bytes())


CHUNK_ALIGN_BYTES = 64  # threads' chunks start on cache-line boundaries, so no line is written by two threads


def threaded_copy(dst: np.ndarray, src: np.ndarray, threads: int) -> None:
    """``np.copyto(dst, src)`` split into ``threads`` contiguous chunks, each copied by its own Python thread.

    numpy releases the GIL while it copies a large contiguous block, so the chunks are copied in parallel (each
    thread's CPU time equals the wall time of the whole copy on this machine). Both arrays must be C-contiguous
    with the same shape and dtype; ``threads=1`` copies in the calling thread.
    """
    if not isinstance(dst, np.ndarray) or not isinstance(src, np.ndarray):
        raise ArgumentTypeError(f"threaded_copy copies numpy arrays, got {type(dst).__name__} and "
                                f"{type(src).__name__}")
    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise ArgumentValueError(f"dst and src must have the same shape and dtype, got {dst.shape} {dst.dtype} "
                                 f"and {src.shape} {src.dtype}")
    if not (dst.flags.c_contiguous and src.flags.c_contiguous) or not dst.flags.writeable:
        raise ArgumentValueError("threaded_copy needs C-contiguous arrays and a writeable dst "
                                 "(np.ascontiguousarray makes one)")
    _check_threads(threads)
    flat_dst, flat_src = dst.reshape(-1), src.reshape(-1)
    bounds = _chunk_bounds(flat_dst.size, flat_dst.itemsize, threads)
    if len(bounds) <= 2:
        np.copyto(flat_dst, flat_src)
        return
    errors: list[BaseException] = []

    def copy_chunk(lo: int, hi: int) -> None:
        try:
            np.copyto(flat_dst[lo:hi], flat_src[lo:hi])
        except BaseException as exc:  # re-raised in the calling thread below
            errors.append(exc)

    workers = [threading.Thread(target=copy_chunk, args=(lo, hi), name=f"aotbench-copy-{i}")
               for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]
    for worker in workers[1:]:
        worker.start()
    copy_chunk(*bounds[:2])  # the calling thread copies the first chunk itself
    for worker in workers[1:]:
        worker.join()
    if errors:
        raise errors[0]


def _chunk_bounds(size: int, itemsize: int, threads: int) -> list[int]:
    """Element offsets splitting ``size`` elements into at most ``threads`` chunks, inner bounds cache-line
    aligned; empty chunks are dropped."""
    align = max(1, CHUNK_ALIGN_BYTES // itemsize) if CHUNK_ALIGN_BYTES % itemsize == 0 else 1
    inner = sorted({min(size, (size * i // threads) // align * align) for i in range(1, threads)})
    return [0] + [b for b in inner if 0 < b < size] + [size]


def _check_threads(threads: object) -> None:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ArgumentValueError(f"threads must be an int >= 1 (how many threads copy), got {threads!r}")


@dataclass(frozen=True)
class CopyRun:
    """One :func:`copy_run`: the best copy's GB/s, and the share of its wall time the copying threads were on a
    CPU (process CPU time / (threads x wall time)): well under 1 means something else held the cores."""

    gbps: float
    cpu_share: float


def copy_run(nbytes: int | None = None, repeats: int = COPY_REPEATS, threads: int = 1,
             attempts: int = 1) -> CopyRun:
    """Copy one float32 array of ``nbytes`` into another ``repeats`` times on ``threads`` threads
    (:func:`threaded_copy`) after one untimed copy that faults the pages in; the fastest copy's GB/s (bytes read
    + written) and CPU share. ``attempts`` > 1 runs the ``repeats`` copies again (same arrays) while the fastest
    copy so far had its threads off the CPU for more than ``1 - BUSY_SHARE`` of its time, up to that many times."""
    nbytes = default_copy_bytes() if nbytes is None else nbytes
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4:
        raise ArgumentValueError(f"nbytes must be an int >= 4 (the size of each array), got {nbytes!r}")
    for name, value in (("repeats", repeats), ("attempts", attempts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentValueError(f"{name} must be an int >= 1, got {value!r}")
    _check_threads(threads)
    src = np.empty(nbytes // 4, np.float32)
    src.fill(1.0)
    dst = np.empty_like(src)
    threaded_copy(dst, src, threads)
    best = _timed_copies(dst, src, repeats, threads)
    for _ in range(attempts - 1):
        if best.cpu_share >= BUSY_SHARE:
            break
        again = _timed_copies(dst, src, repeats, threads)
        best = again if again.gbps > best.gbps else best
    return best


def _timed_copies(dst: np.ndarray, src: np.ndarray, repeats: int, threads: int) -> CopyRun:
    """The fastest of ``repeats`` timed copies of ``src`` into ``dst``, with its CPU share."""
    best_ns, best_cpu_ns = math.inf, 0
    for _ in range(repeats):
        cpu_start = time.process_time_ns()
        start = time.perf_counter_ns()
        threaded_copy(dst, src, threads)
        elapsed = time.perf_counter_ns() - start
        cpu_ns = time.process_time_ns() - cpu_start
        if elapsed < best_ns:
            best_ns, best_cpu_ns = elapsed, cpu_ns
    share = min(1.0, best_cpu_ns / (threads * best_ns)) if best_ns > 0 else 1.0
    return CopyRun(gbps(2 * src.nbytes, best_ns), share)


def copy_bandwidth_gbps(nbytes: int | None = None, repeats: int = COPY_REPEATS, threads: int = 1) -> float:
    """GB/s of copying one float32 array of ``nbytes`` into another (bytes read + written) on ``threads``
    threads (:func:`threaded_copy`), best of ``repeats`` copies after one untimed copy that faults the pages in."""
    return copy_run(nbytes, repeats, threads).gbps


def memory_bandwidth_gbps(refresh: bool = False, cache_dir: str | Path | None = None,
                          nbytes: int | None = None, threads: int = 1) -> float:
    """The machine's memory bandwidth as a numpy copy on ``threads`` threads achieves it
    (:func:`copy_bandwidth_gbps`), in GB/s.

    Measured once per process and kept in ``bandwidth.json`` in the aotbench cache directory, keyed by the host
    name, CPU model, numpy version, copy size and thread count, so other machines sharing a home directory keep
    their own and the one-core and all-core figures (``threads=usable_cores()``) are kept side by side;
    ``refresh=True`` measures again. A copy whose threads were off the CPU for more than a tenth of its time
    (other processes held the cores) is measured again, up to ``COPY_ATTEMPTS`` times in all, and the fastest
    kept, with its CPU share (:func:`roofline` says when it stayed low); a figure stored that way is measured
    again by the next process that asks for it, and the faster one kept. ``nbytes`` (default
    :func:`default_copy_bytes`) is for quick tests.
    """
    return float(bandwidth_record(refresh, cache_dir, nbytes, threads)["gbps"])


def bandwidth_record(refresh: bool = False, cache_dir: str | Path | None = None, nbytes: int | None = None,
                     threads: int = 1) -> dict:
    """The stored measurement behind :func:`memory_bandwidth_gbps`: ``gbps``, ``threads``, ``cpu_share`` (of
    the best copy), ``nbytes``, the machine's names and ``measured_at`` (a copy: changing it changes nothing)."""
    _check_threads(threads)
    nbytes = default_copy_bytes() if nbytes is None else nbytes
    root = cache.prepare(Path(cache_dir) if cache_dir is not None else cache.default_cache_dir())
    key = machine_key(nbytes, threads)
    if refresh:
        _known_bandwidth.cache_clear()
        return dict(_measure_and_store(root, key, nbytes, threads, refresh=True))
    return dict(_known_bandwidth(root, key, nbytes, threads))


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model", "cpu model")):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(nbytes: int, threads: int = 1) -> str:
    """What identifies a bandwidth measurement: host, CPU model, numpy version, copy size, thread count."""
    return (f"{socket.gethostname()} | {_cpu_model()} | numpy {np.__version__} | {nbytes} bytes | "
            f"{thread_words(threads)}")


@functools.cache
def _known_bandwidth(root: Path, key: str, nbytes: int, threads: int) -> dict:
    """The stored measurement for ``key``, else a new one (memoised: the disk is read once per process)."""
    return _measure_and_store(root, key, nbytes, threads, refresh=False)


def _measure_and_store(root: Path, key: str, nbytes: int, threads: int, refresh: bool) -> dict:
    """Under the cache's lock (so two processes never copy at once): reuse or measure, then write atomically."""
    path = root / BANDWIDTH_FILE
    with cache.locked(root / "locks" / "bandwidth.lock"):
        data = cache.read_json(path) or {}
        machines = data.get("machines") if isinstance(data.get("machines"), dict) else {}
        known = machines.get(key)
        usable = isinstance(known, dict) and isinstance(known.get("gbps"), (int, float))
        busy = usable and not known.get("cpu_share", 1.0) >= BUSY_SHARE
        if usable and not refresh and not busy:
            return known
        best = copy_run(nbytes, threads=threads, attempts=COPY_ATTEMPTS)
        if usable and not refresh and known["gbps"] > best.gbps:  # measured while busy, yet faster: kept
            return known
        record = {"gbps": best.gbps, "threads": threads, "cpu_share": round(best.cpu_share, 3),
                  "hostname": socket.gethostname(), "cpu": _cpu_model(), "numpy": np.__version__, "nbytes": nbytes,
                  "measured_at": time.time()}
        machines[key] = record
        cache.write_atomic(path, json.dumps({"machines": machines}, indent=1).encode())
    return record


@dataclass(frozen=True)
class Roofline:
    """The bandwidth a memory-bound kernel is held to: ``gbps``, the copy that measured it in words
    (``source``: ``"numpy copy on 2 threads"``, ``"device-to-device copy"``), that copy's ``threads`` (None for a
    device's copy) and a ``note`` when the measurement is in doubt."""

    gbps: float
    source: str
    threads: int | None = None
    note: str = ""

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.source}, {self.gbps:.1f} GB/s{note}"


def thread_words(threads: int) -> str:
    """``1 thread``, ``2 threads``."""
    return f"{threads} thread{'' if threads == 1 else 's'}"


def roofline(device: Any = None, threads: int | None = 1, cache_dir: str | Path | None = None) -> Roofline:
    """The roofline of a kernel on ``device`` (an :class:`aotbench.run.devices.Device`; None: the cpu) that runs
    on ``threads`` CPU threads (None: unknown, as for a Python callable; taken as one).

    On the host (the cpu, the CUDA emulator) it is the numpy copy on ``min(threads, usable_cores())`` threads
    (:func:`memory_bandwidth_gbps`); on a gpu the device's own copy (``device.copy_bandwidth_gbps()``).
    """
    device = seam.CPU if device is None else device
    if not isinstance(device, seam.Cpu):
        return Roofline(float(device.copy_bandwidth_gbps()), device.copy_label)
    if threads is not None:
        _check_threads(threads)
    copy_threads = min(threads or 1, usable_cores())
    record = bandwidth_record(cache_dir=cache_dir, threads=copy_threads)
    label = device.copy_label or HOST_COPY
    if label.startswith(HOST_COPY):  # "numpy copy (host memory: ...)" keeps its words after the thread count
        source = f"{HOST_COPY} on {thread_words(copy_threads)}{label[len(HOST_COPY):]}"
    else:
        source = f"{HOST_COPY} on {thread_words(copy_threads)} ({label})"
    share = record.get("cpu_share")
    note = (f"measured while other processes held the cores: the copy ran {100 * share:.0f}% of the time; "
            f"memory_bandwidth_gbps(refresh=True, threads={copy_threads}) measures again"
            if isinstance(share, (int, float)) and share < BUSY_SHARE else "")
    return Roofline(float(record["gbps"]), source, copy_threads, note)


__all__ = ["CopyRun", "Roofline", "bandwidth_record", "copy_bandwidth_gbps", "copy_run", "default_copy_bytes",
           "machine_key", "memory_bandwidth_gbps", "roofline", "threaded_copy"]
