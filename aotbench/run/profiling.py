"""Sample where a kernel's threads are while it runs again and again: the raw half of ``op.profile``.

The sampler is the native runtime's (``native/include/aotb_sampler.h``): every ``interval_ns`` each profiled
thread gets a SIGPROF from a timer of its own and records its program counter and the CPU time it used since its
previous sample. No privileges are needed (no ``perf_event_open``). Which threads: the calling thread, and every other
thread of the process that used the CPU while a few calls ran before sampling (an OpenMP kernel's team, the
emulator's block threads), but not the process's other Python threads, whose work is never this call's (another
op running, a notebook's own threads); a thread sampled while it waited weighs almost nothing. The addresses are
resolved here, in the process that ran them (an isolated op's worker), to a module, an address inside it and a
symbol; :mod:`aotbench.tools.profile` turns them into lines and instructions.

Whatever stops the calls (an exception from the kernel, Ctrl-C's ``KeyboardInterrupt``) stops the timers first.
A child forked during a profile starts with no profile running: the lock here and the native sampler are reset
in it.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import AotbenchError, ArgumentValueError
from ..native.runtime import process_runtime

DEFAULT_INTERVAL_NS = 1_000_000  # 1 kHz per thread: a signal costs ~24 us of CPU in this VM (bench/bench_profile.py)
MIN_SAMPLES = 1000
MAX_SECONDS_FACTOR = 10  # to reach MIN_SAMPLES a profile may run up to this many times `seconds`
MAX_STORED_SAMPLES = 1 << 21  # 76 bytes each (160 MB at most, touched only as filled); a full buffer ends the run
MAX_THREADS = 256  # kMaxProfiledThreads in native/include/aotb_sampler.h
_CHECK_NS = 20_000_000  # how often the sampled loop looks at the samples taken
_DISCOVERY_NS = 50_000_000  # calls run unsampled first for at least this long: the baseline and the threads
_BUSY_SHARE = 0.05  # a thread that used this share of the discovery's wall time takes part in the kernel

_LOCK = threading.Lock()  # one profile per process: one SIGPROF, one sampler


def _after_fork_in_child() -> None:
    """A fork while another thread profiled copies the lock held, by a thread the child does not have."""
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class Location:
    """Where one sampled address is: the module's path ('' when no module maps it), the address inside the
    module (its ELF address: the program counter less the module's load address) and the nearest exported
    symbol ('' when none)."""

    module: str
    address: int
    symbol: str


@dataclass(frozen=True)
class RawProfile:
    """The samples of one profile run, as plain data (it pickles: an isolated op's worker sends it back).

    ``pcs`` (one row per sample: the program counter, then return addresses, 0 where the stack ended),
    ``slots`` and ``cpu_ns`` have one entry per sample: the sampled thread's index in
    ``threads`` (0 is the calling thread) and the CPU time that thread used since its previous sample, which is
    the sample's weight. ``locations`` resolves every distinct counter."""

    pcs: np.ndarray
    slots: np.ndarray
    cpu_ns: np.ndarray
    threads: tuple[int, ...]
    locations: dict[int, Location]
    calls: int
    wall_ns: int
    interval_ns: int
    baseline_ns_per_call: float  # the same calls unsampled: the mean of a run before and one after
    dropped: int = 0  # samples taken past the buffer (counted, not stored)
    thread_cpu_ns: tuple[int, ...] = field(default=())  # CPU time of each thread over the sampled run
    process_cpu_ns: int = 0  # CPU time of the whole process over the sampled run (every thread, sampled or not)
    buffer_full: bool = False  # the run ended early because the sample buffer was full

    @property
    def ns_per_call(self) -> float:
        return self.wall_ns / max(self.calls, 1)

    @property
    def overhead(self) -> float:
        """How much slower a call was while sampled than before, as a fraction (noise can make it negative)."""
        return self.ns_per_call / self.baseline_ns_per_call - 1.0 if self.baseline_ns_per_call > 0 else 0.0


def thread_cpu_ns(tid: int) -> int | None:
    """CPU time a thread of this process has used, in ns (None when it has exited)."""
    try:
        return time.clock_gettime_ns(((~tid) << 3) | 6)  # the kernel's clock id of a thread's CPU time
    except OSError:
        return None


def _unsampled(call: Callable[[], object], at_least_ns: int) -> float:
    """ns per call of the calls lasting ``at_least_ns`` (one at least, which may last longer), unsampled: the
    baseline of the overhead. A kernel whose call takes seconds is called once here, not three times."""
    calls, start = 0, time.perf_counter_ns()
    while calls < 1 or time.perf_counter_ns() - start < at_least_ns:
        call()
        calls += 1
    return (time.perf_counter_ns() - start) / calls


def _threads() -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:
        return [threading.get_native_id()]


def _other_python_threads(me: int) -> set[int]:
    """The native ids of the process's Python threads other than the caller's: never the kernel's workers."""
    return {t.native_id for t in threading.enumerate() if t.native_id is not None and t.native_id != me}


def waiting_threshold_ns(interval_ns: int) -> int:
    """A sample whose thread used less CPU than this since its previous one found it waiting: the signal's own
    delivery is charged to the thread (about 25 us in this VM), so a waiting thread's weight is never quite 0."""
    return interval_ns // 4


def check_seconds(seconds: object) -> None:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds) \
            or not 0 < seconds <= 3600:
        raise ArgumentValueError(f"seconds={seconds!r}: give how long to sample, a number of seconds in (0, 3600]")


def sample(runtime, call: Callable[[], object], *, seconds: float = 1.0, interval_ns: int = DEFAULT_INTERVAL_NS,
           min_samples: int = MIN_SAMPLES) -> RawProfile:
    """Run ``call()`` repeatedly for ``seconds`` (longer, up to ``MAX_SECONDS_FACTOR`` times, until
    ``min_samples`` samples of running threads are in) while the native sampler of ``runtime`` records where the
    threads that run the kernel are."""
    check_seconds(seconds)
    runtime = process_runtime(runtime)  # one SIGPROF handler per process, as for SIGINT
    with _LOCK:  # a second profile waits for the first: one SIGPROF handler, one set of timers
        return _sample(runtime, call, float(seconds), int(interval_ns), int(min_samples))


def _sample(runtime, call, seconds: float, interval_ns: int, min_samples: int) -> RawProfile:
    me = threading.get_native_id()
    if signal.SIGPROF in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        raise AotbenchError("SIGPROF is blocked on this thread (signal.pthread_sigmask, or a library that blocked "
                            "it), so the sampler's signals would never arrive: unblock it to profile "
                            "(signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGPROF]))")
    call()  # plans the signature and starts any thread pool, before threads are counted
    before = {t: thread_cpu_ns(t) for t in _threads()}
    start = time.perf_counter_ns()
    before_ns_per_call = _unsampled(call, _DISCOVERY_NS)
    discovery_ns = time.perf_counter_ns() - start
    python_threads = _other_python_threads(me)
    used: dict[int, int] = {}
    for tid, was in before.items():
        now = thread_cpu_ns(tid)
        if tid != me and tid not in python_threads and was is not None and now is not None \
                and now - was >= _BUSY_SHARE * discovery_ns:
            used[tid] = now - was
    busy = [me] + sorted(used, key=lambda t: -used[t])[: MAX_THREADS - 1]  # the busiest, past the sampler's limit
    max_seconds = seconds * MAX_SECONDS_FACTOR
    capacity = min(int(len(busy) * max_seconds * 1e9 / interval_ns * 1.25) + 4096, MAX_STORED_SAMPLES)
    depth = int(runtime.lib.aotb_profile_depth())
    pcs = np.zeros((capacity, depth), np.uint64)  # calloc'd: pages are touched only as samples arrive
    slots = np.zeros(capacity, np.int32)
    cpu = np.zeros(capacity, np.int64)
    tids = np.asarray(busy, np.int32)
    cpu_before = [thread_cpu_ns(t) or 0 for t in busy]
    calls, full = 0, False
    process_before = time.process_time_ns()
    start = time.perf_counter_ns()
    try:  # the timers start inside: whatever ends the loop, a KeyboardInterrupt between two lines too, stops them
        err = runtime.lib.aotb_profile_start(tids.ctypes.data, len(busy), interval_ns, pcs.ctypes.data,
                                             slots.ctypes.data, cpu.ctypes.data, capacity)
        if err:
            raise AotbenchError(f"the sampling profiler could not start: {os.strerror(err)} (timer_create or "
                                "sigaction refused). Nothing was left running; the op is unchanged")
        start = time.perf_counter_ns()
        deadline, limit, check_at = start + seconds * 1e9, start + max_seconds * 1e9, start + _CHECK_NS
        while True:
            call()
            calls += 1
            now = time.perf_counter_ns()
            if now >= check_at:
                taken = int(runtime.lib.aotb_profile_taken())
                if taken >= capacity:  # the buffer is full: more samples would be counted, not stored
                    full = True
                    break
                # enough time: enough samples of running threads too?
                if now >= deadline and (now >= limit or int(np.count_nonzero(cpu[:taken] > waiting_threshold_ns(interval_ns))) >= min_samples):
                    break
                check_at = now + _CHECK_NS
    finally:
        taken = int(runtime.lib.aotb_profile_stop())  # idempotent; with no start (err) it is not used
        wall = time.perf_counter_ns() - start
        process_cpu = time.process_time_ns() - process_before
    cpu_after = [thread_cpu_ns(t) for t in busy]
    baseline = (before_ns_per_call + _unsampled(call, max(_DISCOVERY_NS, int(0.1 * wall)))) / 2
    n = min(taken, capacity)
    pcs, slots, cpu = pcs[:n].copy(), slots[:n].copy(), cpu[:n].copy()
    return RawProfile(pcs, slots, cpu, tuple(busy), resolve(np.unique(pcs[pcs != 0]).tolist()), calls, wall,
                      interval_ns, baseline, dropped=max(taken - capacity, 0),
                      thread_cpu_ns=tuple((a - b) if a is not None else 0 for a, b in zip(cpu_after, cpu_before)),
                      process_cpu_ns=process_cpu, buffer_full=full)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


_libc = ctypes.CDLL(None)
_dladdr = _libc.dladdr
_dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
_dladdr.restype = ctypes.c_int


def resolve(pcs: list[int]) -> dict[int, Location]:
    """Each program counter's module, address inside it and nearest exported symbol (``dladdr``)."""
    found: dict[int, Location] = {}
    info = _DlInfo()
    for pc in pcs:
        if pc and _dladdr(pc, ctypes.byref(info)) and info.dli_fname:
            module = os.path.realpath(info.dli_fname.decode(errors="replace"))
            base = info.dli_fbase or 0
            found[pc] = Location(module, pc - base, (info.dli_sname or b"").decode(errors="replace"))
        else:
            found[pc] = Location("", pc, "")
    return found
