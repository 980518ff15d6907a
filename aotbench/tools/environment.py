"""The facts of a process that change timings (host, CPU, malloc and thread-count environment, versions, Dask),
and the notes a sweep adds when its points ran somewhere that differs from the client or distorts a reference.

Why: a sweep on an executor times the op in other processes, perhaps on other machines. Their numbers are only
comparable with the client's when these facts match. The known trap: Dask's nanny starts workers with
``MALLOC_TRIM_THRESHOLD_=65536``. Setting any of glibc's malloc tunables turns off its dynamic mmap threshold,
so every large temporary of a numpy reference is mapped and faulted in afresh: the reference runs several times
slower there while a kernel writing into a ready output does not, and the speed-up looks bigger than it is.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass

MALLOC_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX", "MALLOC_TOP_PAD_")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
# glibc's mallopt sets no_dyn_threshold for these: big temporaries are then mmapped and faulted in on every call.
DISTORTING_MALLOC_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
DASK_FIX = ("with Dask, start the workers without it: dask.config.set({'distributed.nanny.pre-spawn-environ."
            "MALLOC_TRIM_THRESHOLD_': None}) before creating the cluster (or the same key as null in the Dask "
            "config file), and leave it unset in the shell")


@dataclass(frozen=True)
class ProcessFacts:
    """Where one process ran: host, CPU model, usable CPUs, the malloc and thread-count variables that are set
    (name, value pairs, sorted), the python and numpy versions, and whether it is a Dask worker."""

    host: str
    cpu: str
    cpus: int
    malloc: tuple[tuple[str, str], ...] = ()
    threads: tuple[tuple[str, str], ...] = ()
    python: str = ""
    numpy: str = ""
    dask_worker: bool = False
    pid: int = 0

    @property
    def environ(self) -> dict[str, str]:
        """The recorded malloc and thread-count variables as one dict (unset ones absent)."""
        return dict(self.malloc + self.threads)

    @property
    def where(self) -> str:
        """The machine in words: host and CPU model."""
        return f"{self.host} ({self.cpu or 'unknown CPU'})"


def process_facts() -> ProcessFacts:
    """The facts of the calling process: the static ones read once per process id (a forked child reads its own),
    the cheap ones (CPU affinity, thread variables, Dask worker or not) at every call."""
    host, cpu, malloc, py, npv = _static_facts(os.getpid())
    threads = tuple((k, os.environ[k]) for k in THREAD_VARS if k in os.environ)
    return ProcessFacts(host, cpu, _usable_cpus(), malloc, threads, py, npv, _in_dask_worker(), os.getpid())


@functools.lru_cache(maxsize=1)
def _static_facts(pid: int) -> tuple[str, str, tuple[tuple[str, str], ...], str, str]:
    """Keyed by pid so that a forked child does not report its parent's memo."""
    numpy = sys.modules.get("numpy")
    initial = _initial_environ()
    malloc = tuple((k, initial[k]) for k in MALLOC_VARS if k in initial)
    return (socket.gethostname(), _cpu_model(), malloc, platform.python_version(),
            getattr(numpy, "__version__", ""))


def _initial_environ() -> dict[str, str]:
    """The environment the process started with (/proc/self/environ): glibc reads its malloc variables there,
    once, so a later change of os.environ (a Dask nanny writes its pre-spawn variables into its own process)
    has no effect on this process's malloc. Elsewhere than Linux: os.environ."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _in_dask_worker() -> bool:
    """True inside a Dask worker; distributed is consulted only when something already imported it."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        distributed.get_worker()
    except Exception:  # noqa: BLE001 - ValueError outside a worker; an unusual version: "not known to be"
        return False
    return True


def sweep_notes(client: ProcessFacts, facts: Sequence[ProcessFacts | None], has_reference: bool) -> list[str]:
    """Sentences about the points' facts: other hosts or CPUs than the client's, other CPU counts, environment
    or versions; and the malloc settings known to slow a numpy reference (so to inflate the speed-up)."""
    known = [f for f in facts if f is not None]
    notes = []
    away = [f for f in known if (f.host, f.cpu) != (client.host, client.cpu)]
    if away:
        places = ", ".join(sorted({f.where for f in away}))
        notes.append(f"{len(away)} of {len(facts)} points ran on another machine than this one "
                     f"({client.where}): {places}.")
    cpus = sorted({f.cpus for f in known if f.cpus != client.cpus})
    if cpus:
        notes.append(f"Points could use {_join(map(str, cpus))} CPUs, this process {client.cpus}.")
    changed = environ_differences(client, known)
    if changed:
        notes.append(f"The points' environment differs from this process's: {'; '.join(changed)}.")
    versions = sorted({(f.python, f.numpy) for f in known} - {(client.python, client.numpy)})
    if versions:
        seen = _join(f"python {p} with numpy {n or '?'}" for p, n in versions)
        notes.append(f"Points ran {seen}; this process runs python {client.python} with numpy {client.numpy}.")
    distorted = [f for f in known if distorting_malloc(f)]
    if distorted and has_reference:
        names = _join(sorted({f"{k}={v}" for f in distorted for k, v in distorting_malloc(f)}))
        fix = DASK_FIX if any(f.dask_worker for f in distorted) else "unset it where the points run"
        notes.append(f"{len(distorted)} of {len(facts)} points ran with {names}: with it set, a numpy reference "
                     "that allocates temporaries runs several times slower (measured 4-7x at 256x256 float32), which distorts the reference's time and so the op's speed-up over it; "
                     f"{fix}.")
    return notes


def environ_differences(client: ProcessFacts, facts: Sequence[ProcessFacts]) -> list[str]:
    """Each recorded variable whose value in some point differs from the client's, as ``NAME=value (here X)``."""
    here = client.environ
    out = []
    for name in MALLOC_VARS + THREAD_VARS:
        values = sorted({f.environ.get(name, "unset") for f in facts} - {here.get(name, "unset")})
        if values:
            out.append(f"{name}={'/'.join(values)} (here {here.get(name, 'unset')})")
    return out


def distorting_malloc(facts: ProcessFacts) -> tuple[tuple[str, str], ...]:
    """The malloc variables set in that process that slow numpy temporaries (any value: setting one at all turns
    off glibc's dynamic mmap threshold)."""
    return tuple((k, v) for k, v in facts.malloc if k in DISTORTING_MALLOC_VARS)


def _join(items) -> str:
    items = list(items)
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else "".join(items)


__all__ = ["ProcessFacts", "distorting_malloc", "environ_differences", "process_facts", "sweep_notes"]
