"""How many CPU threads a kernel runs on, and how many cores this process may use, each with its reason in words.

:func:`usable_cores` is what the scheduler lets this process run on at once: the CPUs of its affinity mask
(``os.sched_getaffinity``), fewer when a cgroup's CPU quota (``cpu.max`` in cgroup v2, ``cpu.cfs_quota_us`` in
v1, on the process's own cgroup and every ancestor) allows less. :func:`thread_use` says how many threads a
kernel library's call uses: 1 for a library without OpenMP; for an OpenMP library, what GNU OpenMP will start —
``omp_get_max_threads()`` asked of the libgomp already loaded in this process (it is never loaded for the
question), else ``OMP_NUM_THREADS``' first number, else libgomp's default, the affinity mask's CPUs; for a library
built for the CUDA emulator, its block threads (:func:`emulator_threads`); an isolated op's worker starts its own
libgomp from the environment it inherits. A host timing of an op records it (``Timing.threads``), and sweep and
compare draw the copy bandwidth on that many threads, at most :func:`usable_cores`.
"""

from __future__ import annotations

import ctypes
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ArgumentTypeError
from ..native.loading import KernelLibrary

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadUse:
    """How many threads (``count``) and why, in words (``source``: ``"no OpenMP"``, ``"OMP_NUM_THREADS=2"`` ...)."""

    count: int
    source: str

    def __str__(self) -> str:
        return f"{self.count} thread{'' if self.count == 1 else 's'} ({self.source})"


