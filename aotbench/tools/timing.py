"""Honest timing of one callable: ``aotbench.bench(fn, *args, budget_ms=200)`` -> :class:`Timing`.

The method (IPython's ``%timeit`` autorange and triton's ``do_bench``, in our own words):

1. one untimed call (a first call plans the signature, runs ``Init``, faults pages in);
2. an estimate: calls in batches of 1, 2, 5, 10, 20, 50 ... until one batch lasts long enough to read the clock
   accurately (``MIN_SAMPLE_NS``);
3. warm-up calls (``warmup``, default: about a tenth of the budget);
4. samples of ``number`` calls each, as many as fit in ``budget_ms`` (within ``min_samples`` and
   ``max_samples``), with the garbage collector off. ``flush_cache=True`` makes every sample one call preceded
   by a write over a buffer larger than the last-level cache, so the call starts with cold caches; the flush is
   not timed.

Statistics come from one pure function, :func:`summarize`. Every time is in nanoseconds per call and every
name says its unit. A cpu op's timing records the CPU threads its kernel ran on and why (:mod:`aotbench.run.threads`:
OpenMP's thread count, the emulator's block threads, 1 without OpenMP). A gpu op, or any callable given device
arrays, is timed on the device with CUDA events and an L2 flush between calls (:mod:`aotbench.tools.gpu_timing`).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ArgumentValueError
from ..run import devices as seam
from ..run.threads import callable_thread_use

MIN_SAMPLE_NS = 20_000  # a sample shorter than this is dominated by the clock read (~50-100 ns) and jitter
BATCHES = (1, 2, 5)  # autorange multiplies these by 10, 100, ...
DEFAULT_FLUSH_BYTES = 64 << 20


@dataclass(frozen=True)
class Stats:
    """Summary statistics of per-call times, all in ns: median, quartiles, IQR, min, max, mean, count."""

    median_ns: float
    q1_ns: float
    q3_ns: float
    min_ns: float
    max_ns: float
    mean_ns: float
    count: int

    @property
    def iqr_ns(self) -> float:
        """Interquartile range: the spread of the middle half of the samples."""
        return self.q3_ns - self.q1_ns


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method) on an already sorted list."""
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(samples_ns) -> Stats:
    """The statistics of a sequence of per-call times in ns (pure: no clock, no state)."""
    ordered = sorted(float(s) for s in samples_ns)
    if not ordered:
        raise ArgumentValueError("no samples to summarize")
    if any(not math.isfinite(s) or s < 0 for s in ordered):
        raise ArgumentValueError("samples must be finite, non-negative times in ns")
    return Stats(median_ns=_quantile(ordered, 0.5), q1_ns=_quantile(ordered, 0.25), q3_ns=_quantile(ordered, 0.75),
                 min_ns=ordered[0], max_ns=ordered[-1], mean_ns=sum(ordered) / len(ordered), count=len(ordered))


def shown_label(label: str, timing: Timing) -> str:
    """An entry's label as tables and plots show it: an emulated op's says so (its times are the CPU's)."""
    return f"{label} (emulated on the CPU)" if timing.device == "emulated" else label


