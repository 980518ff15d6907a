"""The machine's memory bandwidth, as a large numpy copy achieves it: the roofline of a memory-bound kernel.

Measured once per machine and kept in the aotbench cache directory (``bandwidth.json``), so a sweep's plot or
a benchmark notebook does not pay for a 256 MiB copy every time.
"""

from __future__ import annotations

import functools
import json
import math
import platform
import socket
import time
from pathlib import Path

import numpy as np

from ..build import cache
from ..errors import ArgumentValueError
from .timing import _llc_bytes, gbps

MIN_COPY_BYTES = 256 << 20
COPY_REPEATS = 5
BANDWIDTH_FILE = "bandwidth.json"


def default_copy_bytes() -> int:
    """Bytes per array of the bandwidth copy: 256 MiB, or 4x the last-level cache if that is larger."""
    return max(MIN_COPY_BYTES, 4 * _llc_bytes())


def copy_bandwidth_gbps(nbytes: int | None = None, repeats: int = COPY_REPEATS) -> float:
    """GB/s of ``np.copyto`` between two float32 arrays of ``nbytes`` each (bytes read + written), best of
    ``repeats`` copies after one untimed copy that faults the pages in."""
    nbytes = default_copy_bytes() if nbytes is None else nbytes
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4:
        raise ArgumentValueError(f"nbytes must be an int >= 4 (the size of each array), got {nbytes!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ArgumentValueError(f"repeats must be an int >= 1, got {repeats!r}")
    src = np.empty(nbytes // 4, np.float32)
    src.fill(1.0)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter_ns()
        np.copyto(dst, src)
        best = min(best, time.perf_counter_ns() - start)
    return gbps(2 * src.nbytes, best)


def memory_bandwidth_gbps(refresh: bool = False, cache_dir: str | Path | None = None,
                          nbytes: int | None = None) -> float:
    """The machine's memory bandwidth as a numpy copy achieves it (:func:`copy_bandwidth_gbps`), in GB/s.

    Measured once per process and kept in ``bandwidth.json`` in the aotbench cache directory, keyed by the host
    name, CPU model, numpy version and copy size, so other machines sharing a home directory keep their own;
    ``refresh=True`` measures again. ``nbytes`` (default :func:`default_copy_bytes`) is for quick tests.
    """
    nbytes = default_copy_bytes() if nbytes is None else nbytes
    root = cache.prepare(Path(cache_dir) if cache_dir is not None else cache.default_cache_dir())
    key = machine_key(nbytes)
    if refresh:
        _known_bandwidth.cache_clear()
        return _measure_and_store(root, key, nbytes, refresh=True)
    return _known_bandwidth(root, key, nbytes)


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model", "cpu model")):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(nbytes: int) -> str:
    """What identifies a bandwidth measurement: host, CPU model, numpy version, copy size."""
    return f"{socket.gethostname()} | {_cpu_model()} | numpy {np.__version__} | {nbytes} bytes"


@functools.cache
def _known_bandwidth(root: Path, key: str, nbytes: int) -> float:
    """The stored measurement for ``key``, else a new one (memoised: the disk is read once per process)."""
    return _measure_and_store(root, key, nbytes, refresh=False)


def _measure_and_store(root: Path, key: str, nbytes: int, refresh: bool) -> float:
    """Under the cache's lock (so two processes never copy at once): reuse or measure, then write atomically."""
    path = root / BANDWIDTH_FILE
    with cache.locked(root / "locks" / "bandwidth.lock"):
        data = cache.read_json(path) or {}
        machines = data.get("machines") if isinstance(data.get("machines"), dict) else {}
        known = machines.get(key)
        if not refresh and isinstance(known, dict) and isinstance(known.get("gbps"), (int, float)):
            return float(known["gbps"])
        value = copy_bandwidth_gbps(nbytes)
        machines[key] = {"gbps": value, "hostname": socket.gethostname(), "cpu": _cpu_model(),
                         "numpy": np.__version__, "nbytes": nbytes, "measured_at": time.time()}
        cache.write_atomic(path, json.dumps({"machines": machines}, indent=1).encode())
    return value


__all__ = ["copy_bandwidth_gbps", "default_copy_bytes", "machine_key", "memory_bandwidth_gbps"]