def affinity_cores() -> int:
    """The CPUs in this process's affinity mask (``os.cpu_count()`` where the platform has no mask)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPUs' worth of time this process's cgroups allow (quota / period, the smallest along the cgroup's
    path to the root, v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``), or None when no quota is set or none is
    readable. ``root`` and ``proc_cgroup`` are for tests."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not hierarchy:
            continue
        if controllers == "":  # cgroup v2: one unified hierarchy (under unified/ on a hybrid system)
            unified = root if (root / "cgroup.controllers").exists() else root / "unified"
            limits += _along_path(unified, path, _v2_limit)
        elif "cpu" in controllers.split(","):
            mount = root / controllers
            if not mount.is_dir():  # some systems mount v1 controllers one by one
                mount = root / "cpu"
            limits += _along_path(mount, path, _v1_limit)
    return min(limits) if limits else None


def _along_path(mount: Path, path: str, read) -> list[float]:
    """The limits in ``mount``/``path`` and each of its ancestors up to ``mount`` (inside a container the path
    may not exist under the mount, which is then the container's own cgroup)."""
    found = []
    parts = [p for p in path.strip("/").split("/") if p]
    for depth in range(len(parts), -1, -1):
        limit = read(mount.joinpath(*parts[:depth]))
        if limit is not None:
            found.append(limit)
    return found


def _v2_limit(directory: Path) -> float | None:
    try:
        quota, _, period = (directory / "cpu.max").read_text().strip().partition(" ")
        return int(quota) / int(period) if quota != "max" and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def _v1_limit(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def core_use() -> ThreadUse:
    """:func:`usable_cores` with its reason: ``"2 usable cores (affinity)"`` or, under a smaller quota,
    ``"1 usable core (cgroup CPU quota 1.0 CPUs; affinity 2)"``."""
    affinity = affinity_cores()
    quota = cgroup_cpu_limit()
    if quota is not None and math.ceil(quota) < affinity:
        count = max(1, math.ceil(quota))
        reason = f"cgroup CPU quota {quota:g} CPUs; affinity {affinity}"
    else:
        count, reason = affinity, "affinity"
    return ThreadUse(count, f"{count} usable core{'' if count == 1 else 's'} ({reason})")


def usable_cores() -> int:
    """How many cores this process can run on at once: the affinity mask's CPUs, fewer under a cgroup CPU quota
    (rounded up: a quota of 1.5 CPUs lets two threads run, each part of the time)."""
    return core_use().count


def _omp_num_threads() -> int | None:
    """``OMP_NUM_THREADS``' first number (it may list one per nesting level, ``"4,2"``), or None."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def _loaded_libgomp() -> ctypes.CDLL | None:
    """GNU OpenMP's runtime if this process has it loaded already (never loads it)."""
    try:
        return ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return None


def openmp_threads(in_worker: bool = False) -> ThreadUse:
    """The threads an OpenMP parallel region without a ``num_threads`` clause gets from GNU OpenMP here.

    Asked of the loaded libgomp (``omp_get_max_threads()``, which read ``OMP_NUM_THREADS`` when it loaded);
    ``in_worker=True`` (an isolated op: a worker process started with this process's environment and affinity
    loads a fresh libgomp) reads ``OMP_NUM_THREADS`` now, else takes libgomp's default, the affinity mask's CPUs.
    """
    env = os.environ.get("OMP_NUM_THREADS")
    gomp = None if in_worker else _loaded_libgomp()
    if gomp is not None:
        ask = gomp.omp_get_max_threads
        ask.restype, ask.argtypes = ctypes.c_int, []
        count = max(1, int(ask()))
        return ThreadUse(count, "omp_get_max_threads()" + (f", OMP_NUM_THREADS={env}" if env is not None else ""))
    first = _omp_num_threads()
    if first is not None:
        return ThreadUse(first, f"OMP_NUM_THREADS={env}")
    cores = affinity_cores()
    return ThreadUse(cores, f"libgomp's default: the {cores} CPU{'' if cores == 1 else 's'} of the affinity mask")


def emulator_threads() -> ThreadUse:
    """The CPU threads aotbench's CUDA emulator runs a launch's blocks on (at most one per block):
    ``AOTBENCH_EMULATOR_THREADS`` when set to a positive number, else the affinity mask's CPUs."""
    env = os.environ.get("AOTBENCH_EMULATOR_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return ThreadUse(int(env), f"the CUDA emulator's block threads, AOTBENCH_EMULATOR_THREADS={env}")
    cores = affinity_cores()
    return ThreadUse(cores, f"the CUDA emulator's block threads: the {cores} CPU{'' if cores == 1 else 's'} of "
                            "the affinity mask")


def _library_of(kernel_or_library: Any) -> KernelLibrary | None:
    if isinstance(kernel_or_library, KernelLibrary):
        return kernel_or_library
    library = getattr(kernel_or_library, "library", None)  # an Op, a run.kernel.Kernel
    return library if isinstance(library, KernelLibrary) else None


def _runs_in_worker(kernel_or_library: Any) -> bool:
    from .worker import InWorker  # lazily: the worker's module is only needed when an op has a runner

    return isinstance(getattr(kernel_or_library, "runner", None), InWorker)


def thread_use(kernel_or_library: Any) -> ThreadUse:
    """The threads a call of this kernel uses, and why (see the module's rules). Takes a
    :class:`~aotbench.native.loading.KernelLibrary`, a :class:`~aotbench.run.kernel.Kernel` or an op (an isolated
    op's calls run in its worker: judged by the environment the worker inherits)."""
    library = _library_of(kernel_or_library)
    if library is None:
        raise ArgumentTypeError(f"thread_use needs an op, a Kernel or a KernelLibrary, got "
                                f"{type(kernel_or_library).__name__}")
    if library.emulator:
        return emulator_threads()
    if not library.openmp:
        return ThreadUse(1, "no OpenMP")
    return openmp_threads(in_worker=_runs_in_worker(kernel_or_library))


def kernel_threads(kernel_or_library: Any) -> int:
    """How many threads a call of this kernel uses: ``thread_use(kernel_or_library).count``."""
    return thread_use(kernel_or_library).count


def callable_thread_use(fn: Any) -> ThreadUse | None:
    """:func:`thread_use` of an op or kernel; None for anything else (a Python callable's threads are unknown)."""
    return thread_use(fn) if _library_of(fn) is not None else None


__all__ = ["ThreadUse", "affinity_cores", "callable_thread_use", "cgroup_cpu_limit", "core_use", "emulator_threads",
           "kernel_threads",
           "openmp_threads", "thread_use", "usable_cores"]