def format_ns(ns: float) -> str:
    """A time with a readable unit: ``850 ns``, ``12.3 us``, ``4.56 ms``, ``1.20 s``."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            value = ns / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{ns:.0f} ns"


@dataclass(frozen=True, repr=False)
class Timing:
    """The samples of one :func:`bench` run (ns per call, one per sample) and their statistics."""

    samples_ns: tuple[float, ...]
    number: int = 1  # calls per sample
    label: str = ""
    device: str = "cpu"
    flushed: bool = False  # every sample started with cold caches
    clock: str = "perf_counter"  # or "cuda events" (device time)
    launch_overhead_ns: float | None = None  # gpu: host time per launch, measured apart from the device time
    graph: bool = False  # gpu: the samples are CUDA-graph replays
    notes: tuple[str, ...] = ()  # what may make the numbers less than honest, in words
    #: the CPU threads a call of the kernel used (None: a Python callable, or a gpu op's device time)
    threads: int | None = None
    thread_source: str = ""  # why that many, in words: "no OpenMP", "omp_get_max_threads(), OMP_NUM_THREADS=2"
    stats: Stats = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stats", summarize(self.samples_ns))

    @property
    def median_ns(self) -> float:
        return self.stats.median_ns

    @property
    def iqr_ns(self) -> float:
        return self.stats.iqr_ns

    @property
    def q1_ns(self) -> float:
        return self.stats.q1_ns

    @property
    def q3_ns(self) -> float:
        return self.stats.q3_ns

    @property
    def min_ns(self) -> float:
        return self.stats.min_ns

    @property
    def count(self) -> int:
        """How many samples (each the mean of ``number`` calls)."""
        return self.stats.count

    def __str__(self) -> str:
        label = f"{self.label}: " if self.label else ""
        cold = (", L2 flushed" if self.device == "gpu" else ", cold caches") if self.flushed else ""
        device = "; emulated on the CPU" if self.device == "emulated" else ""
        if self.device == "gpu":
            device = f"; device time from {self.clock}" + (", CUDA graph replay" if self.graph else "")
            if self.launch_overhead_ns is not None:
                device += f"; host launch {format_ns(self.launch_overhead_ns)}"
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        return (f"{label}{format_ns(self.median_ns)} median, IQR {format_ns(self.iqr_ns)}, min "
                f"{format_ns(self.min_ns)} ({self.count} samples of {self.number} call(s){cold}){device}"
                f"{self._threads_text()}{notes}")

    def threads_text(self) -> str:
        """``2 threads (OMP_NUM_THREADS=2)``, or "" when the threads are unknown (a Python callable)."""
        if self.threads is None:
            return ""
        words = f"{self.threads} thread{'' if self.threads == 1 else 's'}"
        return f"{words} ({self.thread_source})" if self.thread_source else words

    def _threads_text(self) -> str:
        text = self.threads_text()
        return f"; {text}" if text else ""

    def __repr__(self) -> str:  # the samples are in .samples_ns; a repr of thousands of numbers helps nobody
        return f"<Timing {self}>"

    def _repr_html_(self) -> str:
        from html import escape

        return f"<code>{escape(str(self))}</code>"


def _llc_bytes() -> int:
    """The largest CPU cache this machine reports (sysfs), or 0 when it cannot be read."""
    best = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = size_file.read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best


def flush_buffer_bytes() -> int:
    """Bytes written to evict the caches before a cold sample: twice the last-level cache, at least 64 MiB."""
    return max(DEFAULT_FLUSH_BYTES, 2 * _llc_bytes())


def _check_args(budget_ms: float, warmup: int | None, min_samples: int, max_samples: int) -> None:
    if isinstance(budget_ms, bool) or not isinstance(budget_ms, (int, float)) or not budget_ms > 0:
        raise ArgumentValueError(f"budget_ms must be a positive number of milliseconds, got {budget_ms!r}")
    if warmup is not None and (isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0):
        raise ArgumentValueError(f"warmup is a number of calls (an int >= 0) or None for automatic, got {warmup!r}")
    if not (isinstance(min_samples, int) and isinstance(max_samples, int) and 1 <= min_samples <= max_samples):
        raise ArgumentValueError(f"need 1 <= min_samples <= max_samples, got {min_samples} and {max_samples}")


def _batch_ns(fn: Callable, args: tuple, number: int, timer: Callable[[], int]) -> int:
    start = timer()
    for _ in range(number):
        fn(*args)
    return timer() - start


def autorange(fn: Callable, args: tuple, timer: Callable[[], int] = time.perf_counter_ns,
              min_sample_ns: int = MIN_SAMPLE_NS) -> tuple[int, float]:
    """Calls per sample so that one sample lasts at least ``min_sample_ns``, and the ns per call seen then."""
    scale = 1
    while True:
        for base in BATCHES:
            number = base * scale
            elapsed = _batch_ns(fn, args, number, timer)
            if elapsed >= min_sample_ns or number >= 10**9:
                return number, elapsed / number
        scale *= 10


def bench(fn: Callable, *args: Any, budget_ms: float = 200.0, warmup: int | None = None,
          flush_cache: bool | None = None, graph: bool = False, min_samples: int = 5, max_samples: int = 10_000,
          label: str | None = None, timer: Callable[[], int] = time.perf_counter_ns) -> Timing:
    """Time ``fn(*args)``: samples of per-call ns within about ``budget_ms`` (see the module's method).

    ``warmup`` is a number of calls (None: about a tenth of the budget); ``flush_cache=True`` times each call
    alone after evicting the caches (default: on for device work, off on the cpu); ``timer`` is the clock in ns
    (tests pass a fake one). The garbage collector is off while timing. The device the call runs on
    (:func:`aotbench.run.devices.for_call`: a gpu op, or a callable given device arrays) chooses the clock:
    CUDA events for the gpu (:mod:`aotbench.tools.gpu_timing`; ``graph=True`` replays a CUDA graph).
    """
    _check_args(budget_ms, warmup, min_samples, max_samples)
    if not callable(fn):
        raise ArgumentTypeError(f"bench needs a callable, got {type(fn).__name__}")
    return seam.for_call(fn, args).bench(fn, args, budget_ms=budget_ms, warmup=warmup, flush_cache=flush_cache,
                                         graph=graph, min_samples=min_samples, max_samples=max_samples,
                                         label=label, timer=timer)


def bench_host(fn: Callable, args: tuple, *, budget_ms: float, warmup: int | None, flush_cache: bool | None,
               graph: bool, min_samples: int, max_samples: int, label: str | None,
               timer: Callable[[], int]) -> Timing:
    """The cpu's clock for :func:`bench` (arguments already checked)."""
    if graph:
        raise ArgumentValueError("graph=True replays a CUDA graph: it is for gpu ops and callables on device arrays")
    flush_cache = bool(flush_cache)
    label = label if label is not None else getattr(fn, "name", getattr(fn, "__name__", ""))
    budget_ns = budget_ms * 1e6
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        fn(*args)  # untimed: the first call of a signature plans it
        number, estimate_ns = autorange(fn, args, timer)
        if warmup is None:
            warmup = int(min(0.1 * budget_ns / max(estimate_ns, 1.0), 10_000))
        for _ in range(warmup):
            fn(*args)
        if flush_cache:
            samples = _cold_samples(fn, args, budget_ns, estimate_ns, min_samples, max_samples, timer)
            number = 1
        else:
            wanted = int(budget_ns / max(number * estimate_ns, 1.0))
            count = min(max(wanted, min_samples), max_samples)
            samples = [_batch_ns(fn, args, number, timer) / number for _ in range(count)]
    finally:
        if gc_was_enabled:
            gc.enable()
    use = callable_thread_use(fn)
    return Timing(tuple(samples), number=number, label=label, flushed=flush_cache,
                  threads=use.count if use else None, thread_source=use.source if use else "")


def _cold_samples(fn: Callable, args: tuple, budget_ns: float, estimate_ns: float, min_samples: int,
                  max_samples: int, timer: Callable[[], int]) -> list[float]:
    """One call per sample, each after writing over a buffer larger than the last-level cache (not timed)."""
    flush = np.empty(flush_buffer_bytes(), np.uint8)
    flush_start = timer()
    flush.fill(1)
    flush_ns = timer() - flush_start
    count = min(max(int(budget_ns / max(estimate_ns + flush_ns, 1.0)), min_samples), max_samples)
    samples = []
    for i in range(count):
        flush.fill(i & 0xFF)
        samples.append(float(_batch_ns(fn, args, 1, timer)))
    return samples


def gbps(nbytes: float, ns: float) -> float:
    """Throughput in GB/s (10**9 bytes per second) of moving ``nbytes`` in ``ns`` nanoseconds."""
    return nbytes / ns if ns > 0 else math.inf


__all__ = ["Stats", "Timing", "autorange", "bench", "bench_host", "flush_buffer_bytes", "format_ns", "gbps", "shown_label",
           "summarize"]
